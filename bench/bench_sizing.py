"""Benchmarks for the sizing engine (targets from issue 2; numbers go in the README).

- `llmserve size` for the reference case: wall time of a fresh process (target < 0.5 s).
- the sweep's evaluation rate: configurations per second on one core (target >= 10,000).

    .venv/bin/python bench/bench_sizing.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def size_wall_time(runs: int = 7) -> float:
    exe = ROOT / ".venv" / "bin" / "llmserve"
    cmd = [str(exe), "size"] if exe.exists() else [sys.executable, "-m", "llmserve.cli", "size"]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sweep_rate(seconds: float = 2.0, profile_name: str = "reference", statistic: str = "p95") -> tuple[float, int]:
    from sizing.catalog import load_catalog
    from sizing.model import Workload
    from sizing.model import candidate_tps
    from sizing.profiles import get_profile
    from sizing.sweep import SWEEP_WEIGHTS, evaluate

    catalog, profile = load_catalog(), get_profile(profile_name)
    model = catalog.model("llama-3-70b")
    configs = [(inst, tp, w) for inst in catalog.instances.values() for tp in candidate_tps(model, inst)
               for w in SWEEP_WEIGHTS]
    workloads = [Workload(qps=q, slo_statistic=statistic) for q in (2, 5, 10, 20, 40)]
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for wl in workloads:
            for inst, tp, w in configs:
                evaluate(model, inst, tp, w, "bf16", wl, profile, 2)
                count += 1
    return count / (time.perf_counter() - start), len(configs) * len(workloads)


if __name__ == "__main__":
    wall = size_wall_time()
    print(f"llmserve size (reference case), median wall of 7 fresh runs: {wall:.3f} s (target < 0.5 s)")
    for profile_name, statistic in (("reference", "mean"), ("reference", "p95"), ("calibrated", "p95")):
        rate, per_pass = sweep_rate(profile_name=profile_name, statistic=statistic)
        print(f"sweep evaluation, profile {profile_name}, SLOs at {statistic}: {rate:,.0f} configurations/s "
              f"on one core (target >= 10,000; {per_pass} per pass)")
