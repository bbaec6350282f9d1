"""The import graph, read statically from the source (imports anywhere in a module, `__import__`
and `importlib.import_module` with a constant name): data flows one way, and nothing a library
part contains reaches up into the CLI."""
from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("conventions", "inputs", "sizing", "settings", "deployment", "components", "observability", "policies",
            "simulator", "offline", "twin", "proving", "emulator", "llmserve")
CLI = "llmserve"
LIBRARIES = tuple(p for p in PACKAGES if p != CLI)
# Which parts each part may import (besides itself and third-party code): the layers of the README.
ALLOWED = {
    "conventions": set(),
    "sizing": {"conventions"},
    "settings": {"conventions", "sizing"},
    # The plan as deployment data (no Pulumi): above settings and sizing, below what renders it.
    "deployment": {"conventions", "sizing", "settings"},
    "observability": {"conventions", "sizing", "settings", "deployment"},
    "simulator": {"conventions", "sizing", "settings", "deployment"},
    "components": {"conventions", "sizing", "settings", "deployment", "observability"},
    "policies": {"conventions"},
    "offline": {"conventions", "sizing", "settings", "deployment", "observability", "policies", "__main__"},
    "twin": {"conventions", "sizing", "settings", "deployment", "observability", "simulator"},
    "proving": {"conventions", "sizing", "settings", "simulator"},     # the load-test report and its verdict
    # the plan's fleet as a real-time OpenAI server: the simulator's engine, the twin's exposition
    "emulator": {"conventions", "sizing", "settings", "deployment", "simulator", "twin"},
    "llmserve": set(PACKAGES) - {"llmserve"},
}
# `inputs` (reading files, YAML and URLs we do not control) imports no part; every part may read through it.
ALLOWED["inputs"] = set()
for _part, _deps in ALLOWED.items():
    _deps.update(set() if _part == "inputs" else {"inputs"})
# Modules that run another by its path, which no import statement shows: `offline.engine` runs the
# Pulumi program (`__main__.py`) with `runpy.run_path` under mocks (`run_program`), so the offline
# harness sits on top of the program. Declared here, and every `runpy` call site must be declared.
RUNPY_EDGES = {"offline.engine": {"__main__"}}


def module_name(path: Path) -> str:
    parts = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module name `path` imports, relative imports resolved, string imports included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in ("__import__", "import_module"):
                names.add(node.args[0].value)
    return names


def runpy_calls(path: Path) -> int:
    """How many `runpy.run_path` / `runpy.run_module` calls `path` makes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and isinstance(node.func.value, ast.Name) and node.func.value.id == "runpy")


def source_files() -> dict[str, Path]:
    files = {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}
    return {name: path for name, path in files.items() if not name.endswith("__main__")} | {
        "__main__": ROOT / "__main__.py", "policies.__main__": ROOT / "policies" / "__main__.py"}


@lru_cache(maxsize=1)
def project_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a name that is an attribute maps to its module).
    Read once per test process (every source file parsed); the tests only read it."""
    files = source_files()
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_names(path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets | RUNPY_EDGES.get(name, set())
    return graph


def test_the_scan_sees_every_part_and_string_imports():
    graph = project_graph()
    assert {name.split(".")[0] for name in graph} >= set(PACKAGES)
    assert "offline.engine" in graph["offline.stack"]        # a function-level relative import
    assert "sizing.workload" in graph["llmserve.size_cmd"]
    assert imported_names(Path(__file__)) >= {"ast", "pathlib.Path"}


def test_every_runpy_edge_is_declared():
    files = source_files()
    running = {name for name, path in files.items() if runpy_calls(path)}
    assert running == set(RUNPY_EDGES)
    assert all(target in files for targets in RUNPY_EDGES.values() for target in targets)
    assert "__main__" in project_graph()["offline.engine"]


def test_the_scan_reads_string_imports(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("import importlib\n__import__('llmserve.cli')\nimportlib.import_module('offline.render')\n")
    assert {"llmserve.cli", "offline.render"} <= imported_names(path)


@pytest.mark.parametrize("package", LIBRARIES)
def test_no_library_part_imports_the_cli(package):
    graph = project_graph()
    modules = [name for name in graph if name.split(".")[0] == package]
    assert modules
    upward = {(m, t) for m in modules for t in graph[m] if t.split(".")[0] == CLI}
    assert not upward


@pytest.mark.parametrize("package", PACKAGES)
def test_each_part_imports_only_the_layers_below_it(package):
    graph = project_graph()
    modules = [name for name in graph if name.split(".")[0] == package]
    assert modules
    reached = {t.split(".")[0] for m in modules for t in graph[m]} - {package}
    assert reached <= ALLOWED[package], f"{package} imports {sorted(reached - ALLOWED[package])}"


def test_no_import_cycle_between_modules():
    graph = project_graph()
    done, on_path, cycles = set(), [], []

    def visit(node: str) -> None:
        if node in on_path:
            cycles.append(on_path[on_path.index(node):] + [node])
            return
        if node in done:
            return
        on_path.append(node)
        for target in sorted(graph.get(node, ())):
            visit(target)
        on_path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert len(graph) > 50
    assert cycles == []


def test_the_deployment_layer_imports_no_pulumi():
    """deployment/ is plain data: the simulator, the twin and `size` read it without the SDK."""
    for path in sorted((ROOT / "deployment").rglob("*.py")):
        pulumi = sorted(n for n in imported_names(path) if n.split(".")[0].startswith("pulumi"))
        assert not pulumi, f"{path.name} imports {pulumi}"


# What sibling component modules may share besides each other's component classes and their Args:
# the shared pod parts and the resource-option helpers. Every other name (a figure, a constant, a
# builder) lives in deployment/ or conventions, so a component is a Pulumi shell over its slice.
SHARED_COMPONENT_HELPERS = {"components.pods", "components.options"}
MOST_NAMES_CROSSING_COMPONENTS = 4


def names_crossing_components() -> set[tuple[str, str]]:
    """(importing module, name) for every name one component module takes from a sibling that is
    neither a class (a component, its Args, a resource type) nor one of the shared helpers."""
    crossing = set()
    for path in sorted((ROOT / "components").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 1):
                continue
            source = f"components.{node.module}" if node.module else "components"
            if source in SHARED_COMPONENT_HELPERS:
                continue
            for alias in node.names:
                if node.module is None or not alias.name[:1].isupper() or alias.name.isupper():
                    crossing.add((path.stem, alias.name))
    return crossing


def test_components_share_wiring_not_figures():
    crossing = names_crossing_components()
    assert len({name for _, name in crossing}) <= MOST_NAMES_CROSSING_COMPONENTS, sorted(crossing)


def test_the_crossing_count_sees_constants_functions_and_modules(tmp_path, monkeypatch):
    """The rule's own check: an UPPER constant, a function and a module count; a class does not."""
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "a.py").write_text(
        "from .b import LIMIT, helper, Widget, WidgetArgs\nfrom . import c\nfrom .pods import spread\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert names_crossing_components() == {("a", "LIMIT"), ("a", "helper"), ("a", "c")}
