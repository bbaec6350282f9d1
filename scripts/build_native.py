"""Compile the simulator's hot modules with mypyc into build/native/<key>/ (simulator/native.py).

    .venv/bin/python scripts/build_native.py

Needs mypy (pyproject's `native` extra), a C compiler and the interpreter's headers. Exits 0
with one line when the build for the current sources exists already; exits 1 with the reason
when it cannot build (the simulator then runs its pure-Python modules, about half as fast).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator import native  # noqa: E402


def build(target: Path) -> None:
    """mypyc's C, then the extension modules, into a fresh folder moved into place at the end
    (an interrupted build leaves no half-built folder under the key)."""
    sources = [f"simulator/{name}" for name in native.COMPILED]
    with tempfile.TemporaryDirectory(prefix="llm-serving-native-") as tmp:
        # mypyc and setuptools in a child: the build's output stays out of this process's stdout
        code = ("import sys; from setuptools import setup; from mypyc.build import mypycify\n"
                f"setup(name='llm-serving-native', ext_modules=mypycify({sources!r} + "
                "['--ignore-missing-imports', '--follow-imports=silent'], opt_level='3', "
                f"group_name='simulator.native_rt', target_dir={tmp + '/c'!r}), script_args=['build_ext', "
                f"'--build-lib', {tmp + '/lib'!r}, '--build-temp', {tmp + '/obj'!r}])")
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "LLM_SERVING_NATIVE": "0"})
        if done.returncode != 0:
            raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f"{tmp}/lib", target)
    for stale in target.parent.iterdir():       # builds of earlier sources: never imported again
        if stale != target:
            shutil.rmtree(stale, ignore_errors=True)


def main() -> int:
    target = native.build_dir()
    if (target / "simulator").is_dir():
        print(f"simulator: compiled build up to date ({target.relative_to(ROOT)})")
        return 0
    reason = native.unbuildable()
    if reason is None:
        try:
            build(target)
        except RuntimeError as exc:
            reason = f"mypyc failed: {exc}"
    if reason is not None:
        print(f"simulator: not compiled ({reason}); it runs as pure Python, about half as fast", file=sys.stderr)
        return 1
    print(f"simulator: compiled with mypyc ({target.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
