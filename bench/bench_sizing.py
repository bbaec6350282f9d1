"""Benchmarks for the sizing engine (targets from issue 21; the numbers go in docs/benchmarks.md).

- `llmserve size --stack prod`, a fresh process, against the import floor of its own libraries
  (typer, click, rich, pydantic, yaml: the modules of theirs it leaves loaded, imported for real
  in a fresh interpreter). Target: at most 1.5x.
- the sweep's evaluation rate: configurations per second on one core with the default profile
  and statistic (reference, mean). Target: at least 50,000/s. The p95 and calibrated rates are
  printed beside it.

    .venv/bin/python bench/bench_sizing.py [--runs 7] [--seconds 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.timing import against, cli_cmd, floor_cmd, loaded_modules, ratio_line  # noqa: E402

SIZE_TARGET = 1.5
SWEEP_TARGET = 50_000
SIZE_LIBRARIES = ("typer", "click", "rich", "pydantic", "pydantic_core", "yaml")
SIZE = "from llmserve.cli import main; main(['size', '--stack', 'prod'])"


def size_against_floor(runs: int) -> tuple[str, bool]:
    quiet = f"import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    {SIZE}"
    modules = [m for m in loaded_modules(quiet) if m.split(".")[0] in SIZE_LIBRARIES]
    size, floor = against(cli_cmd("size", "--stack", "prod"), floor_cmd(modules), runs)
    return ratio_line(f"llmserve size --stack prod ({len(modules)} library modules in its floor)",
                      size, floor, SIZE_TARGET)


def sweep_rate(seconds: float = 2.0, profile_name: str = "measured", statistic: str = "mean") -> tuple[float, int]:
    """Configurations evaluated per second, over the sweep's own grid at five loads."""
    from sizing.catalog import load_catalog
    from sizing.checks import candidate_tps
    from sizing.profiles import get_profile
    from sizing.sweep import SWEEP_WEIGHTS, clear_cache, evaluate
    from sizing.workload import Workload

    catalog, profile = load_catalog(), get_profile(profile_name)
    model = catalog.model("llama-3-70b")
    configs = [(inst, tp, w) for inst in catalog.instances.values() for tp in candidate_tps(model, inst)
               for w in SWEEP_WEIGHTS]
    workloads = [Workload(qps=q, slo_statistic=statistic) for q in (2, 5, 10, 20, 40)]
    count, start = 0, time.perf_counter()
    cpu_start = time.process_time()
    while time.perf_counter() - start < seconds:
        clear_cache()       # each pass a fresh sweep over five loads: every shape's verdict found once
        for wl in workloads:
            for inst, tp, w in configs:
                evaluate(model, inst, tp, w, "bf16", wl, profile, 2)
                count += 1
    return count / (time.process_time() - cpu_start), len(configs) * len(workloads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per median")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per sweep rate")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):          # one core, as the targets say
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    line, ok = size_against_floor(args.runs)
    print(line)
    for profile_name, statistic in (("measured", "mean"), ("measured", "p95"), ("seed", "mean"), ("calibrated", "p95")):
        rate, per_pass = sweep_rate(args.seconds, profile_name, statistic)
        default = (profile_name, statistic) == ("measured", "mean")
        verdict = (f" (target >= {SWEEP_TARGET:,}): {'PASS' if rate >= SWEEP_TARGET else 'FAIL'}" if default
                   else " (not a target)")
        ok &= rate >= SWEEP_TARGET or not default
        print(f"sweep evaluation, profile {profile_name}, SLOs at {statistic}: {rate:,.0f} configurations per "
              f"CPU second on one core ({per_pass} per pass){verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
