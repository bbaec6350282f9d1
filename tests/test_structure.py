"""Functions short enough to read at once: no function in the project is longer than 60 lines
(long constructors are split into named steps), except the declared data tables listed below; and
modules of one concept each: no module of the sizing engine is over 600 lines."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60
MAX_SIZING_MODULE_LINES = 600     # sizing/ splits by concept (workload, memory, checks, replica model, ...)
# Directories that are not the project's own source: virtual environments, fetched upstream
# copies and build output (every name starting with "." is skipped as well).
NOT_SOURCE = {"__pycache__", "build", "dist", "node_modules", "shared", "vendor"}   # vendor: upstream files, byte for byte

# Declared data tables: functions whose body is one literal table of expected cases, read row by
# row like a spec. Splitting them would scatter the table, not make it easier to read.
# (path relative to the repository root, function name) -> why it may be long.
DATA_TABLES = {
    ("tests/test_policies.py", "reference_layout"):
        "the reference layout's expected resources, one literal row per resource",
    ("tests/test_rules_promtool.py", "cases"):
        "the promtool cases: one literal (rule, fires?, series, alerts) row per alert",
}


def project_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py")
                  if not any(part.startswith(".") or part in NOT_SOURCE or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts[:-1]))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `path` longer than `limit` lines, from its `def`
    to its last line (a decorator is a declaration, e.g. a policy's metadata, not code to follow)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_the_scan_sees_the_project_packages():
    seen = {p.relative_to(ROOT).parts[0] for p in project_files()}
    assert {"components", "settings", "sizing", "simulator", "llmserve", "offline", "tests"} <= seen
    assert not any(".venv" in p.parts for p in project_files())


def test_the_scan_finds_a_long_function(tmp_path):
    source = tmp_path / "long.py"
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source.write_text(f"class C:\n    @staticmethod\n    def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert long_functions(source) == [("long", MAX_FUNCTION_LINES + 1)]


@pytest.mark.parametrize("entry", sorted(DATA_TABLES), ids=lambda e: f"{e[0]}::{e[1]}")
def test_every_allowed_data_table_is_still_long(entry):
    """The allow-list holds only what it must: each entry names a function that is still over the limit."""
    path, name = entry
    assert name in {n for n, _ in long_functions(ROOT / path)}, f"{path}::{name} is short now: drop it from DATA_TABLES"


def test_no_function_is_longer_than_the_limit():
    over = [f"{path.relative_to(ROOT)}::{name} ({lines} lines)"
            for path in project_files() for name, lines in long_functions(path)
            if (path.relative_to(ROOT).as_posix(), name) not in DATA_TABLES]
    assert over == [], f"split into named steps (at most {MAX_FUNCTION_LINES} lines each): {over}"


def test_no_sizing_module_is_longer_than_the_limit():
    modules = sorted((ROOT / "sizing").rglob("*.py"))
    assert {"workload.py", "memory.py", "checks.py", "model.py", "planner.py"} <= {p.name for p in modules}
    over = {p.relative_to(ROOT).as_posix(): n for p in modules
            if (n := len(p.read_text().splitlines())) > MAX_SIZING_MODULE_LINES}
    assert over == {}, f"split by concept (at most {MAX_SIZING_MODULE_LINES} lines a module): {over}"
