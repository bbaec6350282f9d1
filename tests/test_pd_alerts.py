"""The alerts of a disaggregated or speculative plan, under promtool: built only for such a plan,
each threshold read from it, each alert firing just past its threshold and silent just short of
it (the decode KV alert also silent on a prefill replica's full cache), and the twin's
disaggregated replicas exposing the series they read, under the names of vLLM's sources."""
from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

import pd_plans
from observability.pd_alerts import PdAlertPolicy, PdThresholds, pd_alerts
from observability.rules import alert_names, render_rule_file, rule_groups
from settings import stack_settings
from simulator.disagg import PrefillLoss
from simulator.plan import disagg_config_from_plan
from sizing.planner import plan as make_plan
from test_rules_promtool import ABOVE, BELOW, EVAL, NAMESPACE, counter, expand, gauge, promtool, replica
from twin import vllm_metrics as vm
from twin.pd_timeline import build_disaggregated
from twin.timeline import values_at

PD_ALERTS = ["LLMServingSpecAcceptanceBelowPlan", "LLMServingKVTransferSlowerThanPlan", "LLMServingKVTransferFailed",
             "LLMServingDecodeKVCacheNearlyFull"]


@pytest.fixture(scope="module")
def prod():
    return make_plan(stack_settings("prod").plan_request())


@pytest.fixture(scope="module")
def pd(prod):
    return replace(pd_plans.disaggregated(prod), speculative=pd_plans.speculative(3, 0.7))


@pytest.mark.parametrize("kind, names", [
    ("aggregated", []),
    ("speculative", PD_ALERTS[:1]),
    ("speculative, off", []),
    ("disaggregated", PD_ALERTS[1:]),
    ("both", PD_ALERTS),
])
def test_the_alerts_come_only_with_what_the_plan_runs(prod, kind, names):
    plans = {"aggregated": prod, "speculative": replace(prod, speculative=pd_plans.speculative()),
             "speculative, off": replace(prod, speculative=pd_plans.speculative(enabled=False)),
             "disaggregated": pd_plans.disaggregated(prod),
             "both": replace(pd_plans.disaggregated(prod), speculative=pd_plans.speculative())}
    assert [a.name for a in pd_alerts(plans[kind])] == names
    groups = rule_groups(plans[kind], NAMESPACE)
    assert [n for n in alert_names(groups) if n in PD_ALERTS] == names
    assert ("llm-serving.disaggregated-speculative" in [g["name"] for g in groups]) is bool(names)


@pytest.mark.parametrize("k, a", [(3, 0.7), (5, 0.5), (1, 0.9)])
def test_the_acceptance_threshold_is_vllms_ratio_at_the_planned_acceptance(prod, k, a):
    t = PdThresholds.from_plan(replace(prod, speculative=pd_plans.speculative(k, a)))
    e = (1 - a ** (k + 1)) / (1 - a)
    assert t.planned_acceptance == pytest.approx((e - 1) / k, abs=1e-4)


def test_the_transfer_threshold_follows_the_link(prod):
    fast, slow = (PdThresholds.from_plan(pd_plans.disaggregated(prod, transfer=pd_plans.kv_transfer(prod, bandwidth_gbps=b)))
                  for b in (3200.0, 400.0))
    assert slow.copy_s == pytest.approx(8 * fast.copy_s, rel=1e-3)


# -- promtool ----------------------------------------------------------------------------------------
def cases(plan) -> list[tuple[str, bool, list[dict], list[dict]]]:
    t, policy = PdThresholds.from_plan(plan), PdAlertPolicy()
    acceptance = policy.acceptance_share * t.planned_acceptance
    copy = policy.transfer_time_factor * t.copy_s
    decode, prefill = replica("us-east-1a", 0), {**replica("us-east-1a", 1)}
    warning = [{"severity": "warning"}]
    xfer = [counter("vllm:nixl_xfer_time_seconds_count", decode, 10.0),
            counter("vllm:nixl_xfer_time_seconds_count", prefill, 0.0)]
    out = []
    for factor, fires in ((BELOW, True), (ABOVE, False)):
        out.append(("LLMServingSpecAcceptanceBelowPlan", fires,
                    [counter("vllm:spec_decode_num_draft_tokens_total", decode, 300.0),
                     counter("vllm:spec_decode_num_accepted_tokens_total", decode, factor * acceptance * 300.0)],
                    warning if fires else []))
    for factor, fires in ((ABOVE, True), (BELOW, False)):
        out.append(("LLMServingKVTransferSlowerThanPlan", fires,
                    [counter("vllm:nixl_xfer_time_seconds_count", decode, 10.0),
                     counter("vllm:nixl_xfer_time_seconds_sum", decode, factor * copy * 10.0)],
                    warning if fires else []))
        kv = factor * t.decode_kv_usage
        out.append(("LLMServingDecodeKVCacheNearlyFull", fires,
                    # a prefill replica (no transfer of its own) with a full cache never counts
                    xfer + [gauge("vllm:kv_cache_usage_perc", decode, kv), gauge("vllm:kv_cache_usage_perc", prefill, 0.99)],
                    [{"severity": "warning", "zone": decode["zone"], "pod": decode["pod"]}] if fires else []))
    out += [
        ("LLMServingKVTransferFailed", True, [counter("vllm:nixl_num_failed_transfers_total", decode, 0.05)],
         [{"severity": "critical"}]),
        ("LLMServingKVTransferFailed", False, [counter("vllm:nixl_num_failed_transfers_total", decode, 0.0)], []),
    ]
    return out


@pytest.fixture
def rules_path(pd, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(render_rule_file(rule_groups(pd, NAMESPACE)))
    return path


@pytest.mark.promtool
def test_promtool_check_rules_accepts_the_disaggregated_speculative_rule_file(rules_path):
    result = promtool("check", "rules", str(rules_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_pd_alert_has_a_firing_and_a_silent_case(pd):
    assert {a for a, fires, _, _ in cases(pd) if fires} == set(PD_ALERTS)
    assert {a for a, fires, _, _ in cases(pd) if not fires} == set(PD_ALERTS)


@pytest.mark.promtool
def test_every_pd_alert_fires_past_its_threshold_and_not_short_of_it(pd, rules_path):
    annotations = {r["alert"]: r["annotations"] for g in yaml.safe_load(rules_path.read_text())["groups"]
                   for r in g["rules"] if "alert" in r}
    tests = [{"interval": "1m", "input_series": series, "alert_rule_test": [{
        "eval_time": EVAL, "alertname": alert,
        "exp_alerts": [{"exp_labels": labels, "exp_annotations": {k: expand(v, labels)
                                                                  for k, v in annotations[alert].items()}}
                       for labels in expected]}]} for alert, _, series, expected in cases(pd)]
    suite = rules_path.parent / "rules_test.yaml"
    suite.write_text(yaml.safe_dump({"rule_files": [rules_path.name], "evaluation_interval": "1m", "tests": tests},
                                    sort_keys=False))
    result = promtool("test", "rules", str(suite))
    assert result.returncode == 0, result.stdout + result.stderr


# -- the twin's disaggregated replicas -------------------------------------------------------------
@pytest.fixture(scope="module")
def lost_prefill(prod):
    slow = replace(pd_plans.disaggregated(prod, transfer=pd_plans.kv_transfer(prod, fixed_ms=300.0)),
                   speculative=pd_plans.speculative())
    return build_disaggregated(disagg_config_from_plan(slow, 60.0, prefill_loss=PrefillLoss(30.0)))


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = out.get(name.split("{")[0], 0.0) + float(value)
    return out


def test_the_decode_replicas_expose_what_the_pd_alerts_read(lost_prefill, prod):
    tl = lost_prefill
    k = len(tl.replicas[0].up) - 1
    decode = [rep for rep in tl.replicas if rep.name.startswith("decode-")]
    served = [parse(vm.render("m", values_at(rep, k), 0.0, rep.families)) for rep in decode]
    transfers, failed = len(tl.result.transfers), tl.result.failed_transfers
    assert failed > 0
    assert sum(s["vllm:nixl_num_failed_transfers_total"] for s in served) == failed
    assert sum(s["vllm:nixl_xfer_time_seconds_count"] for s in served) == transfers
    copy_s = tl.config.transfer_s_per_token * tl.config.workload.input_tokens
    assert sum(s["vllm:nixl_xfer_time_seconds_sum"] for s in served) == pytest.approx(transfers * copy_s, rel=1e-6)
    accepted = sum(s["vllm:spec_decode_num_accepted_tokens_total"] for s in served)
    drafted = sum(s["vllm:spec_decode_num_draft_tokens_total"] for s in served)
    planned = PdThresholds.from_plan(replace(prod, speculative=pd_plans.speculative())).planned_acceptance
    assert accepted / drafted == pytest.approx(planned, rel=0.05)


def test_the_lost_prefill_replica_is_down_from_its_loss(lost_prefill):
    lost = next(rep for rep in lost_prefill.replicas if rep.name == lost_prefill.result.prefill_lost)
    assert lost.up[29] and not any(lost.up[31:])


def test_promtool_lints_nothing_in_the_pd_families(lost_prefill, metrics_lints, upstream_file):
    rep = next(rep for rep in lost_prefill.replicas if rep.name.startswith("decode-"))
    text = vm.render("m", values_at(rep, 40), 0.0, rep.families)
    baseline = metrics_lints(upstream_file("samples/vllm-metrics-0.29.0-inferstack.txt").read_text())

    def kinds(lints: set[str]) -> set[str]:      # what promtool finds, whichever family it is
        return {line.split(" ", 1)[1] if line.startswith("vllm:") else line for line in lints}
    assert kinds(metrics_lints(text)) <= kinds(baseline)


def test_the_twins_exporters_serve_the_disaggregated_replicas(lost_prefill):
    """Each prefill and decode replica gets its /metrics (the NIXL families on both pools, the
    spec-decode ones on the speculative decode pool); the lost prefill replica answers 503."""
    import urllib.error
    import urllib.request

    from twin.exporters import Clock, Exporters

    class At45(Clock):                   # 45 simulated seconds in: after the prefill replica's loss
        def now(self) -> float:
            return 45.0

    with Exporters(lost_prefill, At45(1.0), NAMESPACE, "m") as exporters:
        bodies = {}
        for target in exporters.targets:
            if target.job != "vllm":
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{target.port}/metrics", timeout=10) as answer:
                    bodies[target.labels["pod"]] = answer.read().decode()
            except urllib.error.HTTPError as exc:
                bodies[target.labels["pod"]] = exc.code
    lost = f"vllm-{lost_prefill.result.prefill_lost}-twin"
    assert bodies.pop(lost) == 503
    assert all("# TYPE vllm:nixl_xfer_time_seconds histogram" in body for body in bodies.values())
    assert {pod for pod, body in bodies.items() if "vllm:spec_decode_num_drafts_total{" in body} == {
        pod for pod in bodies if pod.startswith("vllm-decode-")}


def test_the_twin_emulates_a_disaggregated_plan_with_its_two_pools(prod):
    from simulator.disagg import DisaggConfig
    from twin.scenario import Twin
    from twin.servers import TwinError

    plan = pd_plans.disaggregated(prod)
    twin = Twin(plan, NAMESPACE, duration_s=60.0)
    assert isinstance(twin.config, DisaggConfig)
    assert [s.name for s in twin.config.decode.replicas] == ["decode-us-east-1a-0", "decode-us-east-1b-0"]
    with pytest.raises(TwinError, match=r"^--slowdown: not emulated for a disaggregated plan; leave it at 1$"):
        Twin(plan, NAMESPACE, duration_s=60.0, slowdown=1.2)
    assert not isinstance(Twin(prod, NAMESPACE, duration_s=60.0).config, DisaggConfig)
