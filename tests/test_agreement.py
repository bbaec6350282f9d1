"""The analytic engine and the simulator agree at the tail: both replay the one step model.

Four cases (the reference, its TP=2 and 1,000-output-token follow-ups, 5,000-token prompts), the
calibrated profile, SLOs at p95. Over loads from 20% to 95% of the analytic capacity, the analytic
p95 TTFT and TPOT are within 15% of the simulated ones (one replica, Poisson arrivals, at least
4,000 requests per point, fixed seeds); the capacity, found in the simulator by bisection on the
same p95 SLOs, is within 5%.
"""
from __future__ import annotations

import pytest

from simulator import config_from_plan, simulate, simulated_capacity_qps, summarize
from sizing.model import Workload
from sizing.planner import PlanRequest, plan

CASES = {
    "reference": (Workload(qps=10), 4),
    "tp2": (Workload(qps=10), 2),
    "outputs-1000": (Workload(qps=10, output_tokens=1000), 4),
    "prompts-5000": (Workload(qps=2, input_tokens=5000, output_tokens=500), 4),
}
LOADS = (0.2, 0.4, 0.6, 0.8, 0.95)
LATENCY_TOL, CAPACITY_TOL = 0.15, 0.05
MIN_REQUESTS = 4000


@pytest.fixture(scope="module")
def plans():
    return {name: plan(PlanRequest(w, tp=tp, profile="calibrated")) for name, (w, tp) in CASES.items()}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("share", LOADS)
def test_p95_ttft_and_tpot_agree_within_15_percent(plans, case, share):
    p = plans[case]
    qps = share * p.capacity_per_replica.qps
    analytic = p.replica_model.at(qps)
    cfg = config_from_plan(p, duration_s=max(600.0, MIN_REQUESTS / qps), qps=qps, replicas=1, seed=1)
    simulated = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
    for name, a, s in (("TTFT", analytic.ttft_p95_ms, simulated["ttft_ms"]["p95"]),
                       ("TPOT", analytic.tpot_p95_ms, simulated["tpot_ms"]["p95"])):
        assert abs(a / s - 1) <= LATENCY_TOL, f"{case} at {qps:.2f} QPS: p95 {name} analytic {a:.1f} ms, simulated {s:.1f} ms"


@pytest.mark.parametrize("case", CASES)
def test_capacity_at_p95_agrees_within_5_percent(plans, case):
    p = plans[case]
    analytic = p.capacity_per_replica.qps
    simulated = simulated_capacity_qps(p, duration_s=MIN_REQUESTS / analytic, seed=1, rel_tol=0.01)
    assert abs(analytic / simulated - 1) <= CAPACITY_TOL, f"{case}: analytic {analytic:.3f} QPS, simulated {simulated:.3f}"
