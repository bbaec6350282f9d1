"""Benchmark: `llmserve preview --stack prod` against the floor of importing what it needs.

The provider packages load lazily (even `import pulumi_aws.ec2` returns a lazy module until an
attribute is read), so importing the packages is not the floor. The floor is a fresh interpreter
loading, for real, exactly the provider modules a preview loads (the `pulumi_aws.<service>` and
`pulumi_kubernetes.<group>[.<version>]` modules left loaded in `sys.modules`) and `pulumi_policy`.
Target (issue 21): preview <= 1.3 x the floor.

    .venv/bin/python bench/bench_preview.py [--runs 5]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.timing import against, cli_cmd, floor_cmd, loaded_modules, ratio_line  # noqa: E402

TARGET_RATIO = 1.3
PROVIDER_MODULE = re.compile(r"^(pulumi_aws\.[a-z][a-z0-9_]*|pulumi_kubernetes\.[a-z][a-z0-9_]*(\.v[0-9a-z]+)?)$")
QUIET = ("import contextlib, io\nfrom llmserve.cli import main\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n    main(['preview', '--stack', 'prod'])")


def provider_modules() -> list[str]:
    """The provider modules a preview loads for real (pulumi_* register every submodule lazily)."""
    used = [m for m in loaded_modules(QUIET) if PROVIDER_MODULE.match(m)]
    return sorted(set(used) | {"pulumi_policy"})


def preview_against_floor(runs: int) -> tuple[str, bool]:
    modules = provider_modules()
    # exit 1 = a mandatory policy violation: still a full run
    preview, floor = against(cli_cmd("preview", "--stack", "prod"), floor_cmd(modules), runs, ok=(0, 1))
    return ratio_line(f"llmserve preview --stack prod ({len(modules)} provider modules in its floor)",
                      preview, floor, TARGET_RATIO)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    line, ok = preview_against_floor(args.runs)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
