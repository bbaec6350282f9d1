"""`llmserve preview`: the offline `pulumi preview`. Exit codes, exact lines, the JSON shape, and
no secret in plain text, through `llmserve.cli.main(argv)`."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

import offline.engine as engine
from llmserve.cli import main
from offline.engine import PLACEHOLDER_PREFIX, Recording, Registration
from offline.stack import load_stack
from settings import read_stack_config, stack_file, stack_settings
from sizing.planner import plan as make_plan
from sizing.report import plan_to_dict

STACKS = ["prod", "staging", "dev"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["preview", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_stack(tmp_path, name: str, **overrides) -> str:
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    for key, value in overrides.items():
        config[f"llm-serving:{key}"] = value
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return str(path)


@pytest.fixture
def policies(monkeypatch):
    """policies(result): make the policy pack report `result` for any recording."""
    import offline.policy_run

    def use(result: list[dict]):
        monkeypatch.setattr(offline.policy_run, "evaluate", lambda recording, environment: [dict(v) for v in result])
    return use


# -- text --------------------------------------------------------------------------------------------
def test_text_preview_prints_tree_plan_policies_and_outputs(capsys, policies):
    policies([])
    code, out, err = run(capsys, "--stack", "prod")
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].startswith("pulumi:pulumi:Stack llm-serving-prod  (")
    assert lines[0].endswith(" resources, us-east-1, prod)")
    assert any("llm-serving:gpu:GpuNodePool gpu-us-east-1a-p5" in line for line in lines)
    assert any("aws:eks/nodeGroup:NodeGroup gpu-us-east-1b-p5-ng  amiType=AL2023_x86_64_NVIDIA" in line for line in lines)
    assert any(line.startswith("Sizing plan: llama-3-70b fp8 on p5.48xlarge, TP=4") for line in lines)
    assert "Policies: 0 mandatory, 0 advisory violation(s)." in lines
    assert '  clusterName: "llm-serving-prod"' in lines
    assert '  kubeconfig: "[secret]"' in lines


def test_text_preview_nests_children_under_their_parents(capsys, policies):
    policies([])
    _, out, _ = run(capsys, "--stack", "prod")
    lines = out.splitlines()
    pool = next(i for i, line in enumerate(lines) if "GpuNodePool gpu-us-east-1a-p5" in line)
    indent = lines[pool].index("llm-serving:gpu")
    child = lines[pool + 1]
    assert "gpu-us-east-1a-p5-lt" in child and child.index("aws:ec2") > indent


# -- JSON ----------------------------------------------------------------------------------------------
def test_json_preview_has_exactly_the_documented_shape(capsys, policies):
    policies([])
    code, out, _ = run(capsys, "--stack", "prod", "--json")
    doc = json.loads(out)
    assert code == 0
    assert set(doc) == {"stack", "plan", "resources", "violations", "outputs", "placeholderSecrets", "exampleValues"}
    assert doc["stack"] == "prod"
    assert doc["violations"] == []
    assert all(set(r) == {"urn", "type", "name", "id", "parent", "dependencies", "inputs"} for r in doc["resources"])
    assert doc["outputs"]["kubeconfig"] == "[secret]"


def test_json_plan_is_the_sizing_plan(capsys, policies):
    policies([])
    _, out, _ = run(capsys, "--stack", "prod", "--json")
    expected = json.loads(json.dumps(plan_to_dict(make_plan(stack_settings("prod").plan_request())), default=str))
    assert json.loads(out)["plan"] == expected


def test_json_resources_record_parents(capsys, policies):
    policies([])
    _, out, _ = run(capsys, "--stack", "prod", "--json")
    resources = {r["name"]: r for r in json.loads(out)["resources"]}
    assert resources["gpu-us-east-1a-p5-ng"]["parent"] == resources["gpu-us-east-1a-p5"]["urn"]
    assert resources["gpu-us-east-1a-p5-ng"]["type"] == "aws:eks/nodeGroup:NodeGroup"


# -- secrets -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["text", "json"])
def test_no_secret_placeholder_in_any_output(capsys, stack, fmt):
    code, out, err = run(capsys, "--stack", stack, *fmt)
    assert code in (0, 1)      # the policy pack decides 0 or 1; either way nothing leaks
    assert PLACEHOLDER_PREFIX not in out
    assert PLACEHOLDER_PREFIX not in err
    assert "[secret]" in out


def test_a_secret_in_a_plain_input_is_hidden_and_fails_the_preview(capsys, monkeypatch, policies):
    policies([])
    urn = "urn:pulumi:prod::llm-serving::kubernetes:core/v1:ConfigMap::leaky"
    leak = Registration(urn=urn, type="kubernetes:core/v1:ConfigMap", name="leaky", id="leaky",
                        inputs={"data": {"token": f"{PLACEHOLDER_PREFIX}-hubToken"}}, outputs={}, parent="",
                        dependencies=[], property_dependencies={}, provider="", custom=True)
    prod = load_stack("prod")
    monkeypatch.setattr(engine, "run_program", lambda stack, raw: Recording(
        stack=stack, resources=[leak], settings=prod.settings, plan=prod.plan))
    code, out, _ = run(capsys, "--stack", "prod", "--json")
    doc = json.loads(out)
    assert code == 1
    assert PLACEHOLDER_PREFIX not in out
    assert doc["resources"][0]["inputs"] == {"data": {"token": "[secret]"}}
    assert [(v["policy"], v["level"], v["urn"]) for v in doc["violations"]] == [
        ("preview-no-plaintext-secrets", "mandatory", urn)]


# -- exit codes --------------------------------------------------------------------------------------------
def test_mandatory_violation_exits_1(capsys, policies):
    policies([{"policy": "n-plus-one-by-zone", "level": "mandatory",
               "urn": "urn:pulumi:prod::llm-serving::aws:eks/nodeGroup:NodeGroup::gpu-us-east-1a-p5-ng",
               "message": "losing us-east-1a leaves too little capacity"}])
    code, out, _ = run(capsys, "--stack", "prod")
    assert code == 1
    assert "Policies: 1 mandatory, 0 advisory violation(s)." in out.splitlines()
    assert "losing us-east-1a leaves too little capacity" in out


def test_advisory_violation_alone_exits_0(capsys, policies):
    policies([{"policy": "cost-idle-gpus", "level": "advisory", "urn": None, "message": "8 GPUs idle"}])
    code, out, _ = run(capsys, "--stack", "prod", "--json")
    assert code == 0
    assert json.loads(out)["violations"] == [
        {"policy": "cost-idle-gpus", "level": "advisory", "urn": None, "message": "8 GPUs idle"}]


def test_invalid_config_exits_2_with_the_settings_message(capsys, tmp_path):
    path = write_stack(tmp_path, "bad", gpuPools=[{"zone": "us-west-2a", "instanceType": "p5.48xlarge"},
                                                  {"zone": "us-east-1b", "instanceType": "p5.48xlarge"}])
    code, out, err = run(capsys, "--stack", "bad", "--config", path)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"error: --config {path}: llm-serving:gpuPools[0].zone: 'us-west-2a' is not a zone of the "
                                "region us-east-1; use a zone such as us-east-1a"]


def test_config_that_cannot_be_planned_exits_2(capsys, tmp_path):
    path = write_stack(tmp_path, "heavy", workload={"qps": 400, "inputTokens": 1000, "outputTokens": 300,
                                                    "maxModelLen": 8192})
    code, out, err = run(capsys, "--stack", "heavy", "--config", path)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"error: --config {path}: llm-serving:workload.qps: no TP degree works; ")


def test_missing_stack_file_exits_2(capsys):
    code, _, err = run(capsys, "--stack", "nope")
    assert code == 2
    assert err.splitlines() == [f"error: --stack nope: {stack_file('nope')}: no such stack file; create it or pass --config PATH"]


def test_config_file_replaces_the_stack_file(capsys, tmp_path, policies):
    policies([])
    path = write_stack(tmp_path, "copy", gpuPools=[{"zone": "us-east-1a", "instanceType": "p5.48xlarge"},
                                                   {"zone": "us-east-1c", "instanceType": "p5.48xlarge"}])
    code, out, _ = run(capsys, "--stack", "copy", "--config", path, "--json")
    zones = {r["inputs"]["availabilityZone"] for r in json.loads(out)["resources"]
             if r["type"] == "aws:ec2/subnet:Subnet"}
    assert code == 0 and zones == {"us-east-1a", "us-east-1c"}


def test_stack_is_required(capsys):
    assert main(["preview"]) == 2
    assert capsys.readouterr().err.startswith("error: Missing option '--stack'")
