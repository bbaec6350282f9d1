"""Timing fresh processes against an import floor, the way `make bench` reports them.

A command's floor is a fresh interpreter importing, for real, the modules of its own libraries
that the command leaves loaded (discovered by running it once): what no code of ours can avoid.
Each figure is the median over fresh processes after one warm-up run (the bytecode cache is
written, as a user's would be), in wall seconds and in CPU seconds (user + system) of the child;
on a shared machine the CPU figure moves less with other load, so ratios are given for both.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Fresh children run as a user's would: warnings off, bytecode cached (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which recompiles every module on every run).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass(frozen=True)
class Timing:
    wall_s: float       # median wall time
    cpu_s: float        # median user + system CPU time of the child


def code_cmd(code: str) -> list[str]:
    return [sys.executable, "-W", "ignore", "-c", code]


def _one(cmd: list[str], ok) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd[-3:])} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def against(cmd: list[str], floor: list[str], runs: int, ok=(0,)) -> tuple[Timing, Timing]:
    """`cmd` and its floor timed in turn, run by run (so a change in the machine's load hits both
    alike), after one warm-up run of each: their median Timings."""
    samples: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for i in range(runs + 1):
        for k, c in enumerate((cmd, floor)):
            sample = _one(c, ok if k == 0 else (0,))
            if i:                                   # the first run only warms the caches
                samples[k].append(sample)

    def median(k: int) -> Timing:
        return Timing(statistics.median(s[0] for s in samples[k]), statistics.median(s[1] for s in samples[k]))
    return median(0), median(1)


def loaded_modules(code: str) -> list[str]:
    """Every module `code` leaves loaded for real (not a lazy placeholder), run in a fresh process.
    `code` must not print to stdout (redirect what it prints); the list is printed after it."""
    probe = (f"{code}\nimport json, sys\n"
             "print(json.dumps(sorted(n for n, m in list(sys.modules.items())\n"
             "                        if m is not None and type(m).__name__ != '_LazyModule')))")
    out = subprocess.run(code_cmd(probe), cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def cli_cmd(*args: str) -> list[str]:
    """The `llmserve` console script (`llmserve.cli:entry`) with `args`, as a user runs it."""
    return code_cmd(f"import sys; sys.argv = ['llmserve', *{list(args)!r}]; from llmserve.cli import entry; entry()")


def floor_cmd(modules: list[str]) -> list[str]:
    """A fresh interpreter importing `modules` for real (touching an attribute loads a lazy one),
    then exiting as the console script does (`gc.freeze()` first: no collection passes over the
    heap at exit), so command and floor compare like with like."""
    return code_cmd("import gc, importlib\n"
                    f"for name in {sorted(modules)!r}:\n"
                    "    getattr(importlib.import_module(name), '_load_now', None)\n"
                    "gc.freeze()")


def ratio_line(name: str, cmd_t: Timing, floor_t: Timing, target: float) -> tuple[str, bool]:
    """One printed line: the command, its floor, both ratios, and PASS or FAIL on the CPU ratio
    (on a quiet machine the two agree; on a shared one the wall ratio moves with other load)."""
    wall_ratio, cpu_ratio = cmd_t.wall_s / floor_t.wall_s, cmd_t.cpu_s / floor_t.cpu_s
    ok = cpu_ratio <= target
    line = (f"{name}: {cmd_t.wall_s:.3f} s wall ({cmd_t.cpu_s:.3f} s CPU) against a floor of "
            f"{floor_t.wall_s:.3f} s wall ({floor_t.cpu_s:.3f} s CPU): {wall_ratio:.2f}x wall, "
            f"{cpu_ratio:.2f}x CPU (target <= {target:g}x): {'PASS' if ok else 'FAIL'}")
    return line, ok
