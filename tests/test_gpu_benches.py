"""The GPU microbenchmarks (bench/gpu_*.py, docs/benchmarks.md) stay runnable where there is no GPU:
they parse, take --help without torch (imported inside main(), never at the top), and, where torch
is installed, run their --dry-run (tiny shapes, one iteration, CPU) to a JSON file. torch is not
a dependency of the project: without it the dry run is skipped."""
from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BENCHES = {"gpu_moe_layer_bench.py": "gpu_moe_layer_bench.json", "gpu_mla_decode_bench.py": "gpu_mla_decode_bench.json"}
HAS_TORCH = importlib.util.find_spec("torch") is not None
# --help with torch made unimportable (sys.modules["torch"] = None): it must not be needed for it.
NO_TORCH_HELP = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [sys.argv[1], '--help']; "
                 "runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.mark.parametrize("script", sorted(BENCHES))
def test_the_bench_parses_and_imports_torch_only_inside_main(script):
    tree = ast.parse((ROOT / "bench" / script).read_text())
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in node.names} | {node.module.split(".")[0] for node in tree.body
                                       if isinstance(node, ast.ImportFrom) and node.module}
    assert "torch" not in top
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


@pytest.mark.parametrize("script", sorted(BENCHES))
def test_the_bench_help_works_without_torch(script):
    done = subprocess.run([sys.executable, "-c", NO_TORCH_HELP, str(ROOT / "bench" / script)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--dry-run" in done.stdout


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (not a project dependency)")
@pytest.mark.parametrize("script", sorted(BENCHES))
def test_the_bench_dry_run_writes_its_json(script, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    res = json.loads((tmp_path / BENCHES[script]).read_text())
    assert res["dry_run"] is True and res["device"] == "cpu"
    assert res["rows"] and not any("error" in row for row in res["rows"])
