"""Shared fixtures. The program runs under Pulumi mocks set for each build; a recording is plain
data once the build returns."""
from __future__ import annotations

import json
import os
from pathlib import Path

# The suite's own stacks (tests/fixtures/stacks), never the user's stacks/: a real deploy edits those
# (hostnames, CIDRs, secrets provider, ciphertext). Set before anything reads a stack, and inherited by
# every subprocess a test starts. tests/test_user_stacks.py is the one module that reads stacks/.
FIXTURE_STACKS = Path(__file__).resolve().parent / "fixtures" / "stacks"
os.environ["LLM_SERVING_STACKS"] = str(FIXTURE_STACKS)

import pytest  # noqa: E402

from tests.stacks import stack_config, with_overrides  # noqa: F401 (stack_config: re-exported for older imports)

ROOT = Path(__file__).resolve().parent.parent
# Upstream CRDs and captured samples, fetched (pinned URL + SHA-256) by scripts/fetch-upstream.
UPSTREAM = Path(os.environ.get("LLM_SERVING_UPSTREAM", ROOT / ".upstream"))


def upstream_path(relative: str) -> Path:
    """A fetched upstream file, or a failed test naming the script that fetches it."""
    path = UPSTREAM / relative
    if not path.is_file():
        pytest.fail(f"{path} missing: run scripts/fetch-upstream", pytrace=False)
    return path


@pytest.fixture
def upstream_file():
    return upstream_path


def _record(stack: str, overrides: dict | None = None, config: dict | None = None):
    from offline.engine import run_program
    raw = with_overrides(config if config is not None else stack_config(stack), overrides)
    return run_program(stack, raw)


@pytest.fixture
def build_program():
    """build_program(stack, overrides={key: value}, config=None) -> a fresh Recording of every
    registered resource. For tests that expect the build to fail or that change what they get;
    tests that only read a recording use `recorded`.

    Overrides replace whole `llm-serving:` keys (or `aws:region`) of the stack file's config.
    """
    return _record


@pytest.fixture(scope="session")
def recorded():
    """recorded(stack="prod", overrides=None) -> the Recording, built once per session for each
    (stack, overrides). Shared: read it, never change it."""
    cache: dict = {}

    def get(stack: str = "prod", overrides: dict | None = None):
        key = (stack, json.dumps(overrides, sort_keys=True, default=str))
        if key not in cache:
            cache[key] = _record(stack, overrides)
        return cache[key]
    return get


@pytest.fixture(scope="session", autouse=True)
def twin_runs(request, tmp_path_factory):
    """The real-server twin runs the selected tests read (tests/twin_runs.py), started at the
    session's first test in one background process, so their waiting overlaps the other tests'
    work. The folder is the session's own, shared by its pytest-xdist workers."""
    from tests import twin_runs as runs

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "twin-runs"
    session = request.session
    with runs.started(folder, runs.needed(session.items),
                      stop_early=lambda: bool(session.shouldfail or session.shouldstop)) as started:
        yield started


# The modules that take longest, first: pytest-xdist hands work out in collection order, so a long
# module started last would leave one worker running it alone at the end. The twin's tests last:
# by then the background runs they read have long ended.
FIRST = ("test_fuzz.py", "test_rules_promtool.py", "test_policies.py", "test_secrets_never_printed.py",
         "test_controllers.py", "test_preview_cli.py", "test_accuracy_gate.py", "test_preflight.py",
         "test_hostile_inputs.py", "test_agreement.py", "test_simulator.py", "test_render.py")
LAST = ("test_twin.py", "test_twin_fail_closed.py")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        if name in FIRST:
            return FIRST.index(name)
        return len(FIRST) + (1 if name in LAST else 0)
    items.sort(key=rank)        # stable: the order within a module and among the rest is kept


@pytest.fixture
def metrics_lints():
    """`promtool check metrics` on an exposition: its findings as a set of lines (the vLLM sample's
    own findings are the baseline the twin's and the emulator's expositions are held to)."""
    import shutil
    import subprocess
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/test does)")

    def lints(text: str) -> set[str]:
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        return {line for line in (done.stdout + done.stderr).splitlines() if line.strip()}
    return lints


# -- disaggregated and speculative plans (tests/disagg_plans.py) -------------------------------------
# Until sizing/disagg.py and sizing/speculative.py fill the planner's hooks, these stand in for them:
# the hook returns a plan of the contract's shape (sizing/roles.py) built from the aggregated one.
# Once the real planner is merged, the tests that use them can drop the fixture and plan for real.
@pytest.fixture
def disaggregated_planner(monkeypatch):
    """disaggregated_planner(link="nvlink", prefill=None, decode=None, margin=1.25): a request with
    serving_mode "disaggregated" gets tests.disagg_plans.disaggregated(aggregated plan, ...)."""
    import sizing.planner
    from tests.disagg_plans import disaggregated

    def use(**kwargs):
        original = sizing.planner._with_serving_mode

        def hook(p, req):
            return disaggregated(p, **kwargs) if req.serving_mode == "disaggregated" else original(p, req)
        monkeypatch.setattr(sizing.planner, "_with_serving_mode", hook)
    return use


@pytest.fixture
def speculative_planner(monkeypatch):
    """speculative_planner(enabled=True): a request with `speculative` gets tests.disagg_plans.speculative
    with the request's method, k (3 when the plan is to choose) and acceptance."""
    import sizing.planner
    from tests.disagg_plans import speculative

    def use(enabled: bool = True):
        original = sizing.planner._with_speculation

        def hook(p, req):
            s = req.speculative
            if s is None:
                return original(p, req)
            return speculative(p, s.method, s.draft_tokens or 3, s.acceptance_rate, enabled, s.draft_model)
        monkeypatch.setattr(sizing.planner, "_with_speculation", hook)
    return use
