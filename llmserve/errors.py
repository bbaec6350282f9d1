"""One way to fail on bad input: a single line on stderr and exit code 2."""
from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from pathlib import Path

import typer


def fail(message: str, code: int = 2) -> "typer.Exit":
    """One `error:` line: a value it quotes (an option, a stack value) cannot break the line or send
    the terminal escapes."""
    from inputs.untrusted import control_escaped
    print(f"error: {control_escaped(message)}", file=sys.stderr)
    raise typer.Exit(code)


def check_positive(values: dict[str, float | None]) -> None:
    """Every given number finite and above 0 (NaN passes a `<= 0` check), else one line naming the option."""
    for name, value in values.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"{name}: must be a finite number greater than 0 (got {value:g})")


def check_output_file(option: str, path: Path, suffix: str | None = None) -> Path:
    """A file the command will write: its folder must exist and it must not be a folder itself;
    with `suffix`, the name ends in it (or has none: the file is written under exactly the name
    given). Checked before any work, so a long run never ends in a write error."""
    _check_length(option, path)
    if suffix and path.suffix and path.suffix.lower() != suffix:
        fail(f"{option}: {path} names a {path.suffix} file; this writes {suffix[1:].upper()}: name it "
             f"{path.with_suffix(suffix)}")
    if path.is_dir():
        fail(f"{option}: {path} is a folder; give a file name such as {path / 'plot.png'}")
    if path.exists() and not path.is_file():     # /dev/stdout, /dev/full, a FIFO: written in place, never replaced
        fail(f"{option}: {path} is not a regular file; give a file path, e.g. plot.png")
    if not path.parent.is_dir():
        fail(f"{option}: folder {path.parent} does not exist; create it or write elsewhere")
    return path


@contextmanager
def writing(option: str, path: Path):
    """A failed write of an output (ENOSPC, EIO, EPERM, ...) as one line, exit 1: the writer
    (inputs.outputs) has kept the previous file."""
    try:
        yield
    except OSError as exc:
        fail(f"{option}: cannot write {path}: {exc.strerror or exc}; the previous file, if any, is kept", code=1)


def check_output_dir(option: str, path: Path) -> Path:
    """A folder the command will fill: it may not exist yet, but it must not be a file."""
    _check_length(option, path)
    if path.exists() and not path.is_dir():
        fail(f"{option}: {path} is a file; give a folder (it is created when missing)")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            fail(f"{option}: {parent} is a file, so {path} cannot be a folder; give another path")
    return path


def _check_length(option: str, path: Path) -> None:
    from inputs import InputError
    from inputs.files import check_path_length
    try:
        check_path_length(path)
    except InputError as exc:
        fail(f"{option}: {exc}")
