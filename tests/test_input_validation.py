"""Issue 12's input rules, one named case each: the stack file as bytes, the keys that pass
silently otherwise, and the command-line options that name files or bound work. Exact messages."""
from __future__ import annotations

import pytest

from settings import SettingsError, read_stack_config, settings_from_config
from tests.inprocess_cli import run_cli
from tests.stacks import plan_for, stack_config, with_overrides

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


# -- issue 32: every key its real bounds --------------------------------------------------------------
ROLE = "arn:aws:iam::123456789012:role/"
OFFER = "cb-0123456789abcdef0"
R1, R2 = "cr-0123456789abcdef0", "cr-0fedcba9876543210"
RENAME = "rename the stack (`pulumi stack rename`, and its Pulumi.<stack>.yaml) to at most 88 letters, digits, '-' and '_'"


def bought(hours: int) -> dict:
    """Two pools, the second backed by a Capacity Block `pulumi up` buys for `hours`."""
    return {"gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b", "capacityBlock": {
        "purchase": True, "allowPurchase": True, "offeringId": OFFER, "durationHours": hours}}]}


def block_length(hours: int) -> str:
    return (f"{NS}:gpuPools[1].capacityBlock.durationHours: {hours} is not a Capacity Block length: EC2 offers 1 to 14 "
            "days in whole days (24 to 336 hours, multiples of 24) and 14 to 182 days in whole weeks (336 to 4,368 "
            "hours, multiples of 168); use ")


def without_acme_email() -> dict:
    return {k: v for k, v in stack_config("prod")[f"{NS}:gateway"].items() if k != "acmeEmail"}


ISSUE_32 = [
    # IAM role ARNs (settings.names.role_arn): ASCII account ids, CreateRole's name and path rules.
    pytest.param({"previewRoleArns": ["arn:aws:iam::\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660\u0661\u0662:role/ci"]},
                 f"{NS}:previewRoleArns[0]: 'arn:aws:iam::\\u0661\\u0662\\u0663\\u0664\\u0665\\u0666\\u0667\\u0668\\u0669"
                 "\\u0660\\u0661\\u0662:role/ci': the account id holds digits other than ASCII 0-9; an AWS account id is "
                 "12 ASCII digits (0-9), as `aws sts get-caller-identity` prints it", id="arabic-indic-account-digits"),
    pytest.param({"adminRoleArns": ["arn:aws:iam::\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff10\uff11\uff12:role/ci"]},
                 f"{NS}:adminRoleArns[0]: 'arn:aws:iam::\\uff11\\uff12\\uff13\\uff14\\uff15\\uff16\\uff17\\uff18\\uff19"
                 "\\uff10\\uff11\\uff12:role/ci': the account id holds digits other than ASCII 0-9; an AWS account id is "
                 "12 ASCII digits (0-9), as `aws sts get-caller-identity` prints it", id="fullwidth-account-digits"),
    pytest.param({"previewRoleArns": [ROLE + "r" * 65]},
                 f"{NS}:previewRoleArns[0]: '{ROLE}{'r' * 65}': the role name is 65 characters; IAM role names are at "
                 "most 64 (CreateRole RoleName)", id="role-name-of-65"),
    pytest.param({"previewRoleArns": [ROLE + "ci/"]},
                 f"{NS}:previewRoleArns[0]: '{ROLE}ci/' ends with '/'; a role ARN ends with the role's name "
                 "(arn:aws:iam::<account>:role/<name>, or role/<path>/<name>)", id="trailing-slash"),
    pytest.param({"previewRoleArns": [ROLE + "team//ci"]},
                 f"{NS}:previewRoleArns[0]: '{ROLE}team//ci': its path has an empty segment ('//'); write the role's "
                 "path as IAM shows it (`aws iam get-role --role-name <name> --query Role.Arn`)", id="empty-path-segment"),
    pytest.param({"adminRoleArns": [ROLE + "ci role"]},
                 f"{NS}:adminRoleArns[0]: '{ROLE}ci role': 'ci role' is not an IAM role name; IAM takes 1 to 64 ASCII "
                 "letters, digits and + = , . @ _ - (CreateRole RoleName)", id="space-in-role-name"),
    pytest.param({"adminRoleArns": ["arn:aws-iso:iam::123456789012:role/ci"]},
                 f"{NS}:adminRoleArns[0]: 'arn:aws-iso:iam::123456789012:role/ci' is not an IAM role ARN; use "
                 "arn:aws:iam::<12-digit account>:role/<name>", id="unknown-partition"),
    pytest.param({"previewRoleArns": [ROLE + "ci", ROLE + "ci"]},
                 f"{NS}:previewRoleArns: '{ROLE}ci' is listed twice; EKS takes an IAM principal in one access entry "
                 "only, so list it once", id="preview-role-twice"),
    pytest.param({"adminRoleArns": [ROLE + "Admin", ROLE + "ops/admin"]},
                 f"{NS}:adminRoleArns: '{ROLE}Admin' and '{ROLE}ops/admin' name one role (IAM role names are unique in "
                 "an account, whatever their path or case); EKS takes an IAM principal in one access entry only, so "
                 "list it once", id="one-role-by-path-and-case"),
    pytest.param({"adminRoleArns": [ROLE + "admin"], "previewRoleArns": [ROLE + "ci", ROLE + "admin"]},
                 f"{NS}:previewRoleArns[1]: '{ROLE}admin' is the admin role again (adminRoleArns[0]); EKS takes an IAM "
                 "principal in one access entry only, and cluster-admin already reads everything: drop it from "
                 "previewRoleArns", id="preview-role-is-an-admin-role"),
    pytest.param({"nodeAmiReleaseVersion": "1.35.\uff10-20251120"},
                 f"{NS}:nodeAmiReleaseVersion: String should match pattern '^[0-9]+\\.[0-9]+\\.[0-9]+-[0-9]{{8}}$'",
                 id="fullwidth-digit-in-an-ami-release"),
    # Capacity Blocks (settings/capacity.py): lengths EC2 offers; a reservation is in one zone.
    pytest.param(bought(25), block_length(25) + "24 or 48, the nearest", id="block-of-25-hours"),
    pytest.param(bought(0), block_length(0) + "24, the nearest", id="block-of-0-hours"),
    pytest.param(bought(400), block_length(400) + "336 or 504, the nearest", id="block-of-400-hours"),
    pytest.param(bought(4536), block_length(4536) + "4368, the nearest", id="block-over-182-days"),
    pytest.param({"gpuPools": [{"zone": "us-east-1a", "capacityReservationId": R1},
                               {"zone": "us-east-1b", "capacityReservationId": R1}]},
                 f"{NS}:gpuPools[1].capacityReservationId: {R1} is also gpuPools[0]'s reservation, in us-east-1a; a "
                 "capacity reservation is in exactly one Availability Zone, so gpuPools[1] (us-east-1b) needs one of "
                 "its own zone", id="one-reservation-in-two-zones"),
    pytest.param({"gpuPools": [{"zone": "us-east-1a", "capacityReservationId": R1},
                               {"zone": "us-east-1b", "capacityBlock": {"id": R1}}]},
                 f"{NS}:gpuPools[1].capacityBlock.id: {R1} is also gpuPools[0]'s reservation, in us-east-1a; a capacity "
                 "reservation is in exactly one Availability Zone, so gpuPools[1] (us-east-1b) needs one of its own "
                 "zone", id="one-block-in-two-zones"),
    pytest.param({"gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b", "capacityBlock": {
                     "id": R2, "offeringId": OFFER, "durationHours": 24}}]},
                 f"{NS}:gpuPools[1].capacityBlock: offeringId and durationHours only describe a purchase, and a block "
                 "you hold (id) is not bought: the program would ignore them; drop them", id="held-block-with-offering"),
    # The accuracy gate: a baseline it can fail against, a drop that is a gate.
    pytest.param({"accuracyGate": {"baseline": {"gsm8k": 0, "mmlu_pro": 0.69}}},
                 f"{NS}:accuracyGate.baseline.gsm8k: a baseline of 0 fails no score (the gate fails a score only when "
                 "it falls more than maxDrop below the baseline); give the task's BF16 score, greater than 0 and at "
                 "most 1", id="baseline-of-0"),
    pytest.param({"accuracyGate": {"maxDrop": 0.999}},
                 f"{NS}:accuracyGate.maxDrop: 0.999 would pass a score that fell by half the scale or more: a gate "
                 "that lets half the accuracy go is no gate; use less than 0.5, e.g. 0.01 (one point, the default)",
                 id="max-drop-of-0.999"),
    pytest.param({"accuracyGate": {"maxDrop": 0.5}},
                 f"{NS}:accuracyGate.maxDrop: 0.5 would pass a score that fell by half the scale or more: a gate that "
                 "lets half the accuracy go is no gate; use less than 0.5, e.g. 0.01 (one point, the default)",
                 id="max-drop-of-0.5"),
    pytest.param({"accuracyGate": {"tasks": ["gsm8k"], "baseline": {"gsm8k": 0.3}, "maxDrop": 0.3}},
                 f"{NS}:accuracyGate: maxDrop 0.3 is not below the gsm8k baseline 0.3, so a score of 0 would pass; use "
                 "a maxDrop below 0.3", id="max-drop-reaching-the-baseline"),
    # Settings a mode would ignore.
    pytest.param({"gateway": {**stack_config("prod")[f"{NS}:gateway"], "certificate": "provided"}},
                 f"{NS}:gateway: certificate: provided serves the tlsCertificate and tlsPrivateKey secrets and installs "
                 "no ACME issuer, so acmeEmail would be ignored; drop it, or set certificate: acme",
                 id="acme-email-with-a-provided-certificate"),
    pytest.param({"gateway": {**without_acme_email(), "certificate": "provided",
                              "acmeServer": "https://acme-staging-v02.api.letsencrypt.org/directory"}},
                 f"{NS}:gateway: certificate: provided serves the tlsCertificate and tlsPrivateKey secrets and installs "
                 "no ACME issuer, so acmeServer would be ignored; drop it, or set certificate: acme",
                 id="acme-server-with-a-provided-certificate"),
]


@pytest.mark.parametrize("overrides, message", ISSUE_32)
def test_each_new_bound_is_one_exact_problem(overrides, message):
    assert problems(overrides) == [message]


VALID_32 = [
    pytest.param({"previewRoleArns": [ROLE + "r" * 64]}, id="role-name-of-64"),
    pytest.param({"adminRoleArns": [ROLE + "platform/eks/admin", "arn:aws-cn:iam::123456789012:role/a+=,.@_-b"],
                  "previewRoleArns": ["arn:aws-us-gov:iam::123456789012:role/ci", ROLE + "ci"]},
                 id="paths-partitions-and-punctuation"),
    pytest.param({"adminRoleArns": [ROLE + "admin"], "previewRoleArns": ["arn:aws:iam::210987654321:role/admin"]},
                 id="one-name-in-two-accounts"),
    *[pytest.param(bought(h), id=f"block-of-{h}-hours") for h in (24, 48, 336, 168 * 2, 168 * 3, 4368)],
    pytest.param({"gpuPools": [{"zone": "us-east-1a", "capacityReservationId": R1},
                               {"zone": "us-east-1a", "name": "second", "capacityReservationId": R1},
                               {"zone": "us-east-1b"}]}, id="one-reservation-two-pools-one-zone"),
    pytest.param({"gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b", "capacityBlock": {"id": R2}}]},
                 id="a-held-block"),
    pytest.param({"accuracyGate": {"baseline": {"gsm8k": 1, "mmlu_pro": 0.69}, "maxDrop": 0.49}},
                 id="baseline-of-1-and-a-drop-below-half"),
    pytest.param({"gateway": {**without_acme_email(), "certificate": "provided"}}, id="a-provided-certificate"),
]


@pytest.mark.parametrize("overrides", VALID_32)
def test_values_inside_the_new_bounds_still_load(overrides):
    settings_from_config("prod", with_overrides(stack_config("prod"), overrides))


# The stack name: every AWS name the program makes from it (settings.names.stack_name_problems).
@pytest.mark.parametrize("stack, expected", [
    pytest.param("team.a", [
        f"stack name 'team.a': the EKS cluster name 'llm-serving-team.a' holds '.', which EKS refuses (CreateCluster "
        f"name: letters, digits, '-' and '_'); {RENAME}",
        f"stack name 'team.a': the KMS alias 'alias/llm-serving-team.a-eks-secrets' holds '.', which KMS refuses "
        f"(CreateAlias AliasName: letters, digits, '/', '_' and '-'); {RENAME}"], id="a-dot"),
    pytest.param("s" * 89, [
        f"stack name '{'s' * 40}...': the EKS cluster name 'llm-serving-{'s' * 28}...' is 101 characters, over "
        f"EKS's 100 (CreateCluster name); {RENAME}"], id="89-characters"),
])
def test_a_stack_name_that_makes_an_aws_name_aws_refuses(stack, expected):
    with pytest.raises(SettingsError) as err:
        settings_from_config(stack, stack_config("prod"))
    assert err.value.problems == expected


@pytest.mark.parametrize("stack", ["s" * 88, "team_a-1", "_x", "-x"])
def test_stack_names_whose_aws_names_hold(stack):
    from settings.names import STACK_DERIVED_NAMES

    settings_from_config(stack, stack_config("prod"))
    for derive, rule in STACK_DERIVED_NAMES:
        assert rule(derive(stack)) == derive(stack)


def test_the_cluster_takes_the_names_the_stack_name_was_checked_for(tmp_path):
    """components/cluster.py names the cluster, alias and log group through settings.names."""
    from offline.engine import run_program

    rec = run_program("s" * 88, stack_config("prod"))
    names = {r.type: r.inputs.get("name") for r in rec.resources
             if r.type in ("aws:eks/cluster:Cluster", "aws:kms/alias:Alias", "aws:cloudwatch/logGroup:LogGroup")}
    assert names == {"aws:eks/cluster:Cluster": "llm-serving-" + "s" * 88,
                     "aws:kms/alias:Alias": f"alias/llm-serving-{'s' * 88}-eks-secrets",
                     "aws:cloudwatch/logGroup:LogGroup": f"/aws/eks/llm-serving-{'s' * 88}/cluster"}


def test_a_long_stack_name_still_gets_a_grafana_uid_grafana_takes():
    from observability.dashboard import MAX_DASHBOARD_UID, dashboard_uid

    assert dashboard_uid("prod") == "llm-serving-prod"
    long_a, long_b = "s" * 88, "s" * 87 + "t"
    assert len(dashboard_uid(long_a)) == MAX_DASHBOARD_UID == 40
    assert dashboard_uid(long_a) != dashboard_uid(long_b)
    assert dashboard_uid("s" * 28) == "llm-serving-" + "s" * 28     # 40 exactly: as before


# Settings a layout would ignore (deployment.spec.layout_problems): refused by every command that
# builds the program or reads the stack's plan, on one line.
P5 = "p5.48xlarge"
LAYOUT = [
    pytest.param("prod-multinode", {"serving": {"burstScaling": True}},
                 f"{NS}:serving.burstScaling: the plan's replicas are groups of 2 nodes (one LeaderWorkerSet each); "
                 "burst scaling adds one-node replicas into a node's idle GPUs, which no group has, so the program "
                 "would install nothing for it; set burstScaling: false", id="burst-scaling-on-groups"),
    pytest.param("prod", {"serving": {"burstScaling": True}, "model": {"id": "llama-3-70b", "tensorParallel": 8}},
                 f"{NS}:serving.burstScaling: the plan's replicas leave no node with 8 idle GPUs (TP=8 on 8-GPU "
                 "nodes), so KEDA could add no replica and the program would scale nothing; set burstScaling: false",
                 id="burst-scaling-without-idle-gpus"),
    pytest.param("prod-multinode", {"gpuPools": [{"zone": "us-east-1a", "instanceType": P5, "nodes": 2, "efa": False},
                                                 {"zone": "us-east-1b", "instanceType": P5, "nodes": 2}]},
                 f"{NS}:gpuPools[0].efa: the plan's replicas span 2 nodes, whose pipeline stages talk over EFA, so EFA "
                 "is on regardless (docs/multi-node.md); drop efa: false", id="efa-off-on-groups"),
]


@pytest.mark.parametrize("stack, overrides, message", LAYOUT)
def test_a_setting_the_layout_ignores_is_refused(stack, overrides, message):
    from deployment.spec import layout_problems

    settings, plan = plan_for(stack, overrides)
    assert layout_problems(plan, settings) == [message]


@pytest.mark.parametrize("stack, overrides", [
    pytest.param("prod", {"serving": {"burstScaling": True}}, id="burst-scaling-into-idle-gpus"),
    pytest.param("prod-multinode", {}, id="efa-on-groups"),
    pytest.param("prod", {"gpuPools": [{"zone": "us-east-1a", "efa": False}, {"zone": "us-east-1b"}]},
                 id="efa-off-on-one-node-replicas"),
])
def test_settings_the_layout_uses_are_kept(stack, overrides):
    from deployment.spec import layout_problems

    settings, plan = plan_for(stack, overrides)
    assert layout_problems(plan, settings) == []


def test_the_program_and_the_commands_refuse_an_ignored_setting_in_one_line(tmp_path, monkeypatch):
    import pulumi
    import yaml

    from offline.engine import run_program

    stack, overrides, message = LAYOUT[0].values
    config = with_overrides(stack_config(stack), overrides)
    with pytest.raises(pulumi.RunError) as err:
        run_program(stack, config)
    assert str(err.value) == f"invalid stack config:\n{message}"
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    monkeypatch.setenv("LLM_SERVING_STACKS", str(tmp_path))
    for command in (["preview"], ["render", "--out", str(tmp_path / "out")], ["simulate", "--duration", "30"]):
        result = run_cli([command[0], "--stack", stack, *command[1:]], limit_s=120)
        assert (result.exit_code, result.stderr) == (2, f"error: --stack {stack}: {message}\n"), command
