"""The README stays true: its quick-start scripts exist and its reference table is what the tool prints."""
from __future__ import annotations

import re
import subprocess
import sys

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

README = (ROOT / "README.md").read_text()


def test_quick_start_has_exactly_two_commands_and_they_exist():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands == ["scripts/setup && .venv/bin/llmserve preview --stack prod", "scripts/test"]
    assert (ROOT / "scripts" / "setup").stat().st_mode & 0o111 and (ROOT / "scripts" / "test").stat().st_mode & 0o111
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_reference_table_is_what_llmserve_size_prints():
    documented = re.search(r"```text\n(.*?)\n```", README, re.S).group(1)
    printed = subprocess.run([sys.executable, "-c", "from llmserve.cli import entry; entry()", "size", "--stack", "prod",
                              "--gpu-hour-price", "2.5"], capture_output=True, text=True, cwd=ROOT,
                             env={"COLUMNS": "110", "PATH": "/usr/bin:/bin", "TERM": "dumb"})
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.rstrip() == documented.rstrip()


def _size_json(profile: str, *flags: str) -> dict:
    import json
    printed = subprocess.run([sys.executable, "-c", "from llmserve.cli import entry; entry()", "size", "--stack", "prod",
                              "--gpu-hour-price", "2.5", "--profile", profile, "--json", *flags], capture_output=True, text=True,
                             cwd=ROOT, env={"PATH": "/usr/bin:/bin"})
    assert printed.returncode == 0, printed.stderr
    return json.loads(printed.stdout)


def test_the_seed_and_default_columns_are_what_size_prints_under_each_profile():
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^\| ([^|`]+?) \| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \|$", README.split("`--profile seed` | default", 1)[1], re.M)}
    seed, default, tp4 = _size_json("seed"), _size_json("measured"), _size_json("measured", "--tp", "4")
    figures = {"prefill of one 1,000-token prompt (ms)": (lambda d: d["prefill_ms"], "{:.0f}"),
               "TPOT at 10 QPS, real (ms)": (lambda d: d["tpot_ms"]["real"], "{:.1f}"),
               "TTFT at 10 QPS, real (ms)": (lambda d: d["ttft_ms"]["real"], "{:.0f}"),
               "capacity per replica, real (QPS)": (lambda d: d["capacity_per_replica_qps"]["real"], "{:.1f}"),
               "GPUs per replica x replicas (N+1 by zone)": (lambda d: f"{d['gpus_per_replica']} x {d['replicas']}", "{}"),
               "cost per 1M output tokens, GPUs used ($)": (lambda d: d["cost_per_million_output_tokens"], "{:.2f}")}
    assert set(figures) <= set(rows)
    for label, (get, fmt) in figures.items():
        assert rows[label] == (fmt.format(get(seed)), fmt.format(get(default)), fmt.format(get(tp4))), label
    # and the seed column is the reference table (../shared/reference/sizing-reference.md)
    assert rows["prefill of one 1,000-token prompt (ms)"][0] == "36" and rows["capacity per replica, real (QPS)"][0] == "15.9"
