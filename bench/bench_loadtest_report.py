"""Benchmark: `loadtest-report` on a GuideLLM report at a prod sweep's size.

A prod sweep's report is 200-330 MB (6.2-6.6 KB per request: GuideLLM keeps each request's record).
The report here is the captured 0.8.0.dev18 report with 300 MB of GuideLLM 0.8.1 request records in
its per-request lists (tests/big_report.py), written once to a temporary folder. A fresh process
reads it (proving.loadtest_report.read_report), and again the 96 KB capture: the peak RSS of each
(ru_maxrss) and the read time. Targets: the 300 MB report read in <= 10 s, its peak RSS within
32 MiB of the capture's (the per-request lists cost time, not memory).

    .venv/bin/python bench/bench_loadtest_report.py [--mb 300]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.big_report import inflate  # noqa: E402

SAMPLE = ROOT / ".upstream" / "samples" / "guidellm-report-0.8.0.dev18.json"
TARGET_S, TARGET_EXTRA_MIB = 10.0, 32
READ = ("import resource, sys, time; from pathlib import Path; from proving.loadtest_report import read_report\n"
        "t = time.perf_counter(); r = read_report(Path(sys.argv[1])); t = time.perf_counter() - t\n"
        "print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(r.benchmarks))")


def read(path: Path) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", READ, str(path)], cwd=ROOT, capture_output=True, text=True, check=True)
    seconds, kib, _ = out.stdout.split()
    return float(seconds), int(kib) / 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=300)
    mb = parser.parse_args().mb
    if not SAMPLE.is_file():
        raise SystemExit(f"{SAMPLE} missing: run scripts/fetch-upstream")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "benchmarks.json"
        records = inflate(SAMPLE, big, mb * 10**6)
        size = big.stat().st_size
        small_s, small_mib = read(SAMPLE)
        big_s, big_mib = read(big)
    ok = big_s <= TARGET_S and big_mib - small_mib <= TARGET_EXTRA_MIB
    print(f"loadtest-report reader: {size / 1e6:,.0f} MB report ({records:,} request records) read in {big_s:.2f} s, "
          f"peak RSS {big_mib:.1f} MiB; the 96 KB capture {small_s:.2f} s, {small_mib:.1f} MiB "
          f"(targets <= {TARGET_S:g} s, <= +{TARGET_EXTRA_MIB} MiB): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
