"""The simulator on a disaggregated plan (a two-stage queue with the KV transfer between) and with
speculative decoding (sampled acceptance): TTFT is prefill + transfer + the decode's first step,
decode admission holds to the decode replica's KV and max_num_seqs, the sampled acceptance has
the formula's mean, a prefill replica lost mid-transfer goes by vLLM's kv_load_failure_policy, and
a zone lost in either pool loses no request. Short runs keep it fast."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

import pd_plans
from settings import stack_settings
from simulator import config_from_plan, simulate, to_dict
from simulator.disagg import PrefillLoss, simulate_disaggregated
from simulator.loop import ZoneFailure
from simulator.plan import disagg_config_from_plan, transfer_terms
from simulator.replica import Speculation
from simulator.report import disagg_to_dict
from sizing.planner import plan as make_plan


@pytest.fixture(scope="module")
def prod():
    return make_plan(stack_settings("prod").plan_request())


@pytest.fixture(scope="module")
def pd(prod):
    return pd_plans.disaggregated(prod)


def run(plan, duration=60.0, **kw):
    result = simulate_disaggregated(disagg_config_from_plan(plan, duration, **kw))
    return result, disagg_to_dict(result)


def max_overlap(intervals) -> int:
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


# -- the two-stage queue ----------------------------------------------------------------------------
def test_the_mean_prompt_transfers_in_the_plans_transfer_time(pd):
    fixed_s, per_token_s = transfer_terms(pd)
    tokens = pd.request.workload.input_tokens
    assert 1e3 * (fixed_s + per_token_s * tokens) == pytest.approx(pd.kv_transfer.transfer_ms, rel=1e-9)


def test_ttft_at_low_load_is_prefill_plus_transfer_plus_the_decodes_first_step(pd):
    """One request at a time: TTFT = the prompt's prefill step + the transfer + the decode step
    that recomputes the last prompt token and samples the first output token (vLLM's remote
    prefill: scheduler `_update_waiting_for_remote_kv`)."""
    result, out = run(pd, 120.0, qps=0.2)
    cost = result.config.prefill.cost
    prompt = pd.request.workload.input_tokens
    expected_ms = 1e3 * (cost.step_s(0, prompt) + cost.step_s(0, 1)) + pd.kv_transfer.transfer_ms
    assert out["ttft_ms"]["p50"] == pytest.approx(expected_ms, rel=0.02)
    assert out["kv_transfer"]["transfer_ms"]["mean"] == pytest.approx(pd.kv_transfer.transfer_ms, abs=1e-3)


def test_tpot_is_the_decode_replicas_alone_no_prefill_interference(prod, pd):
    """At the plan's load the decode pool never runs a prompt chunk beside its decodes."""
    result, out = run(pd, 60.0)
    assert all(r.prefill_s / r.busy_s < 0.05 for r in result.decode if r.busy_s)
    aggregated = to_dict(simulate(config_from_plan(prod, 60.0)))
    assert out["tpot_ms"]["p99"] < aggregated["tpot_ms"]["p99"]


def test_a_pd_pair_never_spans_zones(pd):
    result, _ = run(pd, 30.0)
    zone = {rep.name: rep.zone for rep in result.decode}
    assert all(r.replica in zone for r in result.requests)
    assert result.transfer_s and len(result.transfer_s) == len(result.requests)
    for d in result.decode:
        assert d.served == sum(1 for r in result.requests if r.replica == d.name)


@pytest.mark.parametrize("limit, changes", [
    (2, {"max_num_seqs": 2}),
    (3, {"kv_capacity_tokens": 3 * 1000 + 500}),
], ids=["max_num_seqs", "KV capacity"])
def test_decode_admission_holds_to_the_decode_replicas_limit(pd, limit, changes):
    """Requests decoding at once on one decode replica (first token to last) never exceed its
    max_num_seqs, nor the prompts its KV holds; the rest wait for admission, none lost."""
    cfg = disagg_config_from_plan(pd, 30.0, qps=4.0)
    cfg = replace(cfg, decode=replace(cfg.decode, **changes), workload=replace(cfg.workload, max_model_len=1300))
    result = simulate_disaggregated(cfg)
    assert not result.lost and not result.failed
    for d in result.decode:
        spans = [(r.t_first, r.t_done) for r in result.requests if r.replica == d.name]
        assert 0 < max_overlap(spans) <= limit


# -- speculative decoding -------------------------------------------------------------------------
@pytest.mark.parametrize("k, a", [(1, 0.5), (3, 0.7), (5, 0.8), (4, 0.0)])
def test_sampled_acceptance_has_the_formulas_mean(k, a):
    spec = Speculation(k, a, None, "seed")
    steps, accepted = spec.steps_for(200_000)
    emitted_per_step = 1 + accepted / steps
    assert emitted_per_step == pytest.approx((1 - a ** (k + 1)) / (1 - a), rel=0.01)
    assert accepted <= k * steps


def test_the_run_reports_vllms_counters_at_the_planned_acceptance(prod):
    out = to_dict(simulate(config_from_plan(replace(prod, speculative=pd_plans.speculative(3, 0.7)), 60.0)))
    sp = out["speculative"]
    assert sp["mean_acceptance_length"] == pytest.approx(sp["mean_acceptance_length_planned"], rel=0.02)
    assert sp["acceptance"] == pytest.approx((sp["mean_acceptance_length_planned"] - 1) / 3, rel=0.03)
    assert sp["num_draft_tokens"] == 3 * sp["num_drafts"]


def test_one_sequence_alone_decodes_at_the_verify_step_over_the_tokens_it_emits(prod):
    """TPOT of a request alone = the verify step at batch 1 / the tokens a step emits (E), so the
    speculative step's price is the plan's (`Speculation.verify`), not the plain decode step's."""
    spec = pd_plans.speculative(3, 0.7)
    cfg = config_from_plan(replace(prod, speculative=spec), 300.0, qps=0.05)
    out = to_dict(simulate(cfg))
    assert out["tpot_ms"]["p50"] == pytest.approx(1e3 * cfg.spec_verify.decode_s(1) / spec.mean_acceptance_length,
                                                 rel=0.1)
    plain = to_dict(simulate(config_from_plan(prod, 300.0, qps=0.05)))
    assert plain["tpot_ms"]["p50"] > 1.1 * out["tpot_ms"]["p50"]


def test_a_speculative_plan_that_is_off_simulates_as_the_plain_plan(prod):
    plain = to_dict(simulate(config_from_plan(prod, 30.0)))
    off = to_dict(simulate(config_from_plan(replace(prod, speculative=pd_plans.speculative(enabled=False)), 30.0)))
    assert json.dumps(off, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert "speculative" not in plain


def test_the_decode_pool_speculates_on_a_disaggregated_plan(pd):
    _, plain = run(pd, 30.0)
    _, spec = run(replace(pd, speculative=pd_plans.speculative()), 30.0)
    assert spec["speculative"]["num_drafts"] > 0 and "speculative" not in plain
    assert spec["tpot_ms"]["mean"] < plain["tpot_ms"]["mean"]


# -- failures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slow_transfer(prod):
    """A transfer of half a second: a prefill replica lost at any instant has some in flight."""
    return pd_plans.disaggregated(prod, transfer=pd_plans.kv_transfer(prod, fixed_ms=500.0))


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_a_prefill_replica_lost_mid_transfer_goes_by_kv_load_failure_policy(slow_transfer, policy):
    """recompute (vLLM's default): the decode replica recomputes the prompt, nothing fails; fail:
    each request whose KV was lost fails (an error finish reason), none is recomputed."""
    result, out = run(slow_transfer, 40.0, prefill_loss=PrefillLoss(20.0), kv_load_failure_policy=policy)
    kv = out["kv_transfer"]
    assert kv["failed_transfers"] > 0
    assert out["prefill_lost"]["replica"].startswith("prefill-")
    if policy == "recompute":
        assert (kv["recomputed_prefills"], out["requests_failed"], out["requests_lost"]) == (kv["failed_transfers"], 0, 0)
    else:
        assert (kv["recomputed_prefills"], out["requests_failed"]) == (0, kv["failed_transfers"])
        assert out["requests_lost"] == out["requests_failed"]
    assert sum(d.served for d in result.decode) + out["requests_lost"] == out["requests"]


def test_a_lease_that_runs_out_before_decode_admission_is_a_failed_load(pd):
    """A decode replica whose KV holds no prompt keeps every request waiting past the lease."""
    cfg = replace(disagg_config_from_plan(pd, 10.0, qps=1.0), kv_lease_s=1.0)
    cfg = replace(cfg, decode=replace(cfg.decode, max_num_seqs=1))
    result = simulate_disaggregated(cfg)
    assert result.kv_expired > 0 and result.recomputed_prefills == result.failed_transfers >= result.kv_expired
    assert not result.lost


@pytest.mark.parametrize("pools", [("prefill",), ("decode",), ("prefill", "decode")],
                         ids=["prefill pool", "decode pool", "both pools"])
def test_a_zone_lost_per_pool_loses_no_request(pd, pools):
    _, out = run(pd, 90.0, failure=ZoneFailure("us-east-1a", 30.0, 60.0), failure_pools=pools)
    lost = out["failure"]["replicas_lost"]
    assert sorted(name.split("-")[0] for name in lost) == sorted(pools)
    assert all("us-east-1a" in name for name in lost)
    assert out["requests_lost"] == 0
    assert {"prefill", "decode"} == set(out["pools"]) and all(0 <= p["goodput"] <= 1 for p in out["pools"].values())


def test_while_a_pools_zone_is_down_its_requests_pair_in_the_other_zone(pd):
    result, _ = run(pd, 90.0, failure=ZoneFailure("us-east-1a", 30.0, 60.0), failure_pools=("prefill",))
    during = [r for r in result.requests if 31.0 <= r.arrival < 59.0]
    assert during and all(r.replica.startswith("decode-us-east-1b") for r in during)


def test_the_same_seed_gives_the_same_report(pd):
    assert json.dumps(run(pd, 20.0, seed=4)[1]) == json.dumps(run(pd, 20.0, seed=4)[1])


def test_a_replica_model_that_prices_its_verify_step_is_used_as_it_is(prod):
    """sizing.speculative's replica: `step` prices the verify step, `base_step` the plain one; the
    simulator takes the plain step for its engine and the replica's own verify step for speculation."""
    from types import SimpleNamespace

    from simulator.cost import VerifyStep, step_cost, verify_cost

    base = prod.replica_model.step
    verify = SimpleNamespace(decode_s=lambda n: 2 * base.decode_s(n), step_s=lambda n, c: 2 * base.step_s(n, c))
    speculative_model = SimpleNamespace(step=verify, base_step=base)
    assert step_cost(speculative_model) is base and verify_cost(speculative_model, 3) is verify
    assert step_cost(prod.replica_model) is base and isinstance(verify_cost(prod.replica_model, 3), VerifyStep)
