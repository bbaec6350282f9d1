"""Analytic engine against the simulator at the tail (the numbers behind tests/test_agreement.py).

    .venv/bin/python bench/bench_agreement.py        # a Markdown table for the README
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import config_from_plan, simulate, simulated_capacity_qps, summarize  # noqa: E402
from sizing.model import Workload  # noqa: E402
from sizing.planner import PlanRequest, plan  # noqa: E402

CASES = {
    "reference (TP=4)": (Workload(qps=10), 4),
    "TP=2": (Workload(qps=10), 2),
    "1,000-token outputs": (Workload(qps=10, output_tokens=1000), 4),
    "5,000-token prompts": (Workload(qps=2, input_tokens=5000, output_tokens=500), 4),
}
LOADS = (0.2, 0.4, 0.6, 0.8, 0.95)
MIN_REQUESTS = 4000


def main() -> None:
    print("| case | load (share of capacity) | p95 TTFT analytic / simulated (ms) | error | "
          "p95 TPOT analytic / simulated (ms) | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    worst = [0.0, 0.0]
    caps = []
    for name, (w, tp) in CASES.items():
        p = plan(PlanRequest(w, tp=tp, profile="calibrated"))
        for share in LOADS:
            qps = share * p.capacity_per_replica.qps
            a = p.replica_model.at(qps)
            cfg = config_from_plan(p, duration_s=max(600.0, MIN_REQUESTS / qps), qps=qps, replicas=1, seed=1)
            s = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
            e1, e2 = a.ttft_p95_ms / s["ttft_ms"]["p95"] - 1, a.tpot_p95_ms / s["tpot_ms"]["p95"] - 1
            worst = [max(worst[0], abs(e1)), max(worst[1], abs(e2))]
            print(f"| {name} | {share:.0%} ({qps:.2f} QPS) | {a.ttft_p95_ms:,.0f} / {s['ttft_ms']['p95']:,.0f} | "
                  f"{e1:+.1%} | {a.tpot_p95_ms:.1f} / {s['tpot_ms']['p95']:.1f} | {e2:+.1%} |")
        sim_cap = simulated_capacity_qps(p, duration_s=MIN_REQUESTS / p.capacity_per_replica.qps, seed=1, rel_tol=0.01)
        caps.append((name, p.capacity_per_replica.qps, p.capacity_per_replica.binding, sim_cap))
    print(f"\nWorst: TTFT {worst[0]:.1%}, TPOT {worst[1]:.1%}.\n")
    print("| case | capacity at p95, analytic (binding) | simulated | error |")
    print("| --- | ---: | ---: | ---: |")
    for name, a, binding, s in caps:
        print(f"| {name} | {a:.2f} QPS ({binding}) | {s:.2f} QPS | {a / s - 1:+.1%} |")


if __name__ == "__main__":
    main()
