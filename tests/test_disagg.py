"""Disaggregated prefill/decode serving (sizing.disagg, sizing.kv_transfer): the KV hand-off,
the pools' N+1 by zone with each pair in one zone, auto's choice, an explicit layout, the CLI."""
from __future__ import annotations

import json
import math

import pytest

from llmserve.cli import main
from sizing import parallel
from sizing.catalog import load_catalog, resolve_model
from sizing.kv_transfer import FIXED_MS, MOONCAKE_BENCH_GBPS, MOONCAKE_PORT_GBPS, efficiency, kv_transfer, \
    link_bandwidth_gbps, transfer_s
from sizing.memory import Shape
from sizing.placement import PlanError, Pool
from sizing.planner import PlanRequest, plan
from sizing.roles import PoolLayout
from sizing.workload import Workload

H200 = "p5en.48xlarge"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def pools(zones: int, nodes: int = 1) -> tuple[Pool, ...]:
    return tuple(Pool(f"us-east-1{'abc'[i]}", H200, nodes) for i in range(zones))


def request(qps: float = 10.0, zones: int = 2, nodes: int = 1, mode: str = "disaggregated", **kw) -> PlanRequest:
    w = Workload(input_tokens=kw.pop("input_tokens", 5000), output_tokens=kw.pop("output_tokens", 250), qps=qps,
                 ttft_slo_s=kw.pop("ttft", 1.0), tpot_slo_s=kw.pop("tpot", 0.04),
                 slo_statistic=kw.pop("statistic", "p95"))
    return PlanRequest(workload=w, model=kw.pop("model", "gpt-oss-120b"), pools=pools(zones, nodes),
                       serving_mode=mode, **kw)


# -- the KV hand-off --------------------------------------------------------------------------
@pytest.mark.parametrize("size, gbps", MOONCAKE_BENCH_GBPS)
def test_efficiency_is_the_mooncake_table_over_the_port(size, gbps):
    assert efficiency(size) == pytest.approx(gbps / MOONCAKE_PORT_GBPS)


@pytest.mark.parametrize("small, large", [(256, 1024), (1024, 3000), (3000, 16384), (16384, 200_000), (1e5, 1e7)])
def test_efficiency_never_falls_as_messages_grow(small, large):
    assert 0 < efficiency(small) <= efficiency(large) <= 1


@pytest.mark.parametrize("bytes_, gbps, eff, ms", [
    (0.0, 400.0, 0.5, FIXED_MS),                        # nothing to send: the fixed cost only
    (1e9, 400.0, 1.0, FIXED_MS + 20.0),                 # 8 Gbit over 400 Gbit/s
    (1e9, 400.0, 0.5, FIXED_MS + 40.0),                 # half the efficiency, twice the time
    (1e9, 3200.0, 1.0, FIXED_MS + 2.5),
    (5e8, 2880.0, 0.25, FIXED_MS + 4e9 / (2880e9 * 0.25) * 1e3),
])
def test_transfer_time_is_fixed_plus_bytes_over_effective_bandwidth(bytes_, gbps, eff, ms):
    assert 1e3 * transfer_s(bytes_, gbps, eff) == pytest.approx(ms)


@pytest.mark.parametrize("link, ranks", [("efa", 1), ("efa", 4), ("efa", 8), ("nvlink", 1), ("nvlink", 8)])
def test_link_bandwidth_comes_from_the_catalog(link, ranks):
    inst = load_catalog().instance(H200)
    per_gpu = inst.network_gbps / inst.gpus if link == "efa" else inst.link.bandwidth_gbps * 8
    assert link_bandwidth_gbps(inst, link, ranks) == pytest.approx(ranks * per_gpu)


@pytest.mark.parametrize("model, tp_p, tp_d, prompt", [
    ("llama-3-70b", 8, 8, 2048), ("llama-3-70b", 8, 8, 32768), ("gpt-oss-120b", 1, 4, 5000)])
def test_transfer_bytes_are_the_decode_replicas_kv_per_token(model, tp_p, tp_d, prompt):
    inst = load_catalog().instance(H200)
    m = resolve_model(model)
    shape = Shape(m, inst, tp_d, "fp8" if model.startswith("llama") else "fp4", "bf16")
    t = kv_transfer(shape, tp_p, "efa", prompt, prompt, 16)
    assert t.bytes_per_request == pytest.approx(prompt * parallel.kv_bytes_per_token(shape, prompt))
    assert t.bandwidth_gbps == pytest.approx(min(tp_p, tp_d) * inst.network_gbps / inst.gpus)
    assert t.transfer_ms == pytest.approx(1e3 * transfer_s(t.bytes_per_request, t.bandwidth_gbps, t.efficiency))


def test_transfer_over_nvlink_is_faster_than_over_efa():
    shape = Shape(resolve_model("llama-3-70b"), load_catalog().instance(H200), 8)
    efa, nvl = (kv_transfer(shape, 8, link, 8192, 8192, 16) for link in ("efa", "nvlink"))
    assert nvl.transfer_ms < efa.transfer_ms


# -- one-client 1P1D: TTFT is the prefill plus the hand-off ----------------------------------------
@pytest.mark.parametrize("prompt", [2048, 8192, 32768])
def test_one_client_ttft_is_prefill_plus_transfer_plus_first_step(prompt):
    req = request(qps=0.05, zones=1, nodes=2, model="llama-3-70b", input_tokens=prompt, output_tokens=128,
                  ttft=30.0, tpot=0.2, statistic="mean", pool_layout=PoolLayout(1, 8, 1, 8))
    p = plan(req)
    pre, dec = p.pools_by_role["prefill"].replica_model, p.pools_by_role["decode"].replica_model
    assert p.kv_transfer.link == "efa"          # TP=8 and TP=8: separate nodes
    path = pre.at(0.05).ttft_ms + p.kv_transfer.transfer_ms + 1e3 * dec.step_s(1.0)
    assert p.fleet.real.ttft_ms == pytest.approx(path, rel=0.01)
    # one client: no queue to speak of, so the prefill is its chunks alone (a few % over one pass)
    assert 1e3 * pre.ttft0_s <= pre.at(0.05).ttft_ms <= 1.1e3 * pre.ttft0_s


# -- pools: N+1 by zone, each pair in one zone ------------------------------------------------------
@pytest.mark.parametrize("zones, qps", [(2, 5.0), (2, 10.0), (3, 10.0)])
def test_every_pool_survives_losing_any_zone(zones, qps):
    p = plan(request(qps=qps, zones=zones))
    assert p.serving_mode == "disaggregated" and p.survives_failure and p.redundancy == "zone"
    by_role = p.pools_by_role
    for zone in p.replicas_by_zone:
        left = {r: by_role[r].replicas - by_role[r].replicas_by_zone[zone] for r in ("prefill", "decode")}
        assert left["prefill"] * by_role["prefill"].capacity_per_replica_qps >= qps - 1e-9
        assert left["decode"] * by_role["decode"].capacity_per_replica_qps >= qps - 1e-9
    assert all(pool.survives_failure for pool in p.serving_pools)


@pytest.mark.parametrize("zones", [2, 3])
def test_a_zone_holds_both_roles_or_neither(zones):
    p = plan(request(qps=10.0, zones=zones))
    pre, dec = p.pools_by_role["prefill"].replicas_by_zone, p.pools_by_role["decode"].replicas_by_zone
    assert all((pre[z] > 0) == (dec[z] > 0) for z in pre)


def test_two_zones_put_a_replica_of_every_pool_in_each_zone():
    p = plan(request(qps=10.0, zones=2))
    assert all(n > 0 for pool in p.serving_pools for n in pool.replicas_by_zone.values())


def test_the_fleet_figures_are_both_pools():
    p = plan(request(qps=10.0, zones=2))
    assert p.replicas == sum(pool.replicas for pool in p.serving_pools)
    assert p.gpus_used == sum(pool.gpus_used for pool in p.serving_pools)
    assert p.tp == p.pools_by_role["decode"].tp
    assert sum(n.gpus_used for n in p.nodes) == p.gpus_used


def test_one_zone_survives_losing_a_node():
    p = plan(request(qps=10.0, zones=1, nodes=2))
    assert p.redundancy == "node" and p.survives_failure


def test_a_closed_loop_load_is_refused_naming_the_field():
    w = Workload(input_tokens=5000, output_tokens=250, qps=None, concurrency=8)
    with pytest.raises(PlanError) as exc:
        plan(PlanRequest(workload=w, model="gpt-oss-120b", pools=pools(2), serving_mode="disaggregated"))
    assert exc.value.field == "serving_mode"


# -- auto -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("qps, input_tokens, tpot", [(10.0, 5000, 0.04), (4.0, 2000, 0.05), (20.0, 8000, 0.03)])
def test_auto_picks_the_cheaper_per_million_output_tokens_and_says_why(qps, input_tokens, tpot):
    kw = dict(qps=qps, zones=2, nodes=2, input_tokens=input_tokens, tpot=tpot, ttft=2.0)
    agg, dis = plan(request(mode="aggregated", **kw)), plan(request(mode="disaggregated", **kw))
    auto = plan(request(mode="auto", **kw))
    cheaper = min((agg, dis), key=lambda p: p.per_million(p.cost_per_hour))
    assert auto.serving_mode == cheaper.serving_mode
    assert auto.serving_mode_reason.startswith(f"{cheaper.serving_mode}: ")
    assert "per 1M output tokens" in auto.serving_mode_reason


def test_aggregated_keeps_its_plan_and_names_no_reason():
    p = plan(request(mode="aggregated"))
    assert p.serving_mode == "aggregated" and p.serving_mode_reason is None and p.kv_transfer is None
    assert list(p.pools_by_role) == ["aggregated"]


# -- an explicit layout -------------------------------------------------------------------------------
@pytest.mark.parametrize("layout, survives", [(PoolLayout(2, 1, 2, 2), False), (PoolLayout(8, 1, 2, 4), True)])
def test_an_explicit_layout_is_evaluated_not_resized(layout, survives):
    p = plan(request(qps=10.0, zones=2, nodes=2, ttft=2.0, pool_layout=layout))
    pre, dec = p.pools_by_role["prefill"], p.pools_by_role["decode"]
    assert (pre.replicas, pre.tp, dec.replicas, dec.tp) == (layout.prefill_replicas, layout.prefill_tp,
                                                            layout.decode_replicas, layout.decode_tp)
    assert p.survives_failure is survives
    assert p.fleet is not None and p.fleet.replicas == layout.prefill_replicas + layout.decode_replicas
    per_zone = sum(min(pre.replicas_by_zone[z] * pre.capacity_per_replica_qps,
                       dec.replicas_by_zone[z] * dec.capacity_per_replica_qps) for z in pre.replicas_by_zone)
    assert p.capacity_qps == pytest.approx(per_zone)


# -- llm-d's published P/D guide: direction ------------------------------------------------------------
def test_llm_d_pair_direction():
    """gpt-oss-120b, 16 x H200, 5,000 in / 250 out at 45 req/s (the llm-d P/D guide, as issue 33
    quotes it: mean TTFT 532 -> 1,157 ms, ITL 25 -> 4.9 ms; 8 TP=1 prefill and 2 TP=4 decode
    replicas, https://llm-d.ai/docs/dev/guides/pd-disaggregation): P/D raises TTFT and cuts ITL."""
    kw = dict(qps=45.0, zones=1, nodes=2, ttft=5.0, tpot=0.1, statistic="mean")
    agg = plan(request(mode="aggregated", tp=4, replicas=4, **kw)).fleet.real
    pd = plan(request(pool_layout=PoolLayout(8, 1, 2, 4), **kw)).fleet.real
    assert agg.stable and pd.stable
    assert pd.ttft_ms > agg.ttft_ms
    assert pd.tpot_ms < agg.tpot_ms


# -- the CLI ----------------------------------------------------------------------------------------------
BASE = ("size", "--model", "gpt-oss-120b", "--gpu", "h200", "--input-tokens", "5000", "--output-tokens", "250",
        "--qps", "10")


@pytest.mark.parametrize("given, missing", [
    (("--prefill-replicas", "2"), "--prefill-tp"),
    (("--prefill-replicas", "2", "--prefill-tp", "1"), "--decode-replicas"),
    (("--prefill-replicas", "2", "--prefill-tp", "1", "--decode-replicas", "1"), "--decode-tp"),
    (("--decode-tp", "4"), "--prefill-replicas"),
])
def test_a_partial_layout_exits_2_naming_the_missing_option(capsys, given, missing):
    code, out, err = run(capsys, *BASE, *given)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {missing}: an explicit layout needs --prefill-replicas, --prefill-tp, "
                          "--decode-replicas and --decode-tp together (missing: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (("--serving-mode", "split"), "error: --serving-mode: unknown mode 'split'; choose one of: aggregated, "
                                  "disaggregated, auto\n"),
    (("--serving-mode", "aggregated", "--prefill-replicas", "2", "--prefill-tp", "1", "--decode-replicas", "1",
      "--decode-tp", "4"), "error: --serving-mode: an explicit prefill/decode layout is disaggregated; give "
                           "--serving-mode disaggregated or auto, or drop the layout\n"),
    (("--prefill-replicas", "0", "--prefill-tp", "1", "--decode-replicas", "1", "--decode-tp", "4"),
     "error: --prefill-replicas: must be an integer of at least 1 (got 0)\n"),
    (("--prefill-replicas", "1", "--prefill-tp", "16", "--decode-replicas", "1", "--decode-tp", "4"),
     "error: --prefill-tp: a replica stays on one node: at most 8 GPUs (got 16)\n"),
    (("--prefill-replicas", "2", "--prefill-tp", "3", "--decode-replicas", "2", "--decode-tp", "4"),
     "error: --prefill-tp: prefill TP=3: tensor parallel 3 does not divide the 64 attention heads of gpt-oss-120b; "
     "use one of 1, 2, 4, 8\n"),
    (("--sweep", "--prefill-replicas", "2", "--prefill-tp", "1", "--decode-replicas", "1", "--decode-tp", "4"),
     "error: --prefill-replicas: the sweep plans its own layouts; drop the layout or size without --sweep\n"),
])
def test_bad_serving_flags_exit_2_with_one_line(capsys, args, message):
    code, out, err = run(capsys, *BASE, *args)
    assert (code, out, err) == (2, "", message)


def test_a_closed_loop_exits_2_naming_the_serving_mode(capsys):
    code, out, err = run(capsys, "size", "--concurrency", "4", "--serving-mode", "disaggregated")
    assert (code, out) == (2, "")
    assert err == ("error: --serving-mode: disaggregated serving is planned for an open-loop load (give workload.qps, "
                   "not workload.concurrency)\n")


def test_disaggregated_zones_2_json(capsys):
    code, out, err = run(capsys, *BASE, "--zones", "2", "--serving-mode", "disaggregated", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["serving_mode"] == "disaggregated" and d["survives_failure"] is True
    assert [p["role"] for p in d["pools"]] == ["prefill", "decode"]
    for p in d["pools"]:
        assert {"role", "replicas", "tp", "replicas_by_zone", "capacity_per_replica_qps", "capacity_qps",
                "capacity_after_zone_loss_qps", "survives_failure"} <= set(p)
        assert sorted(p["replicas_by_zone"]) == ["us-east-1a", "us-east-1b"]
        assert all(n >= 1 for n in p["replicas_by_zone"].values()) and p["survives_failure"]
    t = d["kv_transfer"]
    assert t["link"] in ("nvlink", "efa") and t["transfer_ms"] > 0 and t["transfer_ms_at_statistic"] >= t["transfer_ms"]
    assert t["bytes_per_request"] > 0


def test_auto_json_says_why(capsys):
    code, out, _ = run(capsys, *BASE, "--zones", "2", "--serving-mode", "auto", "--json")
    d = json.loads(out)
    assert code == 0 and d["serving_mode"] in ("aggregated", "disaggregated")
    assert d["serving_mode_reason"].startswith(d["serving_mode"] + ": ")


def test_aggregated_json_names_its_one_pool(capsys):
    code, out, _ = run(capsys, *BASE, "--json")
    d = json.loads(out)
    assert code == 0 and d["serving_mode"] == "aggregated" and "kv_transfer" not in d
    assert [(p["role"], p["replicas"]) for p in d["pools"]] == [("aggregated", d["replicas"])]


def test_the_report_shows_the_pools(capsys):
    code, out, _ = run(capsys, *BASE, "--zones", "2", "--serving-mode", "disaggregated")
    assert code == 0
    assert "Pool prefill: " in out and "Pool decode: " in out and "KV hand-off over " in out
    assert math.isfinite(len(out))


# -- consumers read a disaggregated plan without failing --------------------------------------------
def test_a_disaggregated_plan_reaches_the_deployment_spec_and_the_simulator():
    """The planner's disaggregated plan builds the deployment's prefill and decode pools and a
    simulator configuration, and its JSON says the mode."""
    from dataclasses import replace

    from deployment.spec import deployment_spec
    from simulator.plan import config_from_plan
    from sizing.report import plan_to_dict
    from tests.stacks import plan_for

    settings, _ = plan_for("prod")
    p = plan(replace(settings.plan_request(), serving_mode="disaggregated"))
    assert p.serving_mode == "disaggregated"
    spec = deployment_spec(p, settings)
    assert {pool.role for pool in spec.serving.pools} == {"prefill", "decode"}
    assert config_from_plan(p, 10.0) is not None
    assert plan_to_dict(p)["serving_mode"] == "disaggregated"


# -- the sweep ranks both modes --------------------------------------------------------------------------
SWEEP = ("size", "--model", "gpt-oss-120b", "--input-tokens", "8000", "--output-tokens", "250", "--qps", "5",
         "--ttft-slo", "2", "--tpot-slo", "0.02", "--zones", "2", "--sweep", "--json")


def sweep_rows(capsys, mode: str | None) -> list[dict]:
    code, out, err = run(capsys, *SWEEP, *(("--serving-mode", mode) if mode else ()))
    assert code == 0, err
    return json.loads(out)["options"]


def is_disaggregated(row: dict) -> bool:
    return row["layout"].startswith("prefill")


def test_the_sweep_with_auto_ranks_both_modes_by_cost(capsys):
    rows = [r for r in sweep_rows(capsys, "auto") if r["feasible"]]
    assert any(is_disaggregated(r) for r in rows) and any(not is_disaggregated(r) for r in rows)
    costs = [r["node_cost_per_million"] for r in rows if r["node_cost_per_million"] is not None]
    assert costs == sorted(costs)


def test_the_sweep_without_a_mode_is_unchanged_and_disaggregated_ranks_its_own(capsys):
    plain = sweep_rows(capsys, None)
    assert not any(is_disaggregated(r) for r in plain)
    assert sweep_rows(capsys, "aggregated") == plain
    assert all(is_disaggregated(r) for r in sweep_rows(capsys, "disaggregated"))


# -- levers not planned together ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--mig", "3g.40gb", "--serving-mode", "disaggregated"),
     "error: --mig: not planned together with disaggregated serving (serving mode disaggregated); plan one of the two"),
    (("--serving-mode", "auto", "--speculative", "eagle3", "--acceptance-rate", "0.7"),
     "error: --speculative: not planned together with disaggregated serving (serving mode auto); plan one of the two"),
], ids=["mig", "speculative"])
def test_a_lever_the_pools_are_not_sized_for_is_refused_naming_it(capsys, args, expected):
    code, out, err = run(capsys, "size", *args)
    assert (code, out, err.strip()) == (2, "", expected)


def test_a_stack_with_both_names_its_speculative_key():
    from settings import settings_from_config, sizing_problem
    from sizing.workload import SizingError
    from tests.stacks import stack_config, with_overrides
    settings = settings_from_config("prod", with_overrides(stack_config("prod"), {"serving": {
        "mode": "disaggregated", "speculative": {"method": "ngram", "draftTokens": 3, "acceptanceRate": 0.6}}}))
    with pytest.raises(SizingError) as err:
        plan(settings.plan_request())
    assert sizing_problem(err.value) == (
        "llm-serving:serving.speculative: not planned together with disaggregated serving (serving mode "
        "disaggregated); plan one of the two")
