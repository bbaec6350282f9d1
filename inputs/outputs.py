"""Write a file or a folder so that an interruption never costs the previous output: the one writer
for every output path (`render --out`, `--plot`, the profiles files `calibrate` rewrites).

A file is written to a temporary sibling (same folder, so the same file system), flushed and
fsync'ed, then renamed over the target (`os.replace`, atomic on POSIX): a kill, ENOSPC, EIO or EPERM
part-way leaves the old file whole and at most a hidden `.<name>.*.tmp` beside it, removed when the
error is an exception. A folder is filled in a hidden sibling and swapped in (`swap_folder`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(target: Path):
    """A temporary sibling of `target` to write (by any writer: matplotlib, yaml, ...); on success it
    is fsync'ed and renamed over `target`, on any exception removed."""
    target = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync(tmp)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def write_synced(path: Path, text: str) -> None:
    """A new file inside a folder being built (it is swapped in whole later): written and fsync'ed."""
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def staging_folder(parent: Path):
    """A hidden folder inside `parent` to build outputs in; removed afterwards, whatever happens."""
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def swap_folder(built: Path, target: Path) -> None:
    """Put the complete folder `built` at `target` (same file system): the old folder is moved aside
    first and removed only once the new one is in place, so `target` is always one or the other."""
    old = None
    if target.exists():
        old = built.parent / f".old-{target.name}"
        os.replace(target, old)
    try:
        os.replace(built, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
