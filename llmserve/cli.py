"""`llmserve`: size, preview, preflight, render, simulate and check an LLM serving stack.

Each command lives in its own module and imports its heavy dependencies (Pulumi, matplotlib,
boto3) only when it runs, so `llmserve size` stays fast.

Bad input prints one line, `error: <what> ...`, and exits with code 2; never a traceback.
"""
from __future__ import annotations

import sys

import typer
from click.exceptions import Abort, Exit, NoArgsIsHelpError, UsageError

from . import size_cmd

app = typer.Typer(
    name="llmserve",
    help="Size, preview and check a production LLM serving stack on AWS before paying for it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """Size, preview and check a production LLM serving stack on AWS before paying for it."""


app.command("size", help=size_cmd.__doc__)(size_cmd.size)

# The other commands, each importing its heavy dependencies (Pulumi, boto3, matplotlib) when it runs.
from . import loadtest_cmd, preflight_cmd, preview_cmd, render_cmd, simulate_cmd, twin_cmd  # noqa: E402

for _module in (preview_cmd, preflight_cmd, render_cmd, simulate_cmd, loadtest_cmd, twin_cmd):
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns usage errors into one line and exit code 2."""
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="llmserve")
    except NoArgsIsHelpError:
        return 0
    except UsageError as exc:
        hint = ""
        if exc.ctx is not None and exc.ctx.command is not None:
            hint = f" (see `llmserve {exc.ctx.info_name} --help`)" if exc.ctx.info_name != "llmserve" else ""
        print(f"error: {exc.format_message()}{hint}", file=sys.stderr)
        return 2
    except (typer.Exit, Exit) as exc:
        return exc.exit_code
    except (typer.Abort, Abort):
        print("aborted", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0


def entry() -> None:
    sys.exit(main())
