"""Autoscaling, deployment side: the plan's policy as KEDA ScaledObjects per zone, the GPU node groups'
bounds, the cluster autoscaler, and the refusals. The policy is built here on the contract
(sizing.roles.AutoscalePolicy), attached to the plan the program makes."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

import sizing.planner
from deployment.autoscaling import autoscaling_problems, node_bounds
from sizing.roles import AutoscalePolicy, ColdStart, ColdStartTerm
from tests.k8s_schema import validate
from tests.stacks import plan_for

SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
QUERY = 'sum(rate(vllm:request_success_total{namespace="llm-serving"}[2m]))'
PEAK_40_QPS = {
    "workload": {"qps": 40, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": 8192, "ttftSeconds": 1.0,
                 "tpotSeconds": 0.040, "sloStatistic": "mean"},
    "model": {"id": "llama-3-70b", "weights": "fp8", "kvCacheDtype": "bf16", "tensorParallel": 4},
    "gpuPools": [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 2},
                 {"zone": "us-east-1b", "instanceType": "p5.48xlarge", "nodes": 2}],
    "serving": {"autoscaling": {"enabled": True}},
}
COLD_START = ColdStart((ColdStartTerm("node_provision", 300.0, "test"), ColdStartTerm("image_pull", 120.0, "test"),
                        ColdStartTerm("model_load", 90.0, "test"), ColdStartTerm("engine_start", 60.0, "test")))


def policy_for(p, floor: dict | None = None, floor_qps: float | None = 10.0) -> AutoscalePolicy:
    """A policy as sizing.autoscale fills it: floor N+1 by zone at the trough, ceiling the peak's plan."""
    return AutoscalePolicy(
        metric="requests per second the fleet is asked to carry", query=QUERY,
        target_per_replica=p.capacity_per_replica.qps,
        floor_by_zone=floor or {z: 1 for z in p.replicas_by_zone}, ceiling_by_zone=dict(p.replicas_by_zone),
        lead_s=COLD_START.replica_on_new_node_s, scale_down_stabilization_s=900.0, cold_start=COLD_START,
        floor_qps=floor_qps)


@pytest.fixture
def with_policy(monkeypatch):
    """with_policy(floor=None, floor_qps=10): every plan made from now on carries that policy."""
    def use(floor: dict | None = None, floor_qps: float | None = 10.0):
        monkeypatch.setattr(sizing.planner, "_with_autoscale",
                            lambda p, req: dataclasses.replace(p, autoscale=policy_for(p, floor, floor_qps)))
    return use


@pytest.fixture
def autoscaled(with_policy, build_program):
    with_policy()
    return build_program("prod", PEAK_40_QPS)


def scaled_objects(recording) -> dict[str, dict]:
    return {r.inputs["metadata"]["name"]: r.inputs for r in recording.of_type(SCALED_OBJECT)}


# -- the ScaledObjects ----------------------------------------------------------------------------------
def test_each_zone_scales_between_its_floor_and_its_ceiling_on_the_policys_query(autoscaled):
    p = autoscaled.plan
    objects = scaled_objects(autoscaled)
    assert set(objects) == {f"vllm-{z}" for z in p.replicas_by_zone}
    for zone, count in p.replicas_by_zone.items():
        spec = objects[f"vllm-{zone}"]["spec"]
        trigger = spec["triggers"][0]
        assert (spec["scaleTargetRef"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (
            {"name": f"vllm-{zone}"}, p.autoscale.floor_by_zone[zone], count)
        assert (trigger["type"], trigger["metricType"], trigger["metadata"]["query"]) == (
            "prometheus", "AverageValue", QUERY)


def test_each_zone_alone_carries_the_load_a_zone_loss_leaves_it(autoscaled):
    """AverageValue: the HPA asks ceil(demand / threshold); with threshold = target x (zones - 1), the zones
    other than any one lost hold demand / target replicas between them: N+1 by zone."""
    p = autoscaled.plan
    zones = len(p.replicas_by_zone)
    for obj in scaled_objects(autoscaled).values():
        threshold = float(obj["spec"]["triggers"][0]["metadata"]["threshold"])
        assert threshold == pytest.approx(p.autoscale.target_per_replica * (zones - 1), rel=1e-5)


def test_scale_down_waits_the_policys_window_then_drains_one_replica_at_a_time(autoscaled):
    grace = next(r for r in autoscaled.of_type("kubernetes:apps/v1:Deployment")
                 if r.inputs["metadata"]["name"] == "vllm-us-east-1a").inputs["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    for obj in scaled_objects(autoscaled).values():
        behavior = obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] == math.ceil(
            autoscaled.plan.autoscale.scale_down_stabilization_s)
        assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": grace}]
        assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0


def test_the_scaled_objects_validate_against_the_keda_crd(autoscaled):
    for obj in scaled_objects(autoscaled).values():
        validate(json.loads(json.dumps(obj)), "1.35")


def test_the_scaled_objects_read_contract_series(autoscaled):
    from observability.contract import check_expr
    for obj in scaled_objects(autoscaled).values():
        check_expr(obj["spec"]["triggers"][0]["metadata"]["query"], where="ScaledObject")


def test_keda_owns_the_replica_count_and_the_deployments_start_at_the_peak_plan(autoscaled):
    for r in autoscaled.of_type("kubernetes:apps/v1:Deployment"):
        name = r.inputs["metadata"]["name"]
        if name.startswith("vllm-us-"):
            assert "spec.replicas" in r.ignore_changes
            assert r.inputs["spec"]["replicas"] == autoscaled.plan.replicas_by_zone[name.removeprefix("vllm-")]


def test_autoscaling_is_off_by_default(recorded):
    prod = recorded("prod")
    assert prod.of_type(SCALED_OBJECT) == []
    assert not any(r.inputs.get("chart") == "cluster-autoscaler" for r in prod.of_type("kubernetes:helm.sh/v3:Release"))


# -- the node groups and the cluster autoscaler ---------------------------------------------------
def test_gpu_node_groups_scale_from_the_floors_nodes_to_the_pools(autoscaled):
    groups = [r for r in autoscaled.of_type("aws:eks/nodeGroup:NodeGroup") if r.name.startswith("gpu-")]
    assert groups
    for g in groups:
        assert g.inputs["scalingConfig"] == {"minSize": 1.0, "maxSize": 2.0, "desiredSize": 2.0}
        assert "scalingConfig.desiredSize" in g.ignore_changes


def test_held_capacity_does_not_scale_and_carries_the_floor_first(with_policy):
    with_policy(floor={"us-east-1a": 3, "us-east-1b": 1})
    pools = [{**PEAK_40_QPS["gpuPools"][0], "name": "held", "nodes": 1, "capacityReservationId": "cr-0123456789abcdef0"},
             {**PEAK_40_QPS["gpuPools"][0], "name": "on-demand", "nodes": 1}, PEAK_40_QPS["gpuPools"][1]]
    settings, p = plan_for("prod", {**PEAK_40_QPS, "gpuPools": pools})
    bounds = node_bounds(p, settings)
    assert bounds[0] is None
    assert (bounds[1].min_nodes, bounds[1].max_nodes) == (1, 1)     # 3 of the zone's floor: 2 on the held node
    assert (bounds[2].min_nodes, bounds[2].max_nodes) == (1, 2)


def test_the_cluster_autoscaler_is_pinned_to_the_clusters_version_and_discovers_the_groups(autoscaled):
    release = next(r for r in autoscaled.of_type("kubernetes:helm.sh/v3:Release")
                   if r.inputs.get("chart") == "cluster-autoscaler")
    values = release.inputs["values"]
    assert (release.inputs["version"], release.inputs["namespace"]) == ("9.59.0", "kube-system")
    assert values["image"]["tag"] == "v1.35.0" and values["cloudProvider"] == "aws"
    assert values["autoDiscovery"]["clusterName"] == autoscaled.outputs["clusterName"]
    assert values["extraArgs"]["scale-down-unneeded-time"] == "900s"


def test_the_cluster_autoscaler_may_resize_only_this_clusters_groups(autoscaled):
    policy = next(json.loads(r.inputs["policy"]) for r in autoscaled.of_type("aws:iam/rolePolicy:RolePolicy")
                  if "cluster-autoscaler" in r.name)
    mutating = next(s for s in policy["Statement"] if "autoscaling:SetDesiredCapacity" in s["Action"])
    assert mutating["Condition"] == {"StringEquals": {"aws:ResourceTag/eks:cluster-name":
                                                      autoscaled.outputs["clusterName"]}}


def test_an_autoscaled_stack_passes_every_policy_and_previews_offline(with_policy, autoscaled, capsys, tmp_path):
    import copy
    import yaml
    from llmserve.cli import main
    from offline.policy_run import evaluate
    from settings import read_stack_config, stack_file
    assert evaluate(autoscaled, "prod") == []
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config.update({f"llm-serving:{k}": v for k, v in PEAK_40_QPS.items()})
    path = tmp_path / "Pulumi.prod-autoscale.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    code = main(["preview", "--stack", "prod-autoscale", "--config", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Policies: 0 mandatory, 0 advisory violation(s)." in out.splitlines()


def test_a_floor_under_n_plus_one_by_zone_is_a_mandatory_violation_in_prod(with_policy, build_program):
    from offline.policy_run import evaluate
    with_policy(floor={"us-east-1a": 1, "us-east-1b": 0})
    violations = evaluate(build_program("prod", PEAK_40_QPS), "prod")
    assert [(v["policy"], v["level"]) for v in violations] == [("autoscaling-floor-n-plus-one-by-zone", "mandatory")]


# -- refusals ---------------------------------------------------------------------------------------
NS = "llm-serving:serving.autoscaling.enabled"


@pytest.mark.parametrize("stack, overrides, floor, message", [
    pytest.param("prod", {"serving": {"autoscaling": {"enabled": True}, "burstScaling": True}}, None,
                 f"{NS}: serving.burstScaling scales the same Deployments with its own ScaledObject, and KEDA takes one "
                 "ScaledObject per workload; set burstScaling: false (autoscaling bounds the fleet itself)",
                 id="with-burst-scaling"),
    pytest.param("prod-multinode", {"serving": {"autoscaling": {"enabled": True}}}, None,
                 f"{NS}: the plan's replicas are groups of 2 nodes, one LeaderWorkerSet each pinned to its own nodes; "
                 "the program scales no whole groups, so it would scale nothing; set enabled: false",
                 id="multi-node-groups"),
])
def test_autoscaling_the_program_cannot_act_on_is_refused(with_policy, stack, overrides, floor, message):
    with_policy(floor)
    settings, p = plan_for(stack, overrides)
    assert autoscaling_problems(p, settings) == [message]


def test_autoscaling_without_a_policy_is_refused():
    settings, p = plan_for("prod", {"serving": {"autoscaling": {"enabled": True}}})
    assert autoscaling_problems(p, settings) == [
        f"{NS}: the plan has no autoscaling policy (a load over time, workload.traffic, gives it); give the traffic "
        "or set enabled: false"]


def test_a_ceiling_beyond_the_pools_is_refused(monkeypatch):
    def too_high(p, req):
        policy = policy_for(p)
        return dataclasses.replace(p, autoscale=dataclasses.replace(
            policy, ceiling_by_zone={z: 99 for z in p.replicas_by_zone}))
    monkeypatch.setattr(sizing.planner, "_with_autoscale", too_high)
    settings, p = plan_for("prod", PEAK_40_QPS)
    assert autoscaling_problems(p, settings)[0] == (
        f"{NS}: the policy's ceiling in us-east-1a is 99 replicas, more than the 4 its GPU pools hold; give the "
        "zone's pools more nodes (the node groups never grow past them)")


def test_an_autoscaled_fleet_drains_one_replica_at_a_time(autoscaled):
    pdb = autoscaled.of_type("kubernetes:policy/v1:PodDisruptionBudget")[0]
    assert pdb.inputs["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb.inputs["spec"]


def test_a_node_group_grows_no_further_than_its_zones_ceiling_needs(with_policy):
    with_policy()
    pools = [{**p, "nodes": 3} for p in PEAK_40_QPS["gpuPools"]]
    settings, p = plan_for("prod", {**PEAK_40_QPS, "gpuPools": pools})
    per_node = p.instance.gpus // p.tp
    assert [(b.min_nodes, b.max_nodes) for b in node_bounds(p, settings)] == [
        (math.ceil(p.autoscale.floor_by_zone[z] / per_node), math.ceil(p.autoscale.ceiling_by_zone[z] / per_node))
        for z in p.replicas_by_zone]
    assert all(b.max_nodes < 3 for b in node_bounds(p, settings))


def test_the_cluster_autoscaler_runs_restricted(autoscaled):
    values = next(r for r in autoscaled.of_type("kubernetes:helm.sh/v3:Release")
                  if r.inputs.get("chart") == "cluster-autoscaler").inputs["values"]
    pod, container = values["securityContext"], values["containerSecurityContext"]
    assert pod["runAsNonRoot"] and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["allowPrivilegeEscalation"] is False and container["capabilities"] == {"drop": ["ALL"]}
    assert container["readOnlyRootFilesystem"] is True


def test_a_failing_query_holds_the_ceiling_not_the_floor(autoscaled):
    for name, obj in scaled_objects(autoscaled).items():
        ceiling = autoscaled.plan.autoscale.ceiling_by_zone[name.removeprefix("vllm-")]
        assert obj["spec"]["fallback"]["replicas"] == ceiling and obj["spec"]["fallback"]["failureThreshold"] >= 1


# -- on the real planner (sizing.autoscale) ----------------------------------------------------------------
DAY = [2, 2, 2, 2, 2, 3, 4, 6, 8, 10, 12, 13, 14, 14, 13, 12, 11, 10, 9, 8, 6, 4, 3, 2]


def test_the_planned_policy_reaches_each_zones_scaled_object(build_program):
    """A stack with workload.traffic and serving.autoscaling.enabled, planned by sizing.autoscale: each
    zone scales between the policy's floor and ceiling on its rate now and its rate a cold start ahead,
    both at the policy's zone threshold (N+1 by zone, less the HPA's tolerance)."""
    from tests.stacks import stack_config
    base = stack_config("prod")
    workload = {k: v for k, v in base["llm-serving:workload"].items() if k != "qps"}
    recording = build_program("prod", {
        "workload": {**workload, "traffic": DAY},
        "serving": {**base.get("llm-serving:serving", {}), "burstScaling": False, "autoscaling": {"enabled": True}},
        "sizing": {**base.get("llm-serving:sizing", {}), "profile": "measured"}})
    a = recording.plan.autoscale
    assert a.lead_query and a.zone_threshold > 0 and a.floor_qps == 2.0
    objects = scaled_objects(recording)
    assert set(objects) == {f"vllm-{z}" for z, n in a.ceiling_by_zone.items() if n}
    for zone, ceiling in a.ceiling_by_zone.items():
        spec = objects[f"vllm-{zone}"]["spec"]
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (a.floor_by_zone[zone], ceiling)
        assert [t["metadata"]["query"] for t in spec["triggers"]] == [a.query, a.lead_query]
        assert [float(t["metadata"]["threshold"]) for t in spec["triggers"]] == [pytest.approx(a.zone_threshold)] * 2
        validate(json.loads(json.dumps(objects[f"vllm-{zone}"])), "1.35")
