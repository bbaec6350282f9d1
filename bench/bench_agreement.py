"""Analytic engine against the simulator at the tail (the numbers behind tests/test_agreement.py).

    .venv/bin/python bench/bench_agreement.py        # Markdown tables for docs/proving.md

Targets: the analytic p95 TTFT and TPOT within 15% of the simulated ones, the capacity within 5%;
prints PASS or FAIL and exits 1 on a miss.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.agreement import CASES, LOADS, agreement_point, case_plan, simulated_capacity  # noqa: E402

LATENCY_TARGET, CAPACITY_TARGET = 0.15, 0.05


def main() -> int:
    print("| case | load (share of capacity) | p95 TTFT analytic / simulated (ms) | error | "
          "p95 TPOT analytic / simulated (ms) | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    worst = [0.0, 0.0]
    caps = []
    for case, (name, _, _) in CASES.items():
        p = case_plan(case)
        for share in LOADS:
            qps, a, s = agreement_point(p, share)
            e1, e2 = a.ttft_p95_ms / s["ttft_ms"]["p95"] - 1, a.tpot_p95_ms / s["tpot_ms"]["p95"] - 1
            worst = [max(worst[0], abs(e1)), max(worst[1], abs(e2))]
            print(f"| {name} | {share:.0%} ({qps:.2f} QPS) | {a.ttft_p95_ms:,.0f} / {s['ttft_ms']['p95']:,.0f} | "
                  f"{e1:+.1%} | {a.tpot_p95_ms:.1f} / {s['tpot_ms']['p95']:.1f} | {e2:+.1%} |")
        sim_cap = simulated_capacity(p)
        caps.append((name, p.capacity_per_replica.qps, p.capacity_per_replica.binding, sim_cap))
    print(f"\nWorst: TTFT {worst[0]:.1%}, TPOT {worst[1]:.1%}.\n")
    print("| case | capacity at p95, analytic (binding) | simulated | error |")
    print("| --- | ---: | ---: | ---: |")
    for name, a, binding, s in caps:
        print(f"| {name} | {a:.2f} QPS ({binding}) | {s:.2f} QPS | {a / s - 1:+.1%} |")
    worst_capacity = max(abs(a / s - 1) for _, a, _, s in caps)
    ok = max(worst) <= LATENCY_TARGET and worst_capacity <= CAPACITY_TARGET
    print(f"\nTTFT and TPOT within {LATENCY_TARGET:.0%} (worst {max(worst):.1%}), capacity within "
          f"{CAPACITY_TARGET:.0%} (worst {worst_capacity:.1%}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
