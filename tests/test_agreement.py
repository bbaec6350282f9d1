"""The analytic engine and the simulator agree at the tail: both replay the one step model.

Four cases (the reference, its TP=2 and 1,000-output-token follow-ups, 5,000-token prompts), the
calibrated profile, SLOs at p95. Over loads from 20% to 95% of the analytic capacity, the analytic
p95 TTFT and TPOT are within 15% of the simulated ones (one replica, Poisson arrivals, at least
4,000 requests per point, fixed seeds); the capacity, found in the simulator by bisection on the
same p95 SLOs, is within 5%.
"""
from __future__ import annotations

import pytest

from simulator.agreement import CASES, LOADS, agreement_point, case_plan, simulated_capacity

LATENCY_TOL, CAPACITY_TOL = 0.15, 0.05


@pytest.fixture(scope="module")
def plans():
    return {case: case_plan(case) for case in CASES}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("share", LOADS)
def test_p95_ttft_and_tpot_agree_within_15_percent(plans, case, share):
    qps, analytic, simulated = agreement_point(plans[case], share)
    for name, a, s in (("TTFT", analytic.ttft_p95_ms, simulated["ttft_ms"]["p95"]),
                       ("TPOT", analytic.tpot_p95_ms, simulated["tpot_ms"]["p95"])):
        assert abs(a / s - 1) <= LATENCY_TOL, f"{case} at {qps:.2f} QPS: p95 {name} analytic {a:.1f} ms, simulated {s:.1f} ms"


@pytest.mark.parametrize("case", CASES)
def test_capacity_at_p95_agrees_within_5_percent(plans, case):
    p = plans[case]
    analytic = p.capacity_per_replica.qps
    simulated = simulated_capacity(p)
    assert abs(analytic / simulated - 1) <= CAPACITY_TOL, f"{case}: analytic {analytic:.3f} QPS, simulated {simulated:.3f}"
