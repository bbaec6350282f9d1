"""Standard output that fails in one line: a full disk (`> /dev/full`, ENOSPC), an I/O error, a
closed pipe (`| head`, EPIPE) or a refused write (EPERM) while a command prints is `error: cannot
write standard output: <why>`, exit 1, never a traceback; under an ASCII locale a character the
terminal cannot show is `?`.

How: `main` runs each command with `sys.stdout` behind `GuardedStream`, which turns an OSError
of a write or a flush into `StdoutError` (so an OSError from anything else is not mistaken for
one), and flushes before it returns, so buffered text fails inside `main` too. After a failure
the descriptor is pointed at /dev/null: the interpreter's own flush at exit would otherwise print
"Exception ignored ... BrokenPipeError" (the recipe of Python's `signal` docs, "Note on SIGPIPE").
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager


class StdoutError(Exception):
    def __init__(self, cause: OSError):
        super().__init__(cause.strerror or str(cause))
        self.cause = cause


class GuardedStream:
    """A text stream whose write and flush errors are `StdoutError`; everything else passes through."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutError(exc) from None

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def tolerate_narrow_encodings() -> None:
    """Under an ASCII locale (LC_ALL=C with PYTHONUTF8=0, or PYTHONIOENCODING=ascii) a character
    the stream cannot encode (a tree's guide lines, an em dash) is written as `?` instead of being
    a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding and not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


@contextmanager
def guarded_stdout():
    """Run a command with stdout guarded; a failed write comes out as `StdoutError`."""
    tolerate_narrow_encodings()
    original = sys.stdout
    sys.stdout = GuardedStream(original)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = original


def quiet_stdout() -> None:
    """Point the failed stdout at /dev/null so that the flush at exit finds nothing to fail on."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):   # not a real descriptor (a test's capture)
        pass
