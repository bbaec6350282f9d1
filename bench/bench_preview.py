"""Benchmark: `llmserve preview --stack prod` against the floor of importing what it needs.

The provider packages load lazily (even `import pulumi_aws.ec2` returns a lazy module until an
attribute is read), so importing the packages is not the floor. The floor is a fresh interpreter
loading, for real, exactly the provider modules a preview loads (the `pulumi_aws.<service>` and
`pulumi_kubernetes.<group>[.<version>]` modules left loaded in `sys.modules`) and `pulumi_policy`.
Target (issue 3): preview <= 2.5 x the floor.

    .venv/bin/python bench/bench_preview.py [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.5
PROVIDER_MODULE = re.compile(r"^(pulumi_aws\.[a-z][a-z0-9_]*|pulumi_kubernetes\.[a-z][a-z0-9_]*(\.v[0-9a-z]+)?)$")

PREVIEW = [sys.executable, "-W", "ignore", "-c",
           "import sys; from llmserve.cli import main; sys.exit(main(['preview', '--stack', 'prod']))"]
DISCOVER = [sys.executable, "-W", "ignore", "-c",
            "import contextlib, io, json, sys; from llmserve.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['preview', '--stack', 'prod'])\n"
            # pulumi_* packages register every submodule lazily: keep only those actually loaded
            "print(json.dumps(sorted(n for n, m in list(sys.modules.items())\n"
            "                        if type(m).__name__ != '_LazyModule')))"]


def provider_modules() -> list[str]:
    out = subprocess.run(DISCOVER, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    used = [m for m in json.loads(out.splitlines()[-1]) if PROVIDER_MODULE.match(m)]
    return sorted(set(used) | {"pulumi_policy"})


def wall_time(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - t)
        if done.returncode not in (0, 1):       # 1 = a mandatory policy violation: still a full run
            raise SystemExit(f"{cmd[-1]} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    modules = provider_modules()
    # `import pulumi_aws.ec2` alone returns a lazy module: touching an attribute loads it for real.
    floor_cmd = [sys.executable, "-W", "ignore", "-c",
                 "import importlib\n"
                 f"for name in {modules!r}:\n"
                 "    getattr(importlib.import_module(name), '_load_now', None)"]
    wall_time(PREVIEW, 1)                       # warm the bytecode cache once
    floor = wall_time(floor_cmd, args.runs)
    preview = wall_time(PREVIEW, args.runs)
    ratio = preview / floor
    print(f"provider modules imported by the program ({len(modules)}): {', '.join(modules)}")
    print(f"import floor (fresh interpreter, median of {args.runs}): {floor:.2f} s")
    print(f"llmserve preview --stack prod (median of {args.runs}):   {preview:.2f} s")
    print(f"ratio: {ratio:.2f}x (target <= {TARGET_RATIO}x): {'PASS' if ratio <= TARGET_RATIO else 'FAIL'}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
