"""`llmserve render`: every Kubernetes object as YAML, valid for its schema, no secret on disk."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from llmserve.cli import app
from offline.engine import PLACEHOLDER_PREFIX, offline_config
from offline.manifests import kubernetes_objects, manifest_name
from offline.values import manifest_value
from tests.k8s_schema import CrdMissing, is_custom, validate
from settings import stack_settings
from tests.conftest import ROOT, UPSTREAM
from tests.stacks import stack_config

runner = CliRunner()


def render(stack: str, out: Path):
    return runner.invoke(app, ["render", "--stack", stack, "--out", str(out)])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Path]:
    """Each stack rendered once through the CLI (each render builds the program under mocks)."""
    out = {}
    for stack in ("prod", "staging", "dev"):
        folder = tmp_path_factory.mktemp(stack)
        result = render(stack, folder)
        assert result.exit_code == 0, result.output
        out[stack] = folder
    return out


def manifests(folder: Path) -> list[tuple[Path, dict]]:
    return [(p, yaml.safe_load(p.read_text())) for p in sorted((folder / "manifests").glob("*.yaml"))]


def test_render_reports_what_it_wrote_and_writes_the_same_bytes_again(rendered, tmp_path):
    result = render("prod", tmp_path)
    assert result.exit_code == 0
    count = len(list((tmp_path / "manifests").glob("*.yaml")))
    helm = len(list((tmp_path / "helm").glob("*.yaml")))
    monitoring = len(list((tmp_path / "prometheus").iterdir())) + len(list((tmp_path / "grafana").iterdir()))
    assert result.output.splitlines() == [
        f"wrote {count} Kubernetes objects to {tmp_path / 'manifests'}",
        f"wrote {helm} Helm releases to {tmp_path / 'helm'}",
        f"wrote {monitoring} more files (Prometheus rules, Grafana dashboards) under {tmp_path}",
    ]
    for sub in ("manifests", "helm", "prometheus", "grafana"):
        first = {p.name: p.read_bytes() for p in (rendered["prod"] / sub).iterdir()}
        assert first == {p.name: p.read_bytes() for p in (tmp_path / sub).iterdir()}


def test_an_unknown_stack_is_one_line_and_exit_2(tmp_path):
    result = render("nope", tmp_path)
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: --stack nope: ")
    assert "no such stack file" in result.output


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_every_object_the_program_creates_is_rendered(recorded, rendered, stack):
    recording = recorded(stack)
    expected = sorted(manifest_name(o) for o in kubernetes_objects(recording))
    assert sorted(p.name for p, _ in manifests(rendered[stack])) == expected
    for path, obj in manifests(rendered[stack]):
        assert path.name == manifest_name(obj)
        assert list(obj)[:3] == ["apiVersion", "kind", "metadata"]


def kinds_of_optional_crds_not_fetched() -> set[str]:
    """Kinds whose CRD scripts/fetch-upstream fetches only where it can download (cert-manager's:
    ../shared has no copy), when it could not. Everything else must validate."""
    manifest = json.loads((ROOT / "scripts" / "upstream-files.json").read_text())["files"]
    return {kind for entry in manifest if not entry.get("required", True)
            and not (UPSTREAM / entry["path"]).is_file() for kind in entry.get("kinds", [])}


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_every_rendered_object_validates_for_the_clusters_version(rendered, stack):
    version = stack_settings(stack).kubernetesVersion
    kinds, not_validated = set(), set()
    for path, obj in manifests(rendered[stack]):
        try:
            validate(obj, version)      # raises ValidationFailed naming the object and the field
        except CrdMissing:
            not_validated.add(obj["kind"])
        kinds.add((is_custom(obj), obj["kind"]))
    assert not_validated <= kinds_of_optional_crds_not_fetched()
    assert any(custom for custom, _ in kinds) and any(not custom for custom, _ in kinds)


def stack_secret_values(stack: str) -> set[str]:
    """The secret values the program is given (the offline placeholders), and each API key."""
    raw = stack_config(stack)
    config, secret_keys = offline_config(raw)
    values = set()
    for key in secret_keys:
        values.add(config[key])
        if key.endswith(":apiKeys"):
            values.update(json.loads(config[key]).values())
    return values


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_no_secret_value_reaches_disk(rendered, stack):
    values = stack_secret_values(stack)
    assert len(values) >= 3
    encoded = {base64.b64encode(v.encode()).decode() for v in values}
    for path in rendered[stack].rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert PLACEHOLDER_PREFIX not in text, path.name
            for value in values | encoded:
                assert value not in text, path.name


def test_a_secret_keeps_its_keys_and_hides_its_values(rendered):
    (obj,) = [o for p, o in manifests(rendered["prod"]) if p.name == "llm-serving_secret_gateway-api-keys.yaml"]
    assert obj["stringData"] == {"team-a": "[secret]", "team-b": "[secret]", "accuracy-gate": "[secret]"}


@pytest.mark.parametrize("value,expected", [
    (2.0, 2), (0.9, 0.9), ({"b": 1.0, "a": [3.0]}, {"a": [3], "b": 1}), ("x", "x"),
])
def test_manifest_values(value, expected):
    assert manifest_value(value) == expected


