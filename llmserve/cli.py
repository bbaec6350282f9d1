"""`llmserve`: size, preview, preflight, render, simulate and check an LLM serving stack.

Each command lives in its own module and imports its heavy dependencies (Pulumi, matplotlib,
boto3) only when it runs, so `llmserve size` stays fast.

Bad input prints one line, `error: <what> ...`, and exits with code 2; never a traceback.
"""
from __future__ import annotations

import os
import sys

# pydantic looks for plugins in the entry points of every installed distribution when it builds
# its first model (pydantic/plugin/_loader.py, 2.14.3): a quarter of loading the settings models.
# The CLI uses none; a user who sets the variable keeps their value.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer  # noqa: E402
from click.exceptions import Abort, Exit, NoArgsIsHelpError, UsageError  # noqa: E402

from . import loadtest_cmd, preflight_cmd, preview_cmd, render_cmd, simulate_cmd, size_cmd, twin_cmd  # noqa: E402


def _register_size(app: typer.Typer) -> None:
    app.command("size", help=size_cmd.__doc__)(size_cmd.size)


# The commands each module registers, in the order `llmserve --help` lists them. `main` builds an
# app holding only the command asked for: typer turns the signature of every registered function
# into click options on each call (~20 ms for all nine). The modules import their heavy
# dependencies (Pulumi, boto3, matplotlib, the load-test report's models) only when they run.
REGISTRARS = (
    (("size",), _register_size),
    (("preview",), preview_cmd.register),
    (("preflight",), preflight_cmd.register),
    (("render",), render_cmd.register),
    (("simulate",), simulate_cmd.register),
    (("loadtest-report",), loadtest_cmd.register),
    (("twin", "check", "calibrate"), twin_cmd.register),
)


def _root() -> None:
    """Size, preview and check a production LLM serving stack on AWS before paying for it."""


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with every command, or only the commands of `command`'s module when it names one."""
    app = typer.Typer(
        name="llmserve",
        help="Size, preview and check a production LLM serving stack on AWS before paying for it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    wanted = [register for names, register in REGISTRARS if command in names]
    for register in wanted or [register for _, register in REGISTRARS]:
        register(app)
    return app


# Every command (click's test runner and `--help` use it); registering costs nothing until it runs.
app = build_app()


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns usage errors into one line and exit code 2."""
    try:
        args = sys.argv[1:] if argv is None else argv
        rv = build_app(args[0] if args else None)(args=args, standalone_mode=False, prog_name="llmserve")
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
