"""Benchmark: one simulated hour of the reference design (10 QPS, 36,000 requests, 2 replicas).

    .venv/bin/python bench/bench_simulate.py [--repeat 3] [--router least-outstanding]

Pins itself to one CPU core where the OS allows it, runs the simulation `--repeat` times and
prints the best and median wall time. The target is under 2 s; the result is not asserted in
the test suite (timings there would be flaky), it is reported here and in the README.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--router", default="least-outstanding")
    parser.add_argument("--stack", default="prod")
    parser.add_argument("--profile", default=None, help="Override the stack's profile (reference, calibrated).")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    from settings import stack_settings
    from simulator import config_from_plan, simulate
    from sizing.planner import plan

    from dataclasses import replace

    req = stack_settings(args.stack).plan_request()
    p = plan(replace(req, profile=args.profile) if args.profile else req)
    cfg = config_from_plan(p, duration_s=3600.0, router=args.router)
    times, result = [], None
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = simulate(cfg)
        times.append(time.perf_counter() - start)
    served = sum(1 for r in result.requests if r.t_done is not None)
    print(f"stack {args.stack} (profile {p.request.profile}): {len(cfg.replicas)} replicas, {cfg.workload.qps:g} QPS for "
          f"{cfg.workload.duration_s:g} s simulated, router {args.router}")
    print(f"requests: {len(result.requests)} ({served} served)")
    print(f"wall time on one core: best {min(times):.2f} s, median {statistics.median(times):.2f} s "
          f"over {args.repeat} runs (target: < 2 s)")


if __name__ == "__main__":
    main()
