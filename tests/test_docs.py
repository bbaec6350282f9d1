"""The docs a newcomer follows stay true: the README is a short front door whose links resolve, the
first deploy is a numbered procedure whose commands name real flags, keys, targets and versions."""
from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
FIRST_DEPLOY = (ROOT / "docs" / "first-deploy.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) <= 200


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\(([^)#]+)\)", README))))
def test_every_readme_link_resolves(link):
    assert link.startswith("https://") or (ROOT / link).exists(), link


def test_the_first_deploy_is_numbered_in_order():
    steps = [int(n) for n in re.findall(r"^## (\d+)\. ", FIRST_DEPLOY, re.M)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 10


@pytest.mark.parametrize("command", [
    "pulumi login ", "pulumi stack init prod --secrets-provider \"awskms://",
    "pulumi config set --stack prod --secret llm-serving:hubToken", ".venv/bin/llmserve preflight --stack prod",
    "make up STACK=prod", "aws eks update-kubeconfig", "llm-serving:previewRoleArns[0]",
])
def test_the_first_deploy_has_each_step_a_deploy_needs(command):
    assert command in "\n".join(bash_blocks(FIRST_DEPLOY))


def test_the_first_deploy_installs_the_pulumi_cli_ci_pins():
    assert f"--version {WORKFLOW['env']['PULUMI_VERSION']}" in FIRST_DEPLOY


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_stack_key_a_doc_sets_exists(doc):
    from settings.schema import ALL_SECRET_KEYS, StackSettings

    keys = re.findall(r"'?llm-serving:([A-Za-z]+)", "\n".join(bash_blocks(doc.read_text())))
    assert set(keys) <= set(StackSettings.model_fields) | set(ALL_SECRET_KEYS), doc.name


@pytest.mark.parametrize("doc", [*DOCS, ROOT / "README.md"], ids=lambda p: p.name)
def test_every_llmserve_command_a_doc_runs_exists(doc):
    from typer.main import get_command

    from llmserve.cli import app

    known = set(get_command(app).commands)
    used = set(re.findall(r"llmserve (\w[\w-]*)", "\n".join(bash_blocks(doc.read_text()))))
    assert used <= known, doc.name


@pytest.mark.parametrize("stack, config", [("prod", "prod"), ("staging", "staging"), ("dev", "dev")])
def test_make_up_only_adds_the_policy_pack_and_its_config(stack, config):
    printed = subprocess.run(["make", "-s", "-n", "up", f"STACK={stack}"], cwd=ROOT, capture_output=True, text=True)
    assert printed.stdout.split() == ["pulumi", "up", "--stack", stack, "--policy-pack", "policies",
                                      "--policy-pack-config", f"policies/config/{config}.json"]


@pytest.mark.parametrize("doc", [*DOCS, ROOT / "README.md"], ids=lambda p: p.name)
def test_docs_state_no_one_machines_timings(doc):
    assert not re.search(r"this 2-core machine|numbers from this|where this was built|not measured here", doc.read_text()), doc.name


def test_the_contracts_flag_table_is_the_codes():
    """docs/contracts.md prints deployment/engine.py's one table from field to vLLM flag, row by row."""
    import dataclasses
    from deployment.engine import FLAGS, MULTI_NODE_FLAGS
    from sizing.engine_args import EngineArgs
    text = (ROOT / "docs" / "contracts.md").read_text()
    rows = [line.split("|")[1:4] for line in text.splitlines()
            if line.startswith("| `") and line.count("|") == 5 and "`--" in line]
    documented = [(field.strip().strip("`"), flag.strip().strip("`"), when.strip()) for field, flag, when in rows]
    assert documented == [(f.field, f.flag, f.when.value) for f in FLAGS + MULTI_NODE_FLAGS]
    engine = {f.name for f in dataclasses.fields(EngineArgs)}
    assert engine <= {f.field for f in FLAGS + MULTI_NODE_FLAGS}       # every engine argument reaches a flag
