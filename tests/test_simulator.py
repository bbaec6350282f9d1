"""The serving simulator: its cost model is the analytic engine's, it agrees with it on the
reference case, no request is lost when a zone fails, overload shows, and the routers behave
as their names say. Short simulated durations keep this file fast."""
from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from settings import stack_settings
from simulator import (ReplicaSpec, SimConfig, StepCost, WorkloadSpec, ZoneFailure, config_from_plan,
                       parse_fail_zone, replica_model, simulate, simulated_capacity_qps, step_cost, summarize,
                       to_dict)
from simulator.replica import Replica
from simulator.workload import Request, generate
from sizing.planner import plan as make_plan


@pytest.fixture(scope="module")
def prod():
    return make_plan(stack_settings("prod").plan_request())


@pytest.fixture(scope="module")
def dev():
    return make_plan(stack_settings("dev").plan_request())


def tight_cache_config(**changes) -> SimConfig:
    """Two small replicas whose KV cache holds about 15 full sequences: preemption guaranteed."""
    cfg = SimConfig(
        workload=WorkloadSpec(qps=12, duration_s=120, input_tokens=1000, output_tokens=300, max_model_len=1300,
                              lengths="lognormal", seed=3),
        replicas=(ReplicaSpec("a", "z1"), ReplicaSpec("b", "z2")),
        cost=StepCost.additive(((0.008, 5e-5), (0.0, 6e-5)), 3.6e-5),
        max_num_batched_tokens=1024, max_num_seqs=256, kv_capacity_tokens=20_000,
        ttft_slo_s=1.0, tpot_slo_s=0.040, router="least-pending-tokens")
    return replace(cfg, **changes)


# -- the cost model is the analytic engine's -------------------------------------------------------
@pytest.mark.parametrize("n", [1, 17, 50, 200, 472])
def test_a_decode_step_costs_what_the_analytic_step_costs(prod, n):
    model = replica_model(prod)
    assert step_cost(model).step_s(n, 0) == pytest.approx(model.step_s(n), rel=1e-12)


def test_prefilling_a_whole_prompt_costs_the_analytic_prefill_share(prod):
    model = replica_model(prod)
    prompt = prod.request.workload.input_tokens
    assert step_cost(model).step_s(0, prompt) == pytest.approx(model.share_per_request_s, rel=1e-12)


# -- agreement with the analytic engine (reference case) -------------------------------------------
@pytest.mark.parametrize("qps, replicas", [(10, 2), (10, 1)], ids=["all replicas up", "after losing a zone"])
def test_mean_tpot_agrees_with_the_analytic_engine_within_10_percent(prod, qps, replicas):
    cfg = config_from_plan(prod, duration_s=600, qps=qps, replicas=replicas)
    simulated = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)["tpot_ms"]["mean"]
    analytic = replica_model(prod).at(qps / replicas).tpot_ms
    assert simulated == pytest.approx(analytic, rel=0.10)


def test_capacity_agrees_with_the_analytic_engine_within_10_percent(prod):
    simulated = simulated_capacity_qps(prod, duration_s=300)
    assert simulated == pytest.approx(prod.capacity_per_replica.qps, rel=0.10)


# -- zone failure ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("router", ["round-robin", "least-outstanding", "least-pending-tokens"])
@pytest.mark.parametrize("arrivals", ["poisson", "gamma"])
def test_no_request_is_lost_when_a_zone_fails(prod, router, arrivals):
    fail = parse_fail_zone("us-east-1b@200:400", 600)
    result = simulate(config_from_plan(prod, 600, router=router, arrivals=arrivals, lengths="lognormal",
                                       failure=fail))
    data = to_dict(result)
    assert data["requests_lost"] == 0
    assert all(r.t_done is not None for r in result.requests)
    assert data["requests"] == sum(w["requests"] for w in data["windows"].values())


def test_every_request_held_by_the_lost_replica_is_retried_once(prod):
    fail = ZoneFailure("us-east-1b", 200.0, None)
    result = simulate(config_from_plan(prod, 400, failure=fail))
    in_flight_on_lost = [r for r in result.requests if r.attempts == 2]
    assert result.retried == len(in_flight_on_lost) > 0
    assert all(r.arrival < 200 and r.replica == "us-east-1a-p5/node-0/0" for r in in_flight_on_lost)
    assert not [r for r in result.requests if r.arrival >= 200 and r.replica.startswith("us-east-1b")]


def test_windows_cover_before_during_and_after_the_failure(prod):
    data = to_dict(simulate(config_from_plan(prod, 600, failure=parse_fail_zone("us-east-1a@200:400", 600))))
    assert [(n, w["from_s"], w["to_s"]) for n, w in data["windows"].items()] == [
        ("before", 0.0, 200.0), ("during", 200.0, 400.0), ("after", 400.0, 600.0)]
    for window in data["windows"].values():
        assert set(window) >= {"ttft_ms", "tpot_ms", "queue_ms", "e2e_ms", "goodput", "requests", "requests_lost"}


def test_the_surviving_replica_slows_while_the_zone_is_down(prod):
    data = to_dict(simulate(config_from_plan(prod, 600, failure=parse_fail_zone("us-east-1b@200:400", 600))))
    w = data["windows"]
    assert w["during"]["tpot_ms"]["mean"] > 1.3 * w["before"]["tpot_ms"]["mean"]
    assert w["after"]["tpot_ms"]["mean"] < 1.1 * w["before"]["tpot_ms"]["mean"]


def test_with_no_replica_left_requests_are_lost_and_counted(dev):
    result = simulate(config_from_plan(dev, 300, failure=ZoneFailure("us-east-1a", 100.0, None)))
    data = to_dict(result)
    during = data["windows"]["during"]
    assert during["requests_lost"] == during["requests"] > 0
    held_at_failure = sum(1 for r in result.requests if r.arrival < 100 and r.lost)
    assert data["requests_lost"] == during["requests"] + held_at_failure


@pytest.mark.parametrize("text, message", [
    ("us-east-1b", "'us-east-1b': expected ZONE@T or ZONE@T:T2 in seconds, e.g. us-east-1b@600:1200"),
    ("us-east-1b@700", "'us-east-1b@700': the failure starts at 700 s, after the 600 s run"),
    ("us-east-1b@300:200", "'us-east-1b@300:200': the zone comes back at 200 s, not after it fails at 300 s"),
])
def test_fail_zone_errors_say_what_is_wrong(text, message):
    with pytest.raises(ValueError) as exc:
        parse_fail_zone(text, 600)
    assert str(exc.value) == message


# -- overload ----------------------------------------------------------------------------------------------
def test_goodput_falls_when_qps_exceeds_capacity(prod):
    cap = prod.capacity_per_replica.qps
    below = to_dict(simulate(config_from_plan(prod, 300, 0.6 * cap, replicas=1)))
    above = to_dict(simulate(config_from_plan(prod, 300, 1.3 * cap, replicas=1)))
    assert below["goodput"] > 0.99
    assert above["goodput"] < 0.5
    assert above["ttft_ms"]["p95"] > 10 * below["ttft_ms"]["p95"]


# -- the routers -------------------------------------------------------------------------------------------
def imbalance(prod, router: str, measure) -> float:
    """Mean absolute difference between the two replicas' load, seen at every routing decision."""
    gaps = []

    def watch(t, replicas, chosen):
        a, b = (measure(rep, t) for rep in replicas)
        gaps.append(abs(a - b))

    simulate(config_from_plan(prod, 300, 24, router=router, lengths="lognormal", length_cv=1.0), on_route=watch)
    return statistics.fmean(gaps)


def test_round_robin_splits_requests_evenly(prod):
    data = to_dict(simulate(config_from_plan(prod, 300, 24, router="round-robin", lengths="lognormal")))
    counts = [r["requests"] for r in data["replicas"]]
    assert max(counts) - min(counts) <= 1


def test_least_outstanding_balances_requests_in_flight_better_than_round_robin(prod):
    def outstanding(rep, t):
        return rep.outstanding()
    assert imbalance(prod, "least-outstanding", outstanding) < 0.5 * imbalance(prod, "round-robin", outstanding)


def test_least_pending_tokens_balances_work_better_than_the_others(prod):
    def tokens(rep, t):
        return rep.pending_tokens(t)
    lpt = imbalance(prod, "least-pending-tokens", tokens)
    assert lpt < 0.5 * imbalance(prod, "round-robin", tokens)
    assert lpt < imbalance(prod, "least-outstanding", tokens)


# -- the engine's bookkeeping ----------------------------------------------------------------------------
def test_kv_cache_pressure_preempts_and_loses_nothing():
    checks = []

    def watch(t, replicas, chosen):
        for rep in replicas:
            checks.append((rep.kv_used() <= rep.kv_cap, rep.pending_tokens(rep.clock) == rep.pending_tokens_slow()
                           if not rep.busy else True))

    result = simulate(tight_cache_config(failure=ZoneFailure("z2", 40.0, 80.0)), on_route=watch)
    data = to_dict(result)
    assert sum(r["preemptions"] for r in data["replicas"]) > 0
    assert data["requests_lost"] == 0
    assert all(kv_ok and tokens_ok for kv_ok, tokens_ok in checks)


def test_pending_tokens_match_a_recount_from_every_request():
    mismatches = []

    def watch(t, replicas, chosen):
        for rep in replicas:
            if not rep.busy or rep.s_chunks is not None:
                k_now = rep.k
            else:
                k_now = rep.k + min(rep.s_count, int((t - rep.s_start) / rep.s_dur))
            slow = sum(r.pf_total + r.out - r.gen for r in rep.waiting) + sum(
                (r.finish - k_now) if r.decoding else (r.pf_left + r.out - r.gen) for r in rep.running.values())
            if slow != rep.pending_tokens(t):
                mismatches.append((rep.name, t))

    simulate(tight_cache_config(), on_route=watch)
    assert mismatches == []


def test_the_same_seed_gives_the_same_result_and_another_seed_does_not(prod):
    def run(seed):
        return to_dict(simulate(config_from_plan(prod, 120, seed=seed, arrivals="gamma", lengths="lognormal")))
    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("arrivals, cv", [("poisson", 1.0), ("gamma", 2.0)])
def test_arrivals_have_the_asked_rate_and_burstiness(arrivals, cv):
    spec = WorkloadSpec(qps=10, duration_s=2000, input_tokens=1000, output_tokens=300, max_model_len=1300,
                        arrivals=arrivals, burstiness_cv=cv)
    times = [r.arrival for r in generate(spec)]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) / spec.duration_s == pytest.approx(10, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.1)


def test_drawn_lengths_never_exceed_the_model_length():
    spec = WorkloadSpec(qps=10, duration_s=500, input_tokens=1000, output_tokens=300, max_model_len=1300,
                        lengths="lognormal", length_cv=1.0)
    reqs = generate(spec)
    assert all(1 <= r.prompt and 1 <= r.out and r.prompt + r.out <= 1300 for r in reqs)
    assert len({r.prompt for r in reqs}) > 100


def test_a_budget_below_max_num_seqs_is_refused():
    with pytest.raises(ValueError) as exc:
        Replica("a", "z", StepCost.additive(((0.01, 1e-5),), 1e-5), 100, 256, 10_000, lambda r: None)
    assert str(exc.value) == "max_num_batched_tokens (100) must be at least max_num_seqs (256)"


# -- closed loop and burst (vllm bench serve --max-concurrency N; --request-rate inf) --------------
def one_replica(arrivals: str, clients: int, **changes) -> SimConfig:
    """One replica, prompts of 1000 tokens (about one 1024-token step each), 100-token answers."""
    cfg = SimConfig(
        workload=WorkloadSpec(qps=0.0, duration_s=120, input_tokens=1000, output_tokens=100, max_model_len=2048,
                              arrivals=arrivals, clients=clients),
        replicas=(ReplicaSpec("a", "z1"),),
        cost=StepCost.additive(((0.008, 5e-5), (0.0, 6e-5)), 3.6e-5),
        max_num_batched_tokens=1024, max_num_seqs=256, kv_capacity_tokens=1_000_000,
        ttft_slo_s=1.0, tpot_slo_s=0.040)
    return replace(cfg, **changes)


def in_flight_peak(requests) -> int:
    """The most requests sent and not yet answered at once (an answer at t before a send at t)."""
    events = sorted([(r.arrival, 1) for r in requests] + [(r.t_done, -1) for r in requests])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("clients", [1, 8, 64])
def test_a_closed_loop_never_has_more_than_its_clients_in_flight(clients):
    result = simulate(one_replica("closed-loop", clients))
    assert all(r.t_done is not None for r in result.requests)
    assert in_flight_peak(result.requests) == clients
    assert len(result.requests) > 10 * clients       # each client sent again and again


@pytest.mark.parametrize("clients", [4, 32, 128])
def test_closed_loop_throughput_is_clients_over_the_mean_latency(clients):
    """Little's law: X = N / E[latency], within 2% (the loop is measured from t = 0)."""
    result = simulate(one_replica("closed-loop", clients))
    data = to_dict(result)
    mean_latency_s = data["e2e_ms"]["mean"] / 1e3
    assert data["throughput"]["requests_per_s"] == pytest.approx(clients / mean_latency_s, rel=0.02)
    assert (data["arrivals"], data["clients"], data["measured_from_s"]) == ("closed-loop", clients, 0.0)


def test_the_first_wave_of_a_closed_loop_arrives_together_and_is_served_in_turn():
    """All N send at t = 0: the i-th prompt's TTFT grows with i (waves, not Poisson)."""
    clients = 32
    result = simulate(one_replica("closed-loop", clients))
    first = sorted((r for r in result.requests if r.arrival == 0.0), key=lambda r: r.id)
    assert len(first) == clients
    ttft = [r.t_first - r.arrival for r in first]
    assert ttft == sorted(ttft)
    assert ttft[-1] > 10 * ttft[0]


@pytest.mark.parametrize("prompts", [1, 50, 400])
def test_a_burst_takes_at_least_its_prompts_prefill_work(prompts):
    cfg = one_replica("burst", prompts)
    result = simulate(cfg)
    data = to_dict(result)
    assert data["requests"] == prompts and data["requests_lost"] == 0
    assert all(r.arrival == 0.0 for r in result.requests)
    ideal_prefill_s = prompts * cfg.cost.step_s(0, cfg.workload.input_tokens)
    assert data["makespan_s"] >= ideal_prefill_s
    assert data["makespan_s"] == round(max(r.t_done for r in result.requests), 3)
    assert data["throughput"]["output_tokens_per_s"] == pytest.approx(100 * prompts / data["makespan_s"], rel=1e-3)


def test_a_closed_loop_workload_simulates_its_own_clients():
    from sizing.planner import PlanRequest
    from sizing.workload import Workload
    closed = make_plan(PlanRequest(Workload(qps=None, concurrency=64)))
    cfg = config_from_plan(closed, 60)
    assert (cfg.workload.arrivals, cfg.workload.clients) == ("closed-loop", 64)
    assert config_from_plan(closed, 60, qps=5.0).workload.arrivals == "poisson"


# -- the API server: a FIFO single server of request_overhead_s before each engine ------------------
@pytest.mark.parametrize("overhead_ms", [2.0, 5.0, 10.0])
def test_request_overhead_caps_a_replica_at_1000_over_overhead_ms_requests_per_s(overhead_ms):
    """Tiny answers the engine could serve far faster: the API server is the limit."""
    ceiling = 1000 / overhead_ms
    cfg = one_replica("closed-loop", 64, request_overhead_s=overhead_ms / 1e3,
                      workload=WorkloadSpec(qps=0.0, duration_s=30, input_tokens=16, output_tokens=2,
                                            max_model_len=2048, arrivals="closed-loop", clients=64))
    served = to_dict(simulate(cfg))["throughput"]["requests_per_s"]
    assert served == pytest.approx(ceiling, rel=0.02)
    open_loop = replace(cfg, workload=replace(cfg.workload, arrivals="poisson", qps=2 * ceiling, duration_s=10))
    result = simulate(open_loop)      # twice the ceiling offered: served at the ceiling, the rest queue
    assert len(result.requests) / result.end_s == pytest.approx(ceiling, rel=0.02)


def test_request_overhead_adds_its_time_to_each_ttft():
    light = replace(tight_cache_config(), kv_capacity_tokens=1_000_000)
    base = summarize(simulate(light).requests, 1.0, 0.04)["ttft_ms"]["mean"]
    slow = summarize(simulate(replace(light, request_overhead_s=0.010)).requests, 1.0, 0.04)["ttft_ms"]["mean"]
    assert slow - base >= 10.0


def test_the_router_counts_the_requests_in_a_replicas_api_server():
    """A burst at t = 0 with a server cost: least-outstanding still splits it evenly."""
    cfg = replace(one_replica("burst", 100, request_overhead_s=0.005),
                  replicas=(ReplicaSpec("a", "z1"), ReplicaSpec("b", "z2")))
    counts = [r["requests"] for r in to_dict(simulate(cfg))["replicas"]]
    assert counts == [50, 50]


def test_requests_in_a_lost_replicas_api_server_are_retried():
    cfg = replace(one_replica("closed-loop", 40, request_overhead_s=0.050),
                  replicas=(ReplicaSpec("a", "z1"), ReplicaSpec("b", "z2")), failure=ZoneFailure("z2", 0.3, 5.0))
    data = to_dict(simulate(cfg))
    assert data["requests_retried"] > 0 and data["requests_lost"] == 0


# -- vLLM V1's chunked prefill (simulator/replica.py _prefill_chunks cites scheduler.py) ------------
@pytest.mark.parametrize("threshold, chunks", [
    (0, [1000, 23]),                 # vLLM's default: the next prompt gets what the first leaves
    (256, [256, 256, 256, 255]),     # long_prefill_token_threshold caps each request's chunk (the budget the last)
    (600, [600, 423]),
], ids=["threshold off", "threshold 256", "threshold 600"])
def test_a_steps_prefill_chunks_follow_vllm_v1(threshold, chunks):
    """One sequence decoding (its token first: 1023 of the 1024 left), four 1000-token prompts waiting."""
    rep = Replica("a", "z1", StepCost.additive(((0.008, 5e-5), (0.0, 6e-5)), 3.6e-5), 1024, 16, 1_000_000,
                  lambda r: None, threshold)
    rep.enqueue(Request(0, 0.0, 1, 1000), 0.0)        # its one-token prompt is this step's only chunk
    for i in range(1, 5):
        rep.enqueue(Request(i, 0.0, 1000, 10), 0.0)   # they wait for the next step
    rep.run_until(rep.next_end)
    assert rep.n == 1
    assert [c for _, c in rep.s_chunks] == chunks
    assert [r.id for r, _ in rep.s_chunks] == list(range(1, len(chunks) + 1))      # first come, first served


def test_partial_prefills_go_on_before_waiting_prompts_and_a_preempting_step_admits_none():
    rep = Replica("a", "z1", StepCost.additive(((0.008, 5e-5), (0.0, 6e-5)), 3.6e-5), 1024, 16, 1_000_000,
                  lambda r: None)
    rep.enqueue(Request(0, 0.0, 3000, 10), 0.0)       # 3000 tokens: three steps of 1024 at most
    rep.enqueue(Request(1, 0.0, 100, 10), 0.0)
    rep.run_until(rep.next_end)
    assert [(r.id, c) for r, c in rep.s_chunks] == [(0, 1024)]
    assert rep._prefill_chunks(1024, 1_000_000, admit=False)[1] == 1024     # the partial prefill only


def test_a_prompt_is_admitted_only_when_its_whole_sequence_fits_the_cache():
    """vLLM 0.29.0's scheduler_reserve_full_isl (default True): the 1000-token prompt waits while
    only 500 tokens of cache are free, though the 48 tokens of budget left would fit."""
    rep = Replica("a", "z1", StepCost.additive(((0.008, 5e-5), (0.0, 6e-5)), 3.6e-5), 1024, 16, 2500,
                  lambda r: None)
    rep.enqueue(Request(0, 0.0, 2000, 10), 0.0)
    rep.enqueue(Request(1, 0.0, 1000, 10), 0.0)
    assert [(r.id, c) for r, c in rep.s_chunks] == [(0, 1024)]
    rep.run_until(rep.next_end)
    assert [(r.id, c) for r, c in rep.s_chunks] == [(0, 976)]
    rep.run_until(rep.next_end)                       # r0 decodes, its 2001 tokens leave 499 free
    assert [r.id for r in rep.waiting] == [1]
