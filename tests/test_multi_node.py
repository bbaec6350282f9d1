"""Replicas that span nodes: a model larger than one node (Llama 3.1 405B in BF16 on p5.48xlarge)
served as groups of whole nodes, N+1 by zone in groups, one LeaderWorkerSet per replica, EFA on."""
from __future__ import annotations

import pytest
import yaml

from conventions import EFA_RESOURCE, LWS_CHART_VERSION, VLLM_API_PORT, VLLM_EFA_IMAGE, VLLM_EFA_IMAGE_DIGEST, VLLM_IMAGE, VLLM_VERSION
from components.gpu_node_pool import EFA_MEMLOCK_BYTES
from offline.policy_run import evaluate, stack_resources
from policies.controllers import contract_violations
from sizing.catalog import load_catalog
from sizing.memory import Shape
from sizing.planner import PlanError, PlanRequest, Pool, plan
from sizing.step import pp_terms
from sizing.sweep import sweep
from tests.inprocess_cli import run_cli
from tests.k8s_schema import validate
from tests.stacks import plan_for, stack_config

STACK = "prod-multinode"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
RELEASE = "kubernetes:helm.sh/v3:Release"
P5 = "p5.48xlarge"


def pools(per_zone: int, zones=("us-east-1a", "us-east-1b")) -> list[dict]:
    return [{"zone": z, "instanceType": P5, "nodes": per_zone, "efa": True} for z in zones]


# -- the plan --------------------------------------------------------------------------------
def test_405b_bf16_spans_two_p5_nodes_per_replica_and_survives_a_zone_loss():
    _, p = plan_for(STACK)
    assert (p.tp, p.nodes_per_replica, p.replicas, p.replicas_by_zone) == (8, 2, 2, {"us-east-1a": 1, "us-east-1b": 1})
    assert p.engine_args.pipeline_parallel_size == 2
    assert (p.gpus_per_replica, p.engine_args.tensor_parallel_size) == (16, 8)    # each named for what it counts
    assert (p.redundancy, p.survives_failure, p.replicas_after_loss) == ("zone", True, 1)
    assert p.capacity_after_zone_loss_qps == pytest.approx(p.capacity_per_replica.qps)
    assert p.gpus_used == 32 and [n.group for n in p.nodes] == [0, 0, 0, 0]
    assert p.notes[0] == ("each replica spans 2 nodes of one pool (one zone), TP within a node and PP=2 across them "
                          "over EFA; losing any one of its nodes loses the whole replica (the worst loss, us-east-1b, "
                          "takes its whole groups)")


def test_one_p5_per_zone_is_refused_naming_the_rule():
    with pytest.raises(PlanError) as err:
        plan_for(STACK, {"gpuPools": pools(1)})
    first, rule = str(err.value).split(". As replicas of ")
    assert first.startswith("llama-3.1-405b does not fit one p5.48xlarge: 406 B parameters are 812 GB of bf16 weights "
                            "against 640 GB of GPU memory") and "; cheapest alternative: " in first
    assert rule == (
        "TP=8 x PP=2 (2 nodes): zone-holds-whole-groups: us-east-1a holds no "
        "whole 2-node replica (nodes per pool: us-east-1a-p5: 1); a replica spans 2 nodes of one pool, so give each "
        "zone's pool at least 2 nodes")


def test_preview_of_the_stack_with_one_p5_per_zone_exits_2_naming_the_rule(tmp_path):
    config = {"config": stack_config(STACK)}
    config["config"]["llm-serving:gpuPools"] = pools(1)
    path = tmp_path / "Pulumi.one-p5.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli(["preview", "--stack", STACK, "--config", str(path)], limit_s=120)
    assert result.exit_code == 2
    assert "zone-holds-whole-groups: us-east-1a holds no whole 2-node replica" in result.stdout + result.stderr


@pytest.mark.parametrize("per_zone, zones, replicas, redundancy, lost, left", [
    (2, ("us-east-1a", "us-east-1b"), 2, "zone", "us-east-1b", 1),
    (4, ("us-east-1a", "us-east-1b"), 2, "zone", "us-east-1b", 1),     # 1 QPS: one group per zone is enough
    (4, ("us-east-1a",), 2, "node", "us-east-1a-p5/node-0", 1),       # one zone: a node takes its group
])
def test_n_plus_one_counts_whole_groups(per_zone, zones, replicas, redundancy, lost, left):
    _, p = plan_for(STACK, {"gpuPools": pools(per_zone, zones)})
    assert (p.replicas, p.redundancy, p.lost_domain, p.replicas_after_loss) == (replicas, redundancy, lost, left)


def test_nodes_left_over_in_a_pool_hold_no_group_and_the_plan_says_so():
    _, p = plan_for(STACK, {"gpuPools": [{"zone": "us-east-1a", "instanceType": P5, "nodes": 3},
                                         {"zone": "us-east-1b", "instanceType": P5, "nodes": 2}]})
    assert [(n.node, n.group, n.gpus_used) for n in p.nodes if n.zone == "us-east-1a"] == [(0, 0, 8), (1, 0, 8),
                                                                                            (2, None, 0)]
    assert ("pool us-east-1a-p5: 1 of its 3 node(s) hold no whole 2-node group and stay idle (pools hold whole "
            "groups)") in p.notes


def test_a_model_that_fits_one_node_never_spans_nodes():
    _, p = plan_for("prod")
    assert p.nodes_per_replica == 1 and p.engine_args.pipeline_parallel_size == 1


def test_the_pipeline_hop_costs_the_activations_over_efa():
    cat = load_catalog()
    shape = Shape(cat.model("llama-3.1-405b"), cat.instance(P5), 8, "bf16", "bf16", nodes=2)
    # hidden_states + residual, BF16, 16,384 wide, over 3,200 Gbps: one hop per token.
    assert pp_terms(shape) == (0.0, pytest.approx(2 * 2 * 16384 / (3200e9 / 8)))
    assert pp_terms(Shape(cat.model("llama-3.1-405b"), cat.instance(P5), 8, "bf16", "bf16")) == (0.0, 0.0)


def test_the_sweep_shows_two_p5_per_replica_beside_one_p5en():
    w = plan_for(STACK)[1].request.workload
    options = [o for o in sweep(w, "llama-3.1-405b", "bf16", 2) if o.feasible and o.weights == "bf16"]
    shown = {(o.instance, o.tp, o.nodes_per_replica) for o in options}
    assert {(P5, 8, 2), ("p5en.48xlarge", 8, 1)} <= shown
    two_p5 = next(o for o in options if (o.instance, o.nodes_per_replica) == (P5, 2))
    assert (two_p5.replicas, two_p5.nodes, two_p5.gpus) == (2, 4, 32)


# -- the rendered objects ------------------------------------------------------------------------
def test_one_leader_worker_set_per_replica_with_group_size_two_after_its_controller(recorded):
    rec = recorded(STACK)
    sets = rec.of_type(LWS)
    assert sorted(s.inputs["metadata"]["name"] for s in sets) == ["vllm-us-east-1a-p5-0", "vllm-us-east-1b-p5-0"]
    controller = next(r for r in rec.of_type(RELEASE) if r.inputs["chart"] == "oci://registry.k8s.io/lws/charts/lws")
    assert controller.inputs["version"] == LWS_CHART_VERSION
    for s in sets:
        spec = s.inputs["spec"]
        assert (spec["replicas"], spec["leaderWorkerTemplate"]["size"]) == (1, 2)
        assert controller.urn in s.dependencies
        assert s.inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Available"
    assert contract_violations(stack_resources(rec)) == []


def test_leader_and_worker_run_vllms_multi_node_launch(recorded):
    lws = next(s for s in recorded(STACK).of_type(LWS) if "us-east-1a" in s.name)
    template = lws.inputs["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][-10:] == ["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "0",
                                    "--master-addr", "$(LWS_LEADER_ADDRESS)", "--distributed-executor-backend", "mp"]
    assert worker["args"][-11:] == ["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank",
                                    "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)",
                                    "--distributed-executor-backend", "mp", "--headless"]
    assert leader["args"][:leader["args"].index("--pipeline-parallel-size")] == \
        worker["args"][:worker["args"].index("--pipeline-parallel-size")]    # one engine, the same arguments
    assert str(VLLM_API_PORT) in worker["readinessProbe"]["exec"]["command"][-1]
    assert "livenessProbe" not in worker and "livenessProbe" in leader    # a worker never restarts its group
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        assert pod["spec"]["nodeSelector"] == {"llm-serving.io/role": "gpu", "topology.kubernetes.io/zone": "us-east-1a",
                                               "llm-serving.io/pool": "us-east-1a-p5"}
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == "8" and resources["limits"][EFA_RESOURCE] == "32"
    assert template["workerTemplate"]["metadata"]["labels"]["llm-serving.io/role"] == "serving-worker"


def test_leader_worker_sets_validate_strictly_against_the_pinned_crd(recorded):
    for s in recorded(STACK).of_type(LWS):
        validate({"apiVersion": s.inputs["apiVersion"], "kind": s.inputs["kind"], "metadata": s.inputs["metadata"],
                  "spec": s.inputs["spec"]}, "1.35")


def test_efa_is_on_for_the_group_node_groups(recorded):
    rec = recorded(STACK)
    templates = [r for r in rec.of_type("aws:ec2/launchTemplate:LaunchTemplate") if r.name.startswith("gpu-")]
    assert len(templates) == 2
    sg = next(r for r in rec.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name == "efa-sg")
    for lt in templates:
        interfaces = lt.inputs["networkInterfaces"]
        assert len(interfaces) == 32 and {i["interfaceType"] for i in interfaces} == {"efa"}
        assert all(len(i["securityGroups"]) == 2 for i in interfaces)
    rules = [r for r in rec.resources if r.type in ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                                                    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")]
    assert {(r.inputs["ipProtocol"], r.inputs["referencedSecurityGroupId"]) for r in rules} == {("-1", sg.id)}
    assert len(rules) == 2
    plugin = next(r for r in rec.of_type(RELEASE) if r.inputs["chart"] == "aws-efa-k8s-device-plugin")
    assert plugin.inputs["version"] == "v0.5.30"


def test_the_group_pdb_lets_one_pod_go_and_so_one_group(recorded):
    pdb = next(r for r in recorded(STACK).of_type("kubernetes:policy/v1:PodDisruptionBudget") if r.name == "serving-pdb")
    assert pdb.inputs["spec"]["maxUnavailable"] == 1
    assert pdb.inputs["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "vllm"}}


def test_the_multi_node_stack_previews_with_no_violation(recorded):
    assert evaluate(recorded(STACK), STACK) == []


def test_preview_exits_0():
    result = run_cli(["preview", "--stack", STACK], limit_s=120)
    assert result.exit_code == 0, result.stdout + result.stderr


def test_an_explicit_request_for_more_nodes_is_honoured():
    _, p = plan_for(STACK)
    req = PlanRequest(workload=p.request.workload, model="llama-3.1-405b", weights="bf16",
                      pools=(Pool("us-east-1a", P5, 3), Pool("us-east-1b", P5, 3)), nodes_per_replica=3)
    assert plan(req).nodes_per_replica == 3


# -- simulate and twin: a node takes its whole group ------------------------------------------
@pytest.fixture(scope="module")
def node_loss_timeline():
    from simulator import config_from_plan, parse_fail_node
    from twin import timeline

    _, p = plan_for(STACK)
    cfg = config_from_plan(p, 600, failure=parse_fail_node("us-east-1a-p5/node-1@200:400", 600, p))
    return timeline.build(cfg)


def test_a_multi_node_replica_is_one_simulated_replica_holding_its_nodes():
    from simulator import replica_specs

    _, p = plan_for(STACK)
    assert [(s.name, s.zone, s.nodes) for s in replica_specs(p)] == [
        ("us-east-1a-p5/group-0", "us-east-1a", ("us-east-1a-p5/node-0", "us-east-1a-p5/node-1")),
        ("us-east-1b-p5/group-0", "us-east-1b", ("us-east-1b-p5/node-0", "us-east-1b-p5/node-1"))]


@pytest.mark.parametrize("fail_flag, text, lost", [
    ("--fail-node", "us-east-1a-p5/node-1@100", ["us-east-1a-p5/group-0"]),
    ("--fail-node", "us-east-1b-p5/node-0@100", ["us-east-1b-p5/group-0"]),
    ("--fail-zone", "us-east-1a@100", ["us-east-1a-p5/group-0"]),
])
def test_simulate_loses_the_whole_group_on_a_node_or_zone_failure(fail_flag, text, lost):
    import json

    result = run_cli(["simulate", "--stack", STACK, "--duration", "300", fail_flag, text, "--json"], limit_s=120)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["failure"]["replicas_lost"] == lost


@pytest.mark.parametrize("text, message", [
    ("us-east-1a-p5/node-7@100", "error: --fail-node: 'us-east-1a-p5/node-7@100': no node us-east-1a-p5/node-7 in "
                                 "the plan (nodes: us-east-1a-p5/node-0, us-east-1a-p5/node-1, us-east-1b-p5/node-0, "
                                 "us-east-1b-p5/node-1)"),
    ("node-1@100", "error: --fail-node: 'node-1@100': expected POOL/node-I@T or POOL/node-I@T:T2 in seconds, "
                   "e.g. us-east-1a-p5/node-1@600"),
    ("us-east-1a-p5/node-1@100:50", "error: --fail-node: 'us-east-1a-p5/node-1@100:50': the node comes back at 50 s, "
                                    "not after it fails at 100 s"),
    ("us-east-1a-p5/node-1@\u0661\u0660", "error: --fail-node: 'us-east-1a-p5/node-1@\u0661\u0660': expected "
                                          "POOL/node-I@T or POOL/node-I@T:T2 in seconds, e.g. us-east-1a-p5/node-1@600"),
])
def test_a_bad_fail_node_is_one_line_and_exit_2(text, message):
    result = run_cli(["simulate", "--stack", STACK, "--duration", "300", "--fail-node", text], limit_s=60)
    assert result.exit_code == 2
    assert (result.stdout + result.stderr).strip() == message


def test_the_twin_takes_the_whole_group_down_with_one_node(node_loss_timeline):
    rep = next(r for r in node_loss_timeline.replicas if r.zone == "us-east-1a")
    down = [k for k, up in enumerate(rep.up) if not up]
    assert (down[0], down[-1], rep.workers) == (200, 399, 1)
    other = next(r for r in node_loss_timeline.replicas if r.zone == "us-east-1b")
    assert all(other.up)


def test_the_twins_kube_state_shows_the_group_pods_ready_together(node_loss_timeline):
    from twin.exporters import Clock, Exporters

    exporters = Exporters(node_loss_timeline, Clock(60.0), "llm-serving", "llama-3.1-405b")
    exporters._k = lambda: 300          # inside the outage
    _, text = exporters._kube_state("/metrics")
    ready = {line.split('pod="')[1].split('"')[0]: line.endswith(" 1") for line in text.splitlines()
             if line.startswith("kube_pod_status_ready") and 'condition="true"' in line}
    assert ready == {"vllm-us-east-1a-twin-0": False, "vllm-us-east-1a-twin-0-1": False,
                     "vllm-us-east-1b-twin-0": True, "vllm-us-east-1b-twin-0-1": True}
    assert text.count('label_llm_serving_io_role="serving-worker"') == 2


def test_the_twin_expects_the_zone_alerts_when_a_node_takes_its_zones_only_group():
    from observability.rules import AlertPolicy
    from simulator import parse_fail_node
    from twin.scenario import expectations

    _, p = plan_for(STACK)
    failure = parse_fail_node("us-east-1a-p5/node-1@300", 1500, p)
    required, _ = expectations(p, 1.0, 1500, failure, AlertPolicy(), "llm-serving")
    assert {(e.name, e.zone) for e in required} == {("LLMServingZoneWithoutReadyReplica", "us-east-1a"),
                                                     ("LLMServingRedundancyLost", None),
                                                     ("LLMServingReplicasBelowPlan", None)}


def test_group_pods_are_as_locked_down_as_a_single_node_replicas(recorded):
    deployment = next(r for r in recorded("prod").of_type("kubernetes:apps/v1:Deployment") if r.name.endswith("us-east-1a"))
    single = deployment.inputs["spec"]["template"]["spec"]
    for lws in recorded(STACK).of_type(LWS):
        for key in ("leaderTemplate", "workerTemplate"):
            spec = lws.inputs["spec"]["leaderWorkerTemplate"][key]["spec"]
            assert spec["securityContext"] == single["securityContext"]
            assert spec["automountServiceAccountToken"] is False
            assert spec["containers"][0]["securityContext"] == single["containers"][0]["securityContext"]


def test_a_literal_token_in_a_group_pod_is_caught(build_program):
    recording = build_program(STACK)
    lws = next(r for r in recording.resources if r.type == LWS)
    worker = lws.inputs["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    worker["env"] = [*worker["env"], {"name": "HF_TOKEN", "value": "hf_plaintext"}]
    lws.outputs = lws.inputs
    assert any(v["policy"] == "secrets-only-as-secrets" and "HF_TOKEN" in v["message"]
               for v in evaluate(recording, STACK))


def test_every_rendered_object_of_the_multi_node_stack_validates(tmp_path):
    from tests.k8s_schema import CrdMissing

    result = run_cli(["render", "--stack", STACK, "--out", str(tmp_path)], limit_s=120)
    assert result.exit_code == 0, result.stderr
    kinds, unchecked = set(), set()
    for path in sorted((tmp_path / "manifests").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        try:
            validate(obj, "1.35")
            kinds.add(obj["kind"])
        except CrdMissing:
            unchecked.add(obj["kind"])
    assert "LeaderWorkerSet" in kinds and unchecked <= {"Certificate", "ClusterIssuer"}   # cert-manager's: optional
    helm = {p.name for p in (tmp_path / "helm").iterdir()}
    assert {"lws-system_lws.yaml", "kube-system_aws-efa-k8s-device-plugin.yaml"} <= helm


# -- the done-when: DeepSeek-R1 in FP8 on two p5.48xlarge per zone ---------------------
DEEPSEEK = "prod-deepseek-r1"


def test_deepseek_r1_fp8_spans_two_p5_per_replica_and_survives_a_zone_loss():
    _, p = plan_for(DEEPSEEK)
    assert (p.layout, p.tp, p.nodes_per_replica, p.replicas_by_zone) == ("tp", 8, 2, {"us-east-1a": 1, "us-east-1b": 1})
    assert (p.redundancy, p.survives_failure, p.replicas_after_loss) == ("zone", True, 1)
    assert p.capacity_after_zone_loss_qps >= p.request.workload.qps
    assert p.engine_args.pipeline_parallel_size == 2 and p.checkpoint == "deepseek-ai/DeepSeek-R1"


def test_deepseek_r1_with_one_p5_per_zone_is_refused_naming_the_rule():
    with pytest.raises(PlanError) as err:
        plan_for(DEEPSEEK, {"gpuPools": pools(1)})
    assert "zone-holds-whole-groups: us-east-1a holds no whole 2-node replica" in str(err.value)


def test_deepseek_r1_renders_lws_groups_of_two_after_their_controller_with_efa_and_no_violation(recorded):
    rec = recorded(DEEPSEEK)
    sets = rec.of_type(LWS)
    assert [s.inputs["spec"]["leaderWorkerTemplate"]["size"] for s in sets] == [2, 2]
    controller = next(r for r in rec.of_type(RELEASE) if r.inputs["chart"] == "oci://registry.k8s.io/lws/charts/lws")
    assert all(controller.urn in s.dependencies for s in sets)
    for s in sets:
        validate({k: s.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}, "1.35")
    templates = [r for r in rec.of_type("aws:ec2/launchTemplate:LaunchTemplate") if r.name.startswith("gpu-")]
    assert all({i["interfaceType"] for i in lt.inputs["networkInterfaces"]} == {"efa"} for lt in templates)
    assert evaluate(rec, DEEPSEEK) == []


def test_deepseek_r1_simulate_loses_the_whole_group_with_one_node():
    import json

    result = run_cli(["simulate", "--stack", DEEPSEEK, "--duration", "120", "--fail-node", "us-east-1b-p5/node-0@60",
                      "--json"], limit_s=180)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["failure"]["replicas_lost"] == ["us-east-1b-p5/group-0"]


def test_a_groups_pods_reach_their_own_group_only(recorded):
    """One policy per group, selecting the set's pods by the LWS controller's set-name label: a pod of
    one group neither admits nor reaches another group's (nor any other pod) on the group policy."""
    rec = recorded(STACK)
    policies = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    sets = [r.inputs["metadata"]["name"] for r in rec.of_type("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")]
    assert sets and "vllm-group-traffic" not in policies
    for name in sets:
        spec = policies[f"{name}-group-traffic"]
        members = {"podSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": name}}}
        assert spec["podSelector"] == members["podSelector"]
        ports = [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 29501},
                 {"protocol": "TCP", "port": 32768, "endPort": 60999}]
        assert spec["ingress"] == [{"from": [members], "ports": ports}]
        assert spec["egress"] == [{"to": [members], "ports": ports}]


@pytest.mark.parametrize("port, admitted", [(8000, True), (29501, True), (32768, True), (45000, True),
                                            (60999, True), (9400, False), (22, False), (61000, False)])
def test_a_group_admits_its_members_on_the_ports_vllm_and_nccl_use(recorded, port, admitted):
    """The API port (the workers' probe), vLLM's master port and the ephemeral range NCCL and vLLM's
    message queue listen in; nothing else between group members on the group policy."""
    rec = recorded(STACK)
    (spec, *_) = [r.inputs["spec"] for r in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                  if r.inputs["metadata"]["name"].endswith("-group-traffic")]
    (rule,) = spec["ingress"]
    assert any(p["port"] <= port <= p.get("endPort", p["port"]) for p in rule["ports"]) is admitted


def test_group_engines_set_the_efa_environment_and_log_nccls_transport(recorded):
    """FI_PROVIDER=efa and device RDMA for NCCL over EFA, and NCCL's INFO log, whose NET/OFI or
    NET/Socket line tells which transport the group got (docs/multi-node.md)."""
    (group, *_) = recorded(STACK).of_type("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet")
    template = group.inputs["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        env = {e["name"]: e.get("value") for e in template[role]["spec"]["containers"][0]["env"]}
        assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"], env["NCCL_DEBUG"]) == ("efa", "1", "INFO"), role


# -- the image that carries EFA's userspace (conventions.VLLM_EFA_IMAGE, docs/multi-node.md) ------
def test_the_efa_image_is_awss_vllm_dlc_at_the_pinned_vllm_version_by_its_full_tag():
    """aws/deep-learning-containers docs/src/data/vllm/0.29.0-gpu-ec2.yml's first tag, on the public
    registry; no digest, since no cited source publishes one (preflight warns while it is unset)."""
    assert VLLM_EFA_IMAGE == f"public.ecr.aws/deep-learning-containers/vllm:{VLLM_VERSION}-gpu-py312-cu130-ubuntu24.04-ec2"
    assert VLLM_EFA_IMAGE_DIGEST is None and "@" not in VLLM_EFA_IMAGE


def test_every_group_pod_runs_the_efa_image_with_telemetry_off(recorded):
    for lws in recorded(STACK).of_type(LWS):
        template = lws.inputs["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            engine = template[role]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in engine["env"]}
            assert (engine["image"], env["OPT_OUT_TRACKING"]) == (VLLM_EFA_IMAGE, "true"), (lws.name, role)


def test_single_node_replicas_keep_the_stock_image(recorded):
    engines = [d.inputs["spec"]["template"]["spec"]["containers"][0]
               for d in recorded("prod").of_type("kubernetes:apps/v1:Deployment")]
    replicas = [e for e in engines if e["name"] == "vllm"]
    assert replicas
    for engine in replicas:
        assert (engine["image"], "OPT_OUT_TRACKING" in {e["name"] for e in engine["env"]}) == (VLLM_IMAGE, False)


# -- locked memory for EFA without IPC_LOCK (components/gpu_node_pool.py EFA_CONTAINERD_LIMITS) -----
def node_configs(rec) -> list[dict]:
    """The NodeConfig part of each GPU launch template's user data."""
    import base64
    import email
    out = []
    for lt in (r for r in rec.of_type("aws:ec2/launchTemplate:LaunchTemplate") if r.name.startswith("gpu-")):
        message = email.message_from_string(base64.b64decode(lt.inputs["userData"]).decode())
        (part,) = [p for p in message.walk() if p.get_content_type() == "application/node.eks.aws"]
        out.append(yaml.safe_load(part.get_payload()))
    return out


def test_efa_nodes_raise_the_containers_memlock_and_keep_the_amis_nofile(recorded):
    configs = node_configs(recorded(STACK))
    assert len(configs) == 2
    for config in configs:
        assert config["spec"]["containerd"]["baseRuntimeSpec"]["process"]["rlimits"] == [
            {"type": "RLIMIT_NOFILE", "soft": 65536, "hard": 1048576},
            {"type": "RLIMIT_MEMLOCK", "soft": 2 ** 62, "hard": 2 ** 62}]


def test_nodes_without_efa_keep_the_amis_container_limits(recorded):
    configs = node_configs(recorded("prod"))
    assert configs and all("containerd" not in c["spec"] for c in configs)


def test_the_memlock_limit_survives_nodeadms_float64_merge_exactly():
    """nodeadm merges the NodeConfig through encoding/json into float64 (nodeadm/internal/util/merge.go)."""
    assert int(float(EFA_MEMLOCK_BYTES)) == EFA_MEMLOCK_BYTES < 2 ** 64 - 1
