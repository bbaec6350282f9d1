"""No secret content in any output (README: "Secrets only ever show as [secret]").

A sentinel is planted in every secret: as each `secure:` value of the stack file, and as the value
the offline engine hands the program for each secret (the program's only source of secret
values). Then every command runs, on its success path and on its error paths, and nothing it
prints or writes may contain the sentinel. The sentinel carries no marker the preview's own
secret scan looks for, so the scan cannot hide a leak from this test.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.inprocess_cli import run_cli
from tests.stacks import stack_config

SENTINEL = "S3NT1NEL-7f3a"
SECRET_KEYS = ("llm-serving:hubToken", "llm-serving:apiKeys", "llm-serving:grafanaAdminPassword",
               "llm-serving:tlsCertificate", "llm-serving:tlsPrivateKey")


def sentinel_value(key: str, raw: dict) -> str:
    name = key.partition(":")[2]
    if name == "apiKeys":
        names = (raw.get("llm-serving:gateway") or {}).get("apiKeyNames") or ["default"]
        return json.dumps({n: f"{SENTINEL}-{n}" for n in names})
    return f"{SENTINEL}-{name}"


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """Stack files with the sentinel in every secret, read by --stack NAME and --config PATH alike."""
    import settings
    import settings.load
    from offline import engine

    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for stack in ("prod", "staging", "dev"):
        config = stack_config(stack)
        for key in SECRET_KEYS:
            config[key] = {"secure": f"v1:{SENTINEL}"}
        (stacks / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    monkeypatch.setenv(settings.load.STACKS_ENV, str(stacks))
    monkeypatch.setattr(engine, "placeholder_secret", sentinel_value)
    return stacks


def assert_clean(result, *files: Path) -> None:
    assert SENTINEL not in result.stdout and SENTINEL not in result.stderr
    for path in files:
        for f in ([path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]):
            assert SENTINEL.encode() not in f.read_bytes(), f


@pytest.mark.parametrize("argv, code", [
    (["size", "--stack", "prod"], 0),
    (["preview", "--stack", "prod"], 0),
    (["preview", "--stack", "prod", "--json"], 0),
    (["preview", "--stack", "dev"], 0),
    (["simulate", "--stack", "dev", "--duration", "30"], 0),
])
def test_success_paths_print_no_secret(planted, argv, code):
    result = run_cli(argv, limit_s=120)
    assert result.exit_code == code, result.stderr
    assert_clean(result)


@pytest.mark.parametrize("command", ["preview", "render"])
def test_a_provided_certificate_and_key_are_printed_nowhere(planted, tmp_path, command):
    config = yaml.safe_load((planted / "Pulumi.prod.yaml").read_text())["config"]
    gateway = {k: v for k, v in config["llm-serving:gateway"].items() if k != "acmeEmail"}     # ACME only
    config["llm-serving:gateway"] = {**gateway, "certificate": "provided"}
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    out = tmp_path / "out"
    result = run_cli([command, "--stack", "prod", "--config", str(path)]
                     + (["--out", str(out)] if command == "render" else []), limit_s=120)
    assert result.exit_code == 0, result.stderr
    assert_clean(result, *([out] if command == "render" else []))
    from offline.engine import run_program, unwrap         # the control: the sentinel did reach the program
    recording = run_program("prod", config)
    assert any(f"{SENTINEL}-tlsPrivateKey" in json.dumps(unwrap(r.inputs)) for r in recording.resources)


def test_preview_shows_secrets_only_as_placeholders(planted):
    result = run_cli(["preview", "--stack", "prod", "--json"], limit_s=120)
    data = json.loads(result.stdout)
    secret = next(r for r in data["resources"] if r["name"] == "llm-gateway-api-keys")
    assert secret["inputs"]["stringData"] == "[secret]"


def test_render_writes_no_secret(planted, tmp_path):
    out = tmp_path / "out"
    result = run_cli(["render", "--stack", "staging", "--out", str(out)], limit_s=120)
    assert result.exit_code == 0, result.stderr
    assert_clean(result, out)
    assert "[secret]" in (out / "manifests" / "llm-serving_secret_hub-token.yaml").read_text()


def test_loadtest_report_prints_no_secret(planted, upstream_file):
    result = run_cli(["loadtest-report", str(upstream_file("samples/guidellm-report-0.8.0.dev18.json")),
                      "--stack", "dev", "--json"], limit_s=120)
    assert result.exit_code == 1
    assert_clean(result)


@pytest.mark.parametrize("api_keys, message", [
    (SENTINEL, "secret apiKeys is not JSON"),
    (json.dumps([SENTINEL]), "secret apiKeys is not a JSON object of non-empty string keys"),
    (json.dumps({f"{SENTINEL}-name": SENTINEL}), "secret apiKeys has no key for team-a, team-b and holds 1 entry"),
    (json.dumps({"team-a": SENTINEL, "team-b": 7}), "secret apiKeys is not a JSON object of non-empty string keys"),
])
@pytest.mark.parametrize("command", ["preview", "render"])
def test_a_malformed_api_keys_secret_is_refused_without_quoting_it(planted, monkeypatch, tmp_path, api_keys,
                                                                     message, command):
    from offline import engine

    monkeypatch.setattr(engine, "placeholder_secret",
                        lambda key, raw: api_keys if key.endswith(":apiKeys") else sentinel_value(key, raw))
    argv = [command, "--stack", "prod"] + (["--out", str(tmp_path / "out")] if command == "render" else [])
    result = run_cli(argv, limit_s=120)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert_clean(result)


@pytest.mark.parametrize("mangle, in_a_secret", [
    (lambda c: c.update({"llm-serving:hubToken": SENTINEL}), True),               # a secret in plain text
    (lambda c: c.update({"llm-serving:grafanaAdminPassword": [SENTINEL]}), True),
    (lambda c: c.update({"llm-serving:environment": "qa"}), True),                # any settings error
    (lambda c: c.update({"llm-serving:gateway": {"hostname": SENTINEL}}), False),  # not a secret: may be quoted
])
@pytest.mark.parametrize("command", ["preview", "render", "preflight"])
def test_settings_errors_print_no_secret(planted, tmp_path, mangle, in_a_secret, command):
    config = yaml.safe_load((planted / "Pulumi.prod.yaml").read_text())["config"]
    mangle(config)
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    argv = [command, "--stack", "prod", "--config", str(path)]
    argv += ["--out", str(tmp_path / "out")] if command == "render" else []
    result = run_cli(argv, limit_s=120)
    assert result.exit_code == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
    assert SENTINEL not in result.stdout
    if in_a_secret:
        assert SENTINEL not in result.stderr


def test_the_sentinel_reaches_the_program_so_its_absence_means_something(planted):
    from offline.engine import run_program, unwrap
    from settings import read_stack_config, stack_file

    recording = run_program("prod", read_stack_config(stack_file("prod")))
    secrets = [unwrap(r.inputs.get("stringData")) for r in recording.of_type("kubernetes:core/v1:Secret")]
    assert any(SENTINEL in json.dumps(s) for s in secrets)
