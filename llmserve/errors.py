"""One way to fail on bad input: a single line on stderr and exit code 2."""
from __future__ import annotations

import sys

import typer


def fail(message: str, code: int = 2) -> "typer.Exit":
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)
