"""Reading a file a user names (a stack key or a CLI flag): a regular file only, its size checked
with stat before a byte is read, UTF-8 text. Errors are one line naming the path and the fix.

A small reader for issue 17's lengths file; issue 23 builds the shared safe reader, which should
replace this one when it lands (same contract: `read_text(path, what, max_bytes)`).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_LENGTHS_FILE_BYTES = 64 * 2**20     # 64 MiB: about a million rows of two lengths


class FileInputError(ValueError):
    """A named file that cannot be used; the message names it and the fix."""


def read_text(path: Path, what: str, max_bytes: int = MAX_LENGTHS_FILE_BYTES) -> str:
    """The file's text: regular files only (no FIFO, device or folder), at most max_bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise FileInputError(f"{path}: no such file; give the path of the {what}") from None
    except IsADirectoryError:
        raise FileInputError(f"{path}: is a folder; give the path of the {what}") from None
    except OSError as exc:
        raise FileInputError(f"{path}: cannot be read ({exc.strerror}); check the path and its permissions") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileInputError(f"{path}: is a folder; give the path of the {what}")
        if not stat.S_ISREG(info.st_mode):
            raise FileInputError(f"{path}: not a regular file; give the path of the {what}")
        if info.st_size > max_bytes:
            raise FileInputError(f"{path}: {info.st_size:,} bytes; the {what} is read up to {max_bytes:,}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileInputError(f"{path}: more than {max_bytes:,} bytes; the {what} is read up to {max_bytes:,}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileInputError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                             "save it as UTF-8 CSV or JSONL") from None
