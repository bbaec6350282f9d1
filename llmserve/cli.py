"""`llmserve`: size, preview, preflight, render, simulate, emulate and check an LLM serving stack.

Each command lives in its own module and imports its heavy dependencies (Pulumi, matplotlib,
boto3) only when it runs, so `llmserve size` stays fast.

Bad input prints one line, `error: <what> ...`, and exits with code 2; never a traceback.
"""
from __future__ import annotations

import gc
import os
import signal
import sys

# pydantic looks for plugins in the entry points of every installed distribution when it builds
# its first model (pydantic/plugin/_loader.py, 2.14.3): a quarter of loading the settings models.
# The CLI uses none; a user who sets the variable keeps their value.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import importlib  # noqa: E402

import typer  # noqa: E402
from click.exceptions import Abort, Exit, NoArgsIsHelpError, UsageError  # noqa: E402

# The commands, by the module of this package that registers them (its `register(app)`), in the
# order `llmserve --help` lists them. `main` builds an app holding only the command asked for and
# imports only that module: typer turns the signature of every registered function into click
# options on each call (~20 ms for all nine), and importing the other modules (their options,
# dataclasses and flag tables) cost `size` another ~10 ms. Each module imports its heavy
# dependencies (Pulumi, boto3, matplotlib, the load-test report's models) only when it runs.
COMMANDS = (
    (("size",), "size_cmd"),
    (("preview",), "preview_cmd"),
    (("preflight",), "preflight_cmd"),
    (("render",), "render_cmd"),
    (("simulate",), "simulate_cmd"),
    (("emulate",), "emulate_cmd"),
    (("loadtest-report",), "loadtest_cmd"),
    (("twin", "check", "calibrate"), "twin_cmd"),
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
    wanted = [module for names, module in COMMANDS if command in names]
    for module in wanted or [module for _, module in COMMANDS]:
        importlib.import_module(f"{__package__}.{module}").register(app)
    return app


def __getattr__(name: str):
    """`app`: every command (click's test runner and `--help` use it), built on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    app = globals()["app"] = build_app()
    return app


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns usage errors into one line and exit code 2."""
    from .stdout import StdoutError, guarded_stdout, quiet_stdout

    args = sys.argv[1:] if argv is None else argv
    for n, arg in enumerate(args, start=1):
        if any("\ud800" <= c <= "\udfff" for c in arg):     # bytes that are not UTF-8 (argv decodes them so)
            _say(f"error: argument {n} is not UTF-8 text; give options and values as UTF-8")
            return 2
    try:
        with guarded_stdout():
            rv = build_app(args[0] if args else None)(args=args, standalone_mode=False, prog_name="llmserve")
    except StdoutError as exc:
        quiet_stdout()
        _say(f"error: cannot write standard output: {exc}")
        return 1
    except KeyboardInterrupt as exc:           # Terminated (SIGTERM) is one
        # Every output is written to a temporary and renamed (inputs.outputs), which removes the
        # temporary on any exception: an interrupted command leaves the previous output as it was.
        return _interrupted(getattr(exc, "signum", signal.SIGINT))
    except NoArgsIsHelpError:
        return 0
    except UsageError as exc:
        hint = ""
        if exc.ctx is not None and exc.ctx.command is not None:
            hint = f" (see `llmserve {exc.ctx.info_name} --help`)" if exc.ctx.info_name != "llmserve" else ""
        from inputs.untrusted import control_escaped
        print(f"error: {control_escaped(exc.format_message())}{hint}", file=sys.stderr)
        return 2
    except (typer.Exit, Exit) as exc:
        return _interrupted(_received[-1]) if _received else exc.exit_code
    except (typer.Abort, Abort):       # click's word for a KeyboardInterrupt inside a command
        return _interrupted(_received[-1] if _received else signal.SIGINT)
    except Exception:
        # An interrupt inside an import leaves that module half made, and the next use of it fails
        # (an AttributeError): a consequence of the signal, not a bug to show as a traceback.
        if _received:
            return _interrupted(_received[-1])
        raise
    if _received:     # typer answers a KeyboardInterrupt with a silent 130 (typer/core.py, `Exit(130)`)
        return _interrupted(_received[-1])
    return rv if isinstance(rv, int) else 0


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, `kill`), raised in the main thread as SIGINT's KeyboardInterrupt
    is, so the writers' cleanup runs instead of the process ending mid-write. A KeyboardInterrupt, so
    that everything on the way treats it as one: asyncio's callback and task runners (Pulumi's engine)
    re-raise only KeyboardInterrupt and SystemExit, and log and swallow any other exception."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_received: list[int] = []      # the signals the console script's handlers took, in order


def _on_signal(signum, frame):
    _received.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _interrupted(signum: int) -> int:
    # The tasks the interrupt cut short are abandoned on purpose: asyncio would log each at exit
    # ("Task exception was never retrieved", with its traceback).
    import logging
    logging.getLogger("asyncio").disabled = True
    _say(f"error: interrupted ({signal.Signals(signum).name}); outputs not yet written keep their previous version")
    return 128 + signum


def _say(line: str) -> None:
    """A line on stderr, if stderr can take it (it may be the same full disk)."""
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass


def entry() -> None:
    """The console script: `main`, then an exit without the collector's passes over the heap.

    At exit CPython runs full collections over every object still alive (after a preview, the
    provider SDKs' several hundred thousand: 0.4 s more than the floor of importing them spends);
    they only free memory the OS takes back at once, and CPython runs no finalizer of an object
    alive at exit by guarantee (the data model, `object.__del__`). `gc.freeze()` puts what is
    alive out of their reach; atexit handlers and module teardown still run. Tests call `main`
    and keep the usual exit."""
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:     # not where a shell set it ignored
        signal.signal(signal.SIGINT, _on_signal)
    code = main()
    gc.freeze()
    sys.exit(code)
