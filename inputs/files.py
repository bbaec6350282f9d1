"""Read a file someone named (`--config`, a report, a profiles file, a lengths file, a model
config): the one door for every path option, so a FIFO, `/dev/zero`, a folder, a sparse 5 GB
file or a 300-byte name gives one clear line instead of a hang, a memory blow-up or a traceback.

Use `read_regular_file(path, max_bytes, what)` (bytes) or `read_text(...)` (UTF-8 text) for any
new path option; do not call `Path.read_text`/`open` on a path a user gave.

How: the path's length first (Linux NAME_MAX 255 bytes per name, PATH_MAX 4096 bytes in all,
<linux/limits.h>), then `stat` (a regular file, its size under the cap) before anything is
opened, then `open(O_RDONLY | O_NONBLOCK)` (opening a FIFO for reading without O_NONBLOCK blocks
until a writer comes) and `fstat` on the open descriptor (the file could have been swapped
between the two), then a read of at most `max_bytes + 1` bytes, so even a file that grows while
read (or a /proc file that reports size 0) never holds more than the cap in memory.
"""
from __future__ import annotations

import os
import stat

from .errors import InputError

NAME_MAX = 255          # bytes in one path component (Linux <linux/limits.h>; ext4, xfs)
PATH_MAX = 4096         # bytes in a whole path (Linux <linux/limits.h>)
CHUNK = 1 << 20
# The kernel's pseudo-filesystems: their "files" are the process's environment (/proc/self/environ),
# memory, devices. No option of ours reads one, and a parse error on one could echo what it holds.
PSEUDO_FOLDERS = ("/proc", "/sys", "/dev")


def shown(path) -> str:
    """The path as an error line shows it: at most 120 characters, control characters escaped."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    text = text.encode("unicode_escape", "backslashreplace").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_path_length(path) -> None:
    """InputError when a name is over NAME_MAX bytes or the path over PATH_MAX."""
    raw = os.fsencode(path)
    if len(raw) > PATH_MAX:
        raise InputError(f"{shown(path)}: the path is {len(raw):,} bytes; paths are at most {PATH_MAX:,} (Linux PATH_MAX)")
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise InputError(f"{shown(path)}: a name in it is {len(part):,} bytes; a file name is at most "
                             f"{NAME_MAX} bytes (Linux NAME_MAX); shorten it")
    if b"\x00" in raw:
        raise InputError(f"{shown(path)}: a path cannot hold a NUL byte")


def _pseudo_folder(st: os.stat_result) -> str | None:
    """The pseudo-filesystem a file is on, by its device (the same before and after `open`, so a path
    swapped between the two is caught too), or None."""
    for folder in PSEUDO_FOLDERS:
        try:
            if os.stat(folder).st_dev == st.st_dev:
                return folder
        except OSError:
            continue
    return None


def _check_stat(path, st: os.stat_result, max_bytes: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{shown(path)}: is {_kind(st.st_mode)}; give a {what} (a regular file)")
    folder = _pseudo_folder(st)
    if folder is not None:
        raise InputError(f"{shown(path)}: is on {folder}, a kernel pseudo-filesystem; give a {what} (a regular file)")
    if st.st_size > max_bytes:
        raise InputError(f"{shown(path)}: {st.st_size:,} bytes; a {what} is at most {max_bytes:,}")


def file_in_folder(name: str, folder) -> str:
    """A file a stack file names, as an absolute path: a relative name from the stack file's folder
    and, its links followed, inside it (a stack file is shared, committed and previewed in CI: a
    `../` or a link out of its folder must not read someone's home); an absolute one as given
    (what `--lengths` passes)."""
    check_path_length(name)
    if os.path.isabs(name):
        return name
    base = os.path.realpath(folder)
    full = os.path.join(base, name)
    if os.path.commonpath([base, os.path.realpath(full)]) != base:
        raise InputError(f"{shown(name)}: is outside the stack file's folder ({shown(folder)}); put the file "
                         "in that folder or below it and name it from there")
    return full


def read_regular_file(path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`, or InputError naming the path and the fix."""
    return b"".join(iter_regular_file(path, max_bytes, what))


def iter_regular_file(path, max_bytes: int, what: str = "file", chunk_bytes: int = CHUNK):
    """The bytes of a regular file of at most `max_bytes`, in chunks of `chunk_bytes`, checked as the
    module says (length, stat, O_NONBLOCK, fstat, a bounded read): `read_regular_file` joins them; a
    reader whose memory must not grow with the file takes them one by one."""
    check_path_length(path)
    try:
        _check_stat(path, os.stat(path), max_bytes, what)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{shown(path)}: no such file; check the path (a {what})") from None
    except NotADirectoryError:
        raise InputError(f"{shown(path)}: a part of the path is a file, not a folder; check the path") from None
    except OSError as exc:
        raise InputError(f"{shown(path)}: cannot be read ({exc.strerror}); check the path and its permissions") from None
    try:
        _check_stat(path, os.fstat(fd), max_bytes, what)
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(chunk_bytes, max_bytes + 1 - total))
            except BlockingIOError:
                raise InputError(f"{shown(path)}: would block; give a {what} (a regular file)") from None
            except OSError as exc:
                raise InputError(f"{shown(path)}: cannot be read ({exc.strerror})") from None
            if not chunk:
                return
            total += len(chunk)
            if total > max_bytes:
                raise InputError(f"{shown(path)}: more than {max_bytes:,} bytes; a {what} is at most {max_bytes:,}")
            yield chunk
    finally:
        os.close(fd)


def read_text(path, max_bytes: int, what: str = "file") -> str:
    """`read_regular_file` decoded as UTF-8 (a BOM is dropped), or InputError naming the byte."""
    data = read_regular_file(path, max_bytes, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown(path)}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                         "save it as UTF-8") from None


__all__ = ["InputError", "NAME_MAX", "PATH_MAX", "PSEUDO_FOLDERS", "check_path_length", "file_in_folder",
           "iter_regular_file", "read_regular_file", "read_text", "shown"]
