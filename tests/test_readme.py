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
