"""The user's stacks (stacks/): the one module that reads them, and only for what holds of any stack a
team deploys: each loads, holds real ciphertext, previews offline and gets its policy config. Every
other test reads its own fixtures (tests/fixtures/stacks, via LLM_SERVING_STACKS in conftest), so the
values a deploy writes into stacks/ (hostnames, CIDRs, a secrets provider, ciphertext) break nothing.
The same checks run on a prod stack as docs/first-deploy.md leaves it (awskms:// secrets provider, an
encrypted data key, `secure:` values, real names)."""
from __future__ import annotations

import base64
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmserve.cli import main
from settings import read_stack_config, settings_from_config
from settings.ciphertext import is_ciphertext
from settings.load import STACKS_ENV
from tests.conftest import FIXTURE_STACKS, ROOT

USER_STACKS = ROOT / "stacks"


def ciphertext(rng: random.Random, size: int = 48) -> str:
    """As `pulumi config set --secret` writes it with an awskms:// provider: v1:<nonce>:<sealed>."""
    return f"v1:{base64.b64encode(rng.randbytes(12)).decode()}:{base64.b64encode(rng.randbytes(size)).decode()}"


def deployed_prod(rng: random.Random) -> dict:
    """prod after first-deploy steps 5, 6 and 12: its own names, zone, CIDRs and e-mail, the KMS
    secrets provider and its encrypted data key, and the secrets as ciphertext."""
    stack = yaml.safe_load((USER_STACKS / "Pulumi.prod.yaml").read_text())
    config = stack["config"]
    config["llm-serving:gateway"] = {**config["llm-serving:gateway"], "hostname": "llm.inference.acme-robotics.io",
                                     "hostedZoneId": "Z04917371B1LHXWN0SD6T", "acmeEmail": "ml-platform@acme-robotics.io"}
    config["llm-serving:apiAllowedCidrs"] = ["34.203.12.0/24", "18.232.91.17/32"]
    config["llm-serving:previewRoleArns"] = ["arn:aws:iam::480265734119:role/llm-serving-ci-preview"]
    for key in ("hubToken", "apiKeys", "grafanaAdminPassword"):
        config[f"llm-serving:{key}"] = {"secure": ciphertext(rng)}
    return {"secretsprovider": "awskms://alias/llm-serving-pulumi?region=us-east-1",
            "encryptedkey": base64.b64encode(rng.randbytes(184)).decode(), "config": config}


@pytest.fixture(params=["committed", "deployed"])
def stacks(request, tmp_path) -> Path:
    """The user's stacks as committed, and with prod replaced by a deployed one."""
    if request.param == "committed":
        return USER_STACKS
    folder = tmp_path / "stacks"
    shutil.copytree(USER_STACKS, folder)
    (folder / "Pulumi.prod.yaml").write_text(yaml.safe_dump(deployed_prod(random.Random(30)), sort_keys=False))
    return folder


def stack_names(folder: Path) -> list[str]:
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in folder.glob("Pulumi.*.yaml"))


def secure_values(node):
    if isinstance(node, dict):
        if set(node) == {"secure"}:
            yield node["secure"]
        for value in node.values():
            yield from secure_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from secure_values(value)


def test_the_suite_reads_its_own_fixtures_not_the_users_stacks():
    import os

    from settings.load import stack_file
    assert os.environ[STACKS_ENV] == str(FIXTURE_STACKS) and stack_file("prod").parent == FIXTURE_STACKS
    assert stack_names(FIXTURE_STACKS) == ["dev", "prod", "prod-deepseek-r1", "prod-multinode", "staging"]


def test_every_stack_loads(stacks):
    for name in stack_names(stacks):
        settings = settings_from_config(name, read_stack_config(stacks / f"Pulumi.{name}.yaml"))
        assert settings.stack == name and settings.zones


def test_every_secure_value_is_pulumi_ciphertext(stacks):
    """What `pulumi config set --secret` writes (settings/ciphertext.py), never a stand-in."""
    for name in stack_names(stacks):
        raw = yaml.safe_load((stacks / f"Pulumi.{name}.yaml").read_text())
        fake = [v for v in secure_values(raw) if not is_ciphertext(v)]
        assert fake == [], f"{name}: placeholder secure values; set each with pulumi config set --secret"


@pytest.mark.parametrize("name", ["prod", "staging", "dev"])
def test_prod_staging_and_dev_preview_offline(stacks, name, monkeypatch, capsys):
    """Exit 0 or 1 (a mandatory violation the user's values may cause); never 2, a config error."""
    monkeypatch.setenv(STACKS_ENV, str(stacks))
    code = main(["preview", "--stack", name])
    out = capsys.readouterr().out
    assert code in (0, 1) and "Sizing plan:" in out


def test_every_stack_gets_its_policy_config(stacks):
    for name in stack_names(stacks):
        env_name = read_stack_config(stacks / f"Pulumi.{name}.yaml")["llm-serving:environment"]
        done = subprocess.run([str(ROOT / "scripts" / "policy-config"), name], capture_output=True, text=True,
                              env={**__import__("os").environ, STACKS_ENV: str(stacks)}, timeout=60)
        assert (done.returncode, done.stdout) == (0, f"policies/config/{env_name}.json\n"), done.stderr
