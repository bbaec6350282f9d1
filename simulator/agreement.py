"""The analytic engine against the simulator at the tail: the cases, loads and run lengths that
tests/test_agreement.py asserts on and bench/bench_agreement.py prints for the README, defined once
so the published numbers are the tested ones.

Five cases (the reference, its TP=2 and 1,000-output-token follow-ups, 5,000-token prompts, lengths
as percentiles), the calibrated profile, SLOs at p95; one replica, Poisson arrivals, fixed seeds.
"""
from __future__ import annotations

from sizing.model import Point
from sizing.planner import Plan, PlanRequest, plan
from sizing.traffic import Percentiles, from_percentiles
from sizing.workload import Workload

from .plan import config_from_plan, simulated_capacity_qps
from .loop import simulate
from .report import summarize

# id -> (label for the README, workload, TP)
CASES = {
    "reference": ("reference (TP=4)", Workload(qps=10), 4),
    "tp2": ("TP=2", Workload(qps=10), 2),
    "outputs-1000": ("1,000-token outputs", Workload(qps=10, output_tokens=1000), 4),
    "prompts-5000": ("5,000-token prompts", Workload(qps=2, input_tokens=5000, output_tokens=500), 4),
    # lengths as a distribution: the simulator draws from the same one (sizing.traffic)
    "lengths-mix": ("lengths p50/p95/max 700/3,000/6,000 in, 200/700/1,000 out",
                    Workload.with_lengths(from_percentiles(Percentiles(700, 3000, 6000), Percentiles(200, 700, 1000)),
                                          qps=2), 4),
}
LOADS = (0.2, 0.4, 0.6, 0.8, 0.95)      # shares of the analytic capacity
MIN_REQUESTS = 4000                     # per simulated point: enough for a stable p95


def case_plan(case: str) -> Plan:
    _, workload, tp = CASES[case]
    return plan(PlanRequest(workload, tp=tp, profile="calibrated"))


def agreement_point(p: Plan, share: float) -> tuple[float, Point, dict]:
    """(QPS, analytic point, simulated summary) at `share` of the plan's capacity per replica."""
    qps = share * p.capacity_per_replica.qps
    cfg = config_from_plan(p, duration_s=max(600.0, MIN_REQUESTS / qps), qps=qps, replicas=1, seed=1)
    return qps, p.replica_model.at(qps), summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)


def simulated_capacity(p: Plan) -> float:
    """The simulator's capacity on the same p95 SLOs (bisection), for the analytic one to meet."""
    return simulated_capacity_qps(p, duration_s=MIN_REQUESTS / p.capacity_per_replica.qps, seed=1, rel_tol=0.01)
