"""`llmserve`: size, preview, preflight, render, simulate and check an LLM serving stack.

Each command lives in its own module and imports its heavy dependencies (Pulumi, matplotlib,
boto3) only when it runs, so `llmserve size` stays fast.

Bad input prints one line, `error: <what> ...`, and exits with code 2; never a traceback.
"""
from __future__ import annotations

import importlib
import sys

import typer
from click.exceptions import Abort, Exit, NoArgsIsHelpError, UsageError

# Each command's module and the commands it registers, in the order `llmserve --help` lists them.
# `main` builds an app holding only the command asked for: typer turns every registered
# function's signature into click options on each call (~20 ms for all nine), and a command's
# module is imported only when that command runs.
COMMANDS: dict[str, tuple[str, ...]] = {
    "size_cmd": ("size",),
    "preview_cmd": ("preview",),
    "preflight_cmd": ("preflight",),
    "render_cmd": ("render",),
    "simulate_cmd": ("simulate",),
    "loadtest_cmd": ("loadtest-report",),
    "twin_cmd": ("twin", "check", "calibrate"),
}


def _root() -> None:
    """Size, preview and check a production LLM serving stack on AWS before paying for it."""


def build_app(command: str | None = None) -> typer.Typer:
    """The typer app with every command, or with only `command`'s module when it names one."""
    app = typer.Typer(
        name="llmserve",
        help="Size, preview and check a production LLM serving stack on AWS before paying for it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    wanted = [m for m, names in COMMANDS.items() if command in names] or list(COMMANDS)
    for name in wanted:
        module = importlib.import_module(f"{__package__}.{name}")
        if name == "size_cmd":
            app.command("size", help=module.__doc__)(module.size)
        else:
            module.register(app)
    return app


def __getattr__(name: str):
    """`llmserve.cli.app`: the app with every command (for click's test runner), built on first use."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
