"""Reading a file a user names (a stack key or a CLI flag) for the settings: issue 17's lengths
file, through the shared reader (`inputs.files`: a regular file only, its size checked with stat
before a byte is read, a bounded read, names over 255 bytes refused), as UTF-8 text. Errors are
one line naming the path and the fix.
"""
from __future__ import annotations

from pathlib import Path

from inputs import InputError
from inputs import files

MAX_LENGTHS_FILE_BYTES = 64 * 2**20     # 64 MiB: about a million rows of two lengths


class FileInputError(InputError):
    """A named file that cannot be used; the message names it and the fix."""


def read_text(path: Path, what: str, max_bytes: int = MAX_LENGTHS_FILE_BYTES) -> str:
    """The file's text: regular files only (no FIFO, device or folder), at most max_bytes."""
    try:
        return files.read_text(path, max_bytes, what)
    except InputError as exc:
        raise FileInputError(str(exc)) from None
