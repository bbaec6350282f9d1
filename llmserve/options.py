"""The options several commands share, declared once (typer reads these defaults)."""
from __future__ import annotations

import typer

STACK = typer.Option(..., help="The stack: stacks/Pulumi.STACK.yaml.")
STACK_OR_REFERENCE = typer.Option(None, help="Take the plan from stacks/Pulumi.STACK.yaml (default: the reference design).")
CONFIG = typer.Option(None, help="Read this Pulumi.<stack>.yaml-format file instead of stacks/.")
JSON = typer.Option(False, "--json", help="Print one JSON object.")
