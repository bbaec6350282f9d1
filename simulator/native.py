"""The simulator's compiled build: its hot modules compiled by mypyc, used only when built from
these exact sources.

`scripts/setup` compiles COMPILED (mypyc, pinned in pyproject's `native` extra) into
build/native/<key>/, where the key is a digest of their sources; a package imports those
extension modules ahead of the .py files only when that folder exists, so an edited source is
never shadowed by a stale build (its key changes and the pure-Python modules run until the next
setup). The compiled modules are the same source, so a run gives the same results either way
(tests/test_simulator_native.py compares them); they are about three times as fast.
`LLM_SERVING_NATIVE=0` runs the pure-Python modules whatever is built.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
COMPILED = ("workload.py", "replica.py", "router.py", "loop.py")
BUILD_ROOT = PACKAGE_DIR.parent / "build" / "native"
SWITCH_ENV = "LLM_SERVING_NATIVE"


def build_key() -> str:
    """A digest of the compiled modules' sources, in order."""
    digest = hashlib.sha256()
    for name in COMPILED:
        digest.update(name.encode() + b"\0" + (PACKAGE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    """Where the build of the current sources lives (a package folder `simulator/` inside it)."""
    return BUILD_ROOT / build_key()


def enable(package_path: list[str]) -> bool:
    """Put the current sources' build ahead of the sources on the package's path, if it exists.
    The extension modules there carry the interpreter's ABI tag in their names, so another
    interpreter finds none of them and imports the .py files."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return False
    compiled = build_dir() / "simulator"
    if not compiled.is_dir():
        return False
    package_path.insert(0, str(compiled))
    return True


def in_use() -> bool:
    """Whether the loaded simulator modules are the compiled ones (the package imports them all)."""
    replica = sys.modules.get(f"{__package__}.replica")
    return replica is not None and not str(getattr(replica, "__file__", "")).endswith(".py")


def unbuildable() -> str | None:
    """Why scripts/build_native.py cannot build here (and the fix), or None."""
    import importlib.util
    import shutil
    import sysconfig

    for module, fix in (("mypyc", "pip install -c constraints.txt -e '.[native]'"),
                        ("setuptools", "pip install setuptools; Python 3.12's venv has none")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({fix})"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}; Debian: apt-get install gcc)"
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        return f"no Python headers ({header}; Debian: apt-get install python3-dev)"
    return None
