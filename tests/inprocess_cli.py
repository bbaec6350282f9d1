"""`llmserve` run in this process through its real entry point, for the fuzz and secrets suites
(a plain helper, not a fixture: hypothesis draws many cases per test)."""
from __future__ import annotations

import contextlib
import io
import signal
from dataclasses import dataclass


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
