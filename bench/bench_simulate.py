"""Benchmark: a million simulated requests of the prod stack (10 QPS for 100,000 s, its replicas).

    .venv/bin/python bench/bench_simulate.py [--requests 1000000] [--router least-outstanding]

Pins itself to one CPU core where the OS allows it and runs one simulation in this process;
prints whether the simulator's compiled build ran (simulator/native.py), the wall and CPU time
of `simulate` and the process's peak resident memory (imports included). LLM_SERVING_NATIVE=0
measures the pure-Python modules. Targets (issue 21): at most 10 s and 500 MB. Not asserted in the test suite (timings
there would be flaky); reported here and in docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_S = 10.0
TARGET_MB = 500.0


def run(requests: int, router: str, stack: str, profile: str | None) -> tuple[str, bool]:
    from dataclasses import replace

    from settings import stack_settings
    from simulator import config_from_plan, native, simulate
    from sizing.planner import plan

    req = stack_settings(stack).plan_request()
    p = plan(replace(req, profile=profile) if profile else req)
    qps = p.request.workload.qps
    cfg = config_from_plan(p, duration_s=requests / qps, router=router)
    start, cpu = time.perf_counter(), time.process_time()
    result = simulate(cfg)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024     # Linux: KiB
    served = sum(1 for r in result.requests if r.t_done is not None)
    ok = cpu <= TARGET_S and peak_mb <= TARGET_MB
    build = "compiled (mypyc)" if native.in_use() else "pure Python (no compiled build: scripts/setup says why)"
    line = (f"simulate {len(result.requests):,} requests ({served:,} served), {build}, stack {stack}, profile "
            f"{p.request.profile}, {len(cfg.replicas)} replicas, {qps:g} QPS for {cfg.workload.duration_s:,.0f} s, "
            f"router {router}: {wall:.2f} s wall, {cpu:.2f} s CPU on one core, peak RSS {peak_mb:,.0f} MB "
            f"(targets <= {TARGET_S:g} s, <= {TARGET_MB:g} MB): {'PASS' if ok else 'FAIL'}")
    return line, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--router", default="least-outstanding")
    parser.add_argument("--stack", default="prod")
    parser.add_argument("--profile", default=None, help="Override the stack's profile (reference, calibrated).")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    line, ok = run(args.requests, args.router, args.stack, args.profile)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
