"""Shared fixtures. The program is built inside each test, under mocks set for that test only."""
from __future__ import annotations

import contextlib
import copy
import io
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLM_SERVING_SHARED", ROOT.parent / "shared"))


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.fail(f"shared reference folder not found at {SHARED}; set LLM_SERVING_SHARED")
    return SHARED


def stack_config(stack: str) -> dict:
    from settings import read_stack_config, stack_file
    return copy.deepcopy(read_stack_config(stack_file(stack)))


@pytest.fixture
def build_program():
    """build_program(stack, overrides={key: value}) -> Recording of every registered resource.

    Overrides replace whole `llm-serving:` keys (or `aws:region`) of the stack file's config.
    """
    def build(stack: str = "prod", overrides: dict | None = None, config: dict | None = None):
        from llmserve.engine import run_program
        raw = config if config is not None else stack_config(stack)
        for key, value in (overrides or {}).items():
            full = key if ":" in key else f"llm-serving:{key}"
            if value is None:
                raw.pop(full, None)
            else:
                raw[full] = value
        return run_program(stack, raw)
    return build


# -- the CLI in process (the fuzz and secrets suites) ------------------------------------------
class CaseTimeout(Exception):
    """A command ran past its per-case limit: a hang, as far as a user can tell."""


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(argv: list[str], limit_s: float = 20.0) -> CliResult:
    """`llmserve ARGV` through its real entry point (`llmserve.cli.main`, which turns usage errors
    into one line), in this process, with stdout and stderr captured. An exception escaping
    `main` is a traceback a user would see: it propagates and fails the test. A run past
    `limit_s` raises CaseTimeout (SIGALRM; the tests run in the main thread)."""
    from llmserve.cli import main

    def expire(signum, frame):
        raise CaseTimeout(f"llmserve {' '.join(argv)} ran past {limit_s:g} s")

    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return CliResult(code, out.getvalue(), err.getvalue())
