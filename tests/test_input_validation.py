"""Issue 12's input rules, one named case each: the stack file as bytes, the keys that pass
silently otherwise, and the command-line options that name files or bound work. Exact messages."""
from __future__ import annotations

import pytest

from settings import SettingsError, read_stack_config, settings_from_config
from tests.inprocess_cli import run_cli
from tests.stacks import stack_config, with_overrides

NS = "llm-serving"


def problems(overrides: dict) -> list[str]:
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", with_overrides(stack_config("prod"), overrides))
    return err.value.problems


# -- the stack file as bytes ----------------------------------------------------------------------
@pytest.mark.parametrize("data, message", [
    pytest.param(b"- a\n- b\n", "needs a top-level 'config:' map of llm-serving: keys", id="a YAML list"),
    pytest.param(b"42\n", "needs a top-level 'config:' map of llm-serving: keys", id="a YAML scalar"),
    pytest.param(b"config:\n  llm-serving:tags: {team: caf\xe9}\n", "not UTF-8 text (byte 0xe9 at offset 38); "
                 "save it as UTF-8", id="Latin-1"),
    pytest.param("config:\n  aws:region: x\n".encode("utf-16"), "not UTF-8 text (byte 0xff at offset 0); save it "
                 "as UTF-8", id="UTF-16"),
    pytest.param(b"config:\n  1: 2\n", "config key 1 is not a name; keys look like llm-serving:workload",
                 id="an integer key"),
    pytest.param(b"config:\n  aws:region: us-east-1\n  aws:region: eu-west-1\n",
                 "not valid YAML at line 3: key 'aws:region' appears twice; keep one", id="a duplicate key"),
    pytest.param(b"config:\n  llm-serving:gateway: {hostname: a, hostname: b}\n",
                 "not valid YAML at line 2: key 'hostname' appears twice; keep one", id="a duplicate nested key"),
])
def test_a_malformed_stack_file_is_one_problem_naming_the_file(tmp_path, data, message):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(data)
    with pytest.raises(SettingsError) as err:
        read_stack_config(path)
    assert err.value.problems == [f"{path}: {message}"]


def test_a_folder_is_not_a_stack_file(tmp_path):
    with pytest.raises(SettingsError) as err:
        read_stack_config(tmp_path)
    assert err.value.problems == [f"{tmp_path}: is a folder; --config takes a stack file (Pulumi.<stack>.yaml)"]


# -- keys that used to pass silently --------------------------------------------------------------------
INVALID = [
    ({"workload": {"qps": float("inf")}}, f"{NS}:workload.qps: inf is not a finite number; give a finite value"),
    ({"workload": {"qps": 10, "tpotSeconds": float("nan")}},
     f"{NS}:workload.tpotSeconds: nan is not a finite number; give a finite value"),
    ({"llm-servng:gateway": {"hostname": "x.example.com"}},
     "llm-servng:gateway: unknown namespace 'llm-servng'; did you mean llm-serving:gateway?"),
    ({"model": {"id": "llama-3-70b", "checkpoint": "../../etc/passwd --trust-remote-code"}},
     f"{NS}:model.checkpoint: '../../etc/passwd --trust-remote-code' is not a checkpoint; use a model hub id "
     "(org/name) or a path under /models/ on the node's model cache, without '..' or spaces"),
    ({"gatewayAllowedCidrs": []}, f"{NS}:gatewayAllowedCidrs: empty would open the load balancer to everyone; list "
                                  "the client CIDRs, or [\"0.0.0.0/0\"] to open it on purpose"),
    ({"serving": {"namespace": "kube-system"}}, f"{NS}:serving.namespace: 'kube-system' belongs to the cluster or "
                                                "another component; use a namespace of its own, e.g. llm-serving"),
    ({"serving": {"namespace": "LLM"}}, f"{NS}:serving.namespace: 'LLM' is not a valid name (DNS-1123 label: "
                                        "lowercase letters, digits and '-', starting and ending with a letter or "
                                        "digit, at most 63 characters)"),
    ({"gateway": {"hostname": "https://llm.example.com/v1"}},
     f"{NS}:gateway.hostname: 'https://llm.example.com/v1' is not a bare hostname; drop the scheme, port and path "
     "(e.g. llm.example.com)"),
    ({"gateway": {"hostname": ""}},
     f"{NS}:gateway.hostname: '' is not a valid hostname; use lowercase DNS labels such as llm.example.com"),
    ({"gateway": {"apiKeyNames": []}}, f"{NS}:gateway.apiKeyNames: name at least one API key; every route needs one"),
    ({"gateway": {"apiKeyNames": ["a", "a"]}},
     f"{NS}:gateway.apiKeyNames: a named more than once; give each key its own name"),
    ({"gateway": {"apiKeyNames": ["team a"]}},
     f"{NS}:gateway.apiKeyNames[0]: 'team a' is not a valid Secret key; use letters, digits, '-', '_' and '.'"),
    ({"gateway": {"apiKeyNames": ["accuracy-gate"]}},
     f"{NS}:gateway.apiKeyNames: accuracy-gate is the accuracy gate's own key; name the tenant's key otherwise"),
    ({"gateway": {"tlsSecretName": None}}, f"{NS}:gateway.tlsSecretName: Input should be a valid string"),
    ({"accuracyGate": {"tasks": []}}, f"{NS}:accuracyGate.tasks: an empty task list would pass without checking "
                                      "anything; list at least one task, or set accuracyGate.enabled: false"),
    ({"accuracyGate": {"tasks": ["hellaswag"]}},
     f"{NS}:accuracyGate.tasks: no known metric for hellaswag; supported: gsm8k, gsm8k_cot, mmlu_pro"),
    ({"accuracyGate": {"baseline": {"gsm8k": 93, "mmlu_pro": 0.69}}},
     f"{NS}:accuracyGate.baseline.gsm8k: must be at most 1 (got 93)"),
    ({"tags": {"aws:cost": "x"}}, f"{NS}:tags: tag 'aws:cost': the aws: prefix is reserved for AWS; rename it"),
    ({"adminRoleArns": ["admin"]},
     f"{NS}:adminRoleArns[0]: 'admin' is not an IAM role ARN; use arn:aws:iam::<12-digit account>:role/<name>"),
    ({"systemNodes": {"instanceType": "m7g.large"}},
     f"{NS}:systemNodes.instanceType: 'm7g.large' is not a supported system node type; use an x86 general-purpose "
     "type such as m7i.2xlarge (families m5, m5a, m6i, m6a, m7i, m7a, c5, c6i, c6a, c7i, c7a, r5, r6i, r7i)"),
    ({"network": {"vpcCidr": "8.8.0.0/16"}}, f"{NS}:network.vpcCidr: 8.8.0.0/16 is not in a private range; use "
                                             "part of 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"),
    ({"gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1h"}]},
     f"{NS}:gpuPools[1].zone: the subnet layout covers zones us-east-1a to us-east-1g; use one of those"),
    ({"workload": {"concurrency": 10}, "loadTest": {"enabled": True}},
     f"{NS}:loadTest.enabled: the workload is closed-loop (concurrency); the rate sweep needs workload.qps, or "
     "set loadTest.enabled: false"),
    ({"gatewayAllowedCidrs": ["::/0"]},
     f"{NS}:gatewayAllowedCidrs: ::/0: use IPv4 CIDRs (the cluster and its load balancer are IPv4)"),
    ({"replica": 2}, f"{NS}:replica: unknown key; did you mean replicas?"),
    ({"gateway": {**stack_config("prod")[f"{NS}:gateway"], "rateLimitShare": 1.0}},
     f"{NS}:gateway.rateLimitShare: 1 leaves the accuracy gate's own key less than 5% of the capacity; use at most "
     "0.95, or set accuracyGate.enabled: false"),
]


@pytest.mark.parametrize("overrides, message", INVALID, ids=[m.split(":")[1].split(" ")[0] + f"-{i}"
                                                               for i, (_, m) in enumerate(INVALID)])
def test_each_rule_is_one_problem_naming_its_key(overrides, message):
    found = problems(overrides)
    assert message in found


def test_a_key_without_a_namespace_is_named_with_the_fix():
    config = {**stack_config("prod"), "qps": 10}
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", config)
    assert err.value.problems == ["qps: a config key needs its namespace; did you mean llm-serving:qps?"]


# -- options that name files or bound work ----------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["size", "--plot", "/nonexistent/x.png"], "error: --plot: folder /nonexistent does not exist; create it or "
                                               "write elsewhere"),
    (["size", "--nodes-per-zone", "100000"], "error: --nodes-per-zone: must be at most 64 (got 100000)"),
    (["size", "--stack", "prod", "--zones", "eu-west-1a,us-east-1b"],
     "error: --zones: 'eu-west-1a' is not a zone of the region us-east-1; use a zone such as us-east-1a"),
    (["size", "--zones", "us-east-1a,eu-west-1b"],
     "error: --zones: 'eu-west-1b' is not a zone of the region us-east-1; use a zone such as us-east-1a"),
    (["size", "--zones", "foo"], "error: --zones: 'foo' is not a zone of the region us-east-1; use a zone such as "
                                 "us-east-1a"),
    (["simulate", "--plot", "/nonexistent/x.png"], "error: --plot: folder /nonexistent does not exist; create it "
                                                   "or write elsewhere"),
])
def test_options_are_checked_before_any_work(argv, message):
    result = run_cli(argv)
    assert (result.exit_code, result.stderr) == (2, message + "\n")


def test_render_out_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("x")
    result = run_cli(["render", "--stack", "prod", "--out", str(target)])
    assert (result.exit_code, result.stderr) == (2, f"error: --out: {target} is a file; give a folder (it is "
                                                    "created when missing)\n")


def test_plot_into_a_folder_is_refused(tmp_path):
    result = run_cli(["size", "--plot", str(tmp_path)])
    assert (result.exit_code, result.stderr) == (2, f"error: --plot: {tmp_path} is a folder; give a file name such "
                                                    f"as {tmp_path / 'plot.png'}\n")


@pytest.mark.parametrize("overrides, problem", [
    ({"gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1z"}]},
     f"{NS}:gpuPools[1].zone: the subnet layout covers zones us-east-1a to us-east-1g; use one of those"),
    ({"gateway": {**stack_config("prod")[f"{NS}:gateway"], "apiKeyNames": []}},
     f"{NS}:gateway.apiKeyNames: name at least one API key; every route needs one"),
    ({"gateway": {**stack_config("prod")[f"{NS}:gateway"], "tlsSecretName": None}},
     f"{NS}:gateway.tlsSecretName: Input should be a valid string"),
    ({"accuracyGate": {"tasks": ["hellaswag"]}},
     f"{NS}:accuracyGate.tasks: no known metric for hellaswag; supported: gsm8k, gsm8k_cot, mmlu_pro"),
])
def test_render_refuses_what_preview_refuses_in_the_same_line(tmp_path, overrides, problem):
    import yaml

    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": with_overrides(stack_config("prod"), overrides)}))
    lines = set()
    for extra in (["render", "--out", str(tmp_path / "out")], ["preview"]):
        result = run_cli([extra[0], "--stack", "prod", "--config", str(path), *extra[1:]])
        assert result.exit_code == 2
        lines.add(result.stderr)
    assert lines == {f"error: --config {path}: {problem}\n"}
