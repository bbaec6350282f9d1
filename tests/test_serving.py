"""The vLLM replicas: placement per zone, arguments, drain, disruption budget, isolation, burst."""
from __future__ import annotations

import math

import pytest

from conventions import VLLM_API_PORT, VLLM_METRICS_PORT
from deployment.drain import drain_timing, longest_request_s
from deployment.serving import disruption_min_available, startup_budget_s, target_qps, zone_node_slots
from offline.engine import is_secret
from tests.k8s_schema import validate
from tests.stacks import plan_for

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
FLAG_FOR_ARG = {
    "tensor_parallel_size": "--tensor-parallel-size", "kv_cache_dtype": "--kv-cache-dtype",
    "max_model_len": "--max-model-len", "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens", "gpu_memory_utilization": "--gpu-memory-utilization",
}
# A second workload whose plan differs from prod's in every argument a workload decides.
OTHER_WORKLOAD = {
    "workload": {"qps": 15, "inputTokens": 2000, "outputTokens": 500, "maxModelLen": 16384, "ttftSeconds": 1.5,
                 "tpotSeconds": 0.05},
    "model": {"id": "llama-3-70b", "weights": "fp8", "kvCacheDtype": "fp8", "tensorParallel": 8},
    "gpuPools": [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 2},
                 {"zone": "us-east-1b", "instanceType": "p5.48xlarge", "nodes": 2}],
}
TWO_NODES_PER_ZONE = {"gpuPools": [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 2},
                                   {"zone": "us-east-1b", "instanceType": "p5.48xlarge", "nodes": 2}],
                      "replicas": 6}


def serving_deployments(recording) -> dict[str, dict]:
    out = {}
    for r in recording.of_type(DEPLOYMENT):
        labels = r.inputs["metadata"].get("labels", {})
        if labels.get("llm-serving.io/role") == "serving":
            out[labels["llm-serving.io/zone"]] = r.inputs
    assert out, "no serving Deployment recorded"     # the checks below loop over these
    return out


def flags(deployment: dict) -> dict[str, str]:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return {a: (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else "")
            for i, a in enumerate(args) if a.startswith("--")}


def vllm_container(deployment: dict) -> dict:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


# -- placement -----------------------------------------------------------------------------
@pytest.mark.parametrize("stack,overrides", [("prod", None), ("staging", None), ("dev", None),
                                             ("prod", TWO_NODES_PER_ZONE)])
def test_one_deployment_per_zone_with_the_planned_replicas(recorded, stack, overrides):
    _, plan = plan_for(stack, overrides)
    deployments = serving_deployments(recorded(stack, overrides))
    assert {z: int(d["spec"]["replicas"]) for z, d in deployments.items()} == \
        {z: n for z, n in plan.replicas_by_zone.items() if n}


@pytest.mark.parametrize("stack,overrides", [("prod", None), ("dev", None), ("prod", TWO_NODES_PER_ZONE)])
def test_pods_land_on_their_zones_gpu_nodes_and_spread_as_planned(recorded, stack, overrides):
    _, plan = plan_for(stack, overrides)
    for zone, d in serving_deployments(recorded(stack, overrides)).items():
        pod = d["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"llm-serving.io/role": "gpu", "topology.kubernetes.io/zone": zone}
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in pod["tolerations"]
        (spread,) = pod["topologySpreadConstraints"]
        assert (spread["topologyKey"], spread["whenUnsatisfiable"], int(spread["maxSkew"])) == \
            ("kubernetes.io/hostname", "DoNotSchedule", 1)
        assert spread["labelSelector"]["matchLabels"] == d["spec"]["selector"]["matchLabels"]
        # maxSkew 1 over the zone's nodes puts at most ceil(count / nodes) on a node: the plan's most.
        nodes = [n for n in plan.nodes if n.zone == zone]
        most, _ = zone_node_slots(plan, zone)
        assert math.ceil(int(d["spec"]["replicas"]) / len(nodes)) == most


def test_a_rollout_never_puts_a_pod_beyond_the_plan(recorded):
    for d in serving_deployments(recorded("prod")).values():
        assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0.0, "maxUnavailable": 1.0}


def test_zones_roll_one_after_another(recorded):
    recording = recorded("prod")
    by_urn = {r.urn: r for r in recording.of_type(DEPLOYMENT)}
    deployments = [r for r in recording.of_type(DEPLOYMENT) if r.name.startswith("serving-")]
    assert any(dep in by_urn for dep in deployments[1].dependencies)


# -- the container -------------------------------------------------------------------------
@pytest.mark.parametrize("stack,overrides", [("prod", None), ("dev", None), ("prod", OTHER_WORKLOAD)])
def test_every_vllm_argument_is_the_plans(recorded, stack, overrides):
    _, plan = plan_for(stack, overrides)
    for d in serving_deployments(recorded(stack, overrides)).values():
        f = flags(d)
        for arg, flag in FLAG_FOR_ARG.items():
            assert f[flag] == str(getattr(plan.engine_args, arg)), flag
        # The engine serves the directory the init step downloaded the checkpoint into.
        assert f["--model"] == f"/models/hub/{plan.checkpoint}"
        (download,) = d["spec"]["template"]["spec"]["initContainers"]
        assert {e["name"]: e["value"] for e in download["env"]}["MODEL_ID"] == plan.checkpoint
        assert "--enable-chunked-prefill" in f
        assert f["--shutdown-timeout"] == str(drain_timing(longest_request_s(plan)).shutdown_timeout_s)
        assert vllm_container(d)["resources"]["limits"]["nvidia.com/gpu"] == str(plan.tp)


@pytest.mark.parametrize("flag", sorted(set(FLAG_FOR_ARG.values()) - {"--gpu-memory-utilization", "--max-num-seqs"})
                         + ["--shutdown-timeout"])
def test_every_argument_changes_when_the_plan_changes(recorded, flag):
    # gpu-memory-utilization comes from the efficiency profile, and both profiles say 0.9;
    # max-num-seqs is vLLM's own default for the GPU class (or the seed profile's 512).
    first = {f[flag] for f in map(flags, serving_deployments(recorded("prod")).values())}
    second = {f[flag] for f in map(flags, serving_deployments(recorded("prod", OTHER_WORKLOAD)).values())}
    assert first.isdisjoint(second), flag


def test_shared_memory_and_model_cache(recorded):
    for d in serving_deployments(recorded("prod")).values():
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
        assert volumes["model-cache"]["hostPath"]["path"] == "/mnt/models"
        mounts = {m["name"]: m["mountPath"] for m in vllm_container(d)["volumeMounts"]}
        assert mounts["shm"] == "/dev/shm"


@pytest.mark.parametrize("stack", ["prod", "prod-multinode"])
def test_the_model_cache_is_read_only_to_the_engine_and_written_by_the_init_step(recorded, stack):
    """One init container writes the weights; every serving container mounts them read-only, serves
    the downloaded directory offline, and writes only the compile caches (their own sub-directory)."""
    from offline.manifests import kubernetes_objects
    from tests.test_pod_security import pods
    seen = 0
    for name, spec in pods(kubernetes_objects(recorded(stack))):
        if not name.startswith("vllm-us-east"):
            continue
        seen += 1
        (init,) = spec["initContainers"]
        writes = [m for c in [init, *spec["containers"]] for m in c["volumeMounts"]
                  if m["name"] == "model-cache" and not m.get("readOnly")]
        assert writes == [{"name": "model-cache", "mountPath": "/models"},
                          {"name": "model-cache", "mountPath": "/var/cache/vllm-compile", "subPath": "compile"}], name
        assert {"name": "model-cache", "mountPath": "/models"} in init["volumeMounts"], name
        engine = next(c for c in spec["containers"] if c["name"] == "vllm")
        env = {e["name"]: e.get("value") for e in engine["env"]}
        assert env["HF_HUB_OFFLINE"] == "1" and not env["HF_HOME"].startswith("/models"), name
        assert all(env[k].startswith("/var/cache/vllm-compile/") for k in
                   ("VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE", "DG_JIT_CACHE_DIR", "CUDA_CACHE_PATH")), name
        model = engine["args"][engine["args"].index("--model") + 1]
        assert model == {e["name"]: e["value"] for e in init["env"]}["MODEL_DIR"] and model.startswith("/models/"), name
    assert seen >= 2


def test_the_download_script_reads_its_values_from_the_environment_only():
    """No stack value is spliced into the init step's script: it is the same text for every stack."""
    from deployment.model_cache import DOWNLOAD_SCRIPT, download_container, served_model_path
    for checkpoint in ("org/model", "/models/mine/llama"):
        c = download_container(checkpoint, {}, {"name": "tmp", "mountPath": "/tmp"})
        assert c["command"] == ["python3", "-c", DOWNLOAD_SCRIPT] and checkpoint not in DOWNLOAD_SCRIPT
    assert served_model_path("/models/mine/llama") == "/models/mine/llama"
    assert served_model_path("org/model") == "/models/hub/org/model"


@pytest.mark.parametrize("checkpoint, local_dir_exists, code, called", [
    ("org/model", False, 0, True),                 # a hub id: downloaded into its directory
    ("/models/mine/llama", True, 0, False),        # a checkpoint in the cache: only checked
    ("/models/mine/missing", False, 1, False),     # ... and refused when it is not there
])
def test_the_download_script_downloads_a_hub_id_and_checks_a_local_checkpoint(tmp_path, checkpoint,
                                                                              local_dir_exists, code, called):
    """The init step's script run as the container runs it, against a stand-in huggingface_hub that
    records its call: the compile cache's directory is made either way."""
    import subprocess
    import sys
    from deployment.model_cache import DOWNLOAD_SCRIPT
    (tmp_path / "huggingface_hub.py").write_text(
        "import json, os\ndef snapshot_download(repo, **kw):\n"
        "    open(os.environ['CALLS'], 'w').write(json.dumps([repo, kw]))\n")
    target = tmp_path / "models" / checkpoint.lstrip("/")
    if local_dir_exists:
        target.mkdir(parents=True)
    env = {"PYTHONPATH": str(tmp_path), "CALLS": str(tmp_path / "calls.json"), "MODEL_ID": checkpoint,
           "MODEL_DIR": str(target), "COMPILE_CACHE": str(tmp_path / "models" / "compile")}
    run = subprocess.run([sys.executable, "-c", DOWNLOAD_SCRIPT], env=env, capture_output=True, text=True)
    assert run.returncode == code, run.stderr
    assert (tmp_path / "models" / "compile").is_dir()
    if called:
        import json
        repo, kwargs = json.loads((tmp_path / "calls.json").read_text())
        assert repo == checkpoint and kwargs["local_dir"] == str(target) and "original/*" in kwargs["ignore_patterns"]
    else:
        assert not (tmp_path / "calls.json").exists()


def test_probes_use_health_and_the_startup_budget_fits_a_cold_70b_load(recorded):
    _, plan = plan_for("prod")
    for d in serving_deployments(recorded("prod")).values():
        c = vllm_container(d)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/health"
        budget = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
        assert budget >= startup_budget_s(plan.weights_gb)
        assert budget >= 600        # a cold 70B start: download, load, graph capture


# -- drain ---------------------------------------------------------------------------------
@pytest.mark.parametrize("longest_s", [1.0, 13.0, 53.0, 126.5, 600.0])
def test_drain_fits_inside_the_grace_period(longest_s):
    t = drain_timing(longest_s)
    assert t.holds
    assert t.pre_stop_s + t.shutdown_timeout_s < t.grace_period_s
    assert t.shutdown_timeout_s >= longest_s


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_the_deployment_carries_the_drain_it_was_sized_for(recorded, stack):
    _, plan = plan_for(stack)
    t = drain_timing(longest_request_s(plan))
    for d in serving_deployments(recorded(stack)).values():
        pod = d["spec"]["template"]["spec"]
        assert int(pod["terminationGracePeriodSeconds"]) == t.grace_period_s
        assert int(vllm_container(d)["lifecycle"]["preStop"]["sleep"]["seconds"]) == t.pre_stop_s
        assert int(flags(d)["--shutdown-timeout"]) + t.pre_stop_s < t.grace_period_s


# -- disruption budget ---------------------------------------------------------------------
@pytest.mark.parametrize("replicas,after_loss,per_node,expected", [
    (2, 1, 1, 1),      # the reference design: one per zone
    (3, 2, 1, 2),
    (4, 2, 1, 2),
    (4, 2, 2, 2),      # two per node, one node per zone
    (6, 4, 1, 4),      # three zones of two
    (6, 3, 2, 3),
    (1, 1, 1, 0),      # one node, no redundancy: the drain must still proceed
    (2, 2, 2, 0),
])
def test_pdb_min_available(replicas, after_loss, per_node, expected):
    assert disruption_min_available(replicas, after_loss, per_node) == expected


@pytest.mark.parametrize("replicas,after_loss,per_node", [(2, 1, 1), (3, 2, 1), (4, 2, 2), (6, 4, 1), (8, 4, 2)])
def test_pdb_lets_a_node_drain_and_keeps_the_surviving_target(replicas, after_loss, per_node):
    min_available = disruption_min_available(replicas, after_loss, per_node)
    assert replicas - min_available >= per_node          # a whole node's pods can be evicted
    assert min_available >= after_loss                   # never below what survives a zone loss


@pytest.mark.parametrize("stack,overrides", [("prod", None), ("dev", None), ("prod", TWO_NODES_PER_ZONE)])
def test_the_recorded_pdb_is_the_plans(recorded, stack, overrides):
    _, plan = plan_for(stack, overrides)
    pdb = recorded(stack, overrides).named("serving-pdb").inputs["spec"]
    assert int(pdb["minAvailable"]) == disruption_min_available(
        plan.replicas, plan.replicas_after_loss, max(n.replicas for n in plan.nodes))
    assert pdb["selector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm", "llm-serving.io/role": "serving"}


# -- contract, isolation, secrets ----------------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_workloads_carry_the_plan_for_the_policies(recorded, stack):
    settings, plan = plan_for(stack)
    for zone, d in serving_deployments(recorded(stack)).items():
        a = d["metadata"]["annotations"]
        assert a["llm-serving.io/zone"] == zone
        assert float(a["llm-serving.io/target-qps"]) == pytest.approx(target_qps(plan), abs=1e-4)
        assert float(a["llm-serving.io/replica-capacity-qps"]) == pytest.approx(plan.capacity_per_replica.qps, abs=1e-4)
        assert a["llm-serving.io/tensor-parallel"] == str(plan.tp)
        assert a["llm-serving.io/gpus-per-node"] == str(plan.instance.gpus)
        assert a["llm-serving.io/environment"] == settings.environment
        assert d["metadata"]["labels"] == {"app.kubernetes.io/name": "vllm", "llm-serving.io/role": "serving",
                                           "llm-serving.io/zone": zone}


def test_target_qps_is_the_workloads_for_open_loop():
    _, plan = plan_for("prod")
    assert target_qps(plan) == pytest.approx(plan.request.workload.qps)


def _ingress_ports(policy: dict) -> dict[int, list]:
    out: dict[int, list] = {}
    for rule in policy.get("ingress", []):
        for port in rule.get("ports", []):
            out.setdefault(int(port["port"]), []).extend(rule.get("from", []))
    return out


def test_only_the_gateway_reaches_the_api_and_only_monitoring_the_metrics(recorded):
    recording = recorded("prod")
    policies = [r.inputs["spec"] for r in recording.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                if r.inputs["metadata"]["namespace"] == "llm-serving"]
    assert {"podSelector": {}, "policyTypes": ["Ingress"]} in policies
    serving = [p for p in policies if p["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name") == "vllm"]
    sources: dict[int, list] = {}
    for p in serving:
        for port, peers in _ingress_ports(p).items():
            sources.setdefault(port, []).extend(peers)
    namespaces = {port: {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                         for peer in peers if "namespaceSelector" in peer} for port, peers in sources.items()}
    assert namespaces == {VLLM_API_PORT: {"envoy-gateway-system"}, VLLM_METRICS_PORT: {"monitoring"}}
    # The one pod-level peer on the API port is the endpoint picker (it reads /metrics there).
    pods = [peer["podSelector"]["matchLabels"] for peer in sources[VLLM_API_PORT] if "podSelector" in peer]
    assert pods == [{"app.kubernetes.io/name": "endpoint-picker", "llm-serving.io/role": "gateway"}]


def test_hub_token_reaches_the_download_step_only_as_a_secret_file(recorded):
    """The init step that downloads the checkpoint reads the token from a file; the engine, which
    serves offline from the cache, gets no token at all."""
    recording = recorded("prod")
    secret = recording.named("serving-hub-token").inputs
    assert is_secret(secret["stringData"])
    deployment = next(iter(serving_deployments(recording).values()))
    (download,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/hub/token"} in download["env"]
    assert not any("valueFrom" in e or "TOKEN" in e["name"] and "value" in e and e["name"] != "HF_TOKEN_PATH"
                   for e in download["env"])
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["hub-token"]["secret"] == {"secretName": "hub-token", "defaultMode": 0o440}
    assert {"name": "hub-token", "mountPath": "/var/run/secrets/hub", "readOnly": True} in download["volumeMounts"]
    vllm = vllm_container(deployment)
    assert not [e for e in vllm["env"] if "TOKEN" in e["name"]]
    assert "hub-token" not in {m["name"] for m in vllm["volumeMounts"]}


# -- burst scaling -------------------------------------------------------------------------
def test_burst_scaling_is_off_by_default(recorded):
    assert recorded("prod").of_type("kubernetes:keda.sh/v1alpha1:ScaledObject") == []


def test_burst_scaling_fills_the_nodes_idle_gpus(recorded):
    _, plan = plan_for("prod")
    recording = recorded("prod", {"serving": {"burstScaling": True}})
    scaled = {r.inputs["metadata"]["name"]: r.inputs for r in recording.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")}
    assert sorted(scaled) == sorted(f"vllm-{z}" for z in plan.replicas_by_zone)
    for zone, count in plan.replicas_by_zone.items():
        spec = scaled[f"vllm-{zone}"]["spec"]
        _, ceiling = zone_node_slots(plan, zone)
        assert (int(spec["minReplicaCount"]), int(spec["maxReplicaCount"])) == (count, ceiling)
        assert ceiling * plan.tp <= sum(n.gpus_used + n.gpus_idle for n in plan.nodes if n.zone == zone)
        (trigger,) = spec["triggers"]
        assert "vllm:num_requests_waiting" in trigger["metadata"]["query"]
        assert int(trigger["metadata"]["threshold"]) >= 1
        validate({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
                  "spec": {**spec, "minReplicaCount": count, "maxReplicaCount": ceiling, "cooldownPeriod": 600}}, "1.33")


def test_the_stacks_checkpoint_is_what_vllm_serves(build_program):
    """model.checkpoint (validated by settings as a hub id or a path in the model cache) replaces the
    catalog's prequantized checkpoint; without it the catalog's is served."""
    model = {"id": "llama-3-70b", "weights": "fp8", "kvCacheDtype": "bf16", "checkpoint": "my-org/llama-3-70b-fp8"}
    recording = build_program("prod", {"model": model})
    deployment = next(iter(serving_deployments(recording).values()))
    args = vllm_container(deployment)["args"]
    assert args[args.index("--model") + 1] == "/models/hub/my-org/llama-3-70b-fp8"
    (download,) = deployment["spec"]["template"]["spec"]["initContainers"]
    env = {e["name"]: e["value"] for e in download["env"]}
    assert (env["MODEL_ID"], env["MODEL_DIR"]) == ("my-org/llama-3-70b-fp8", "/models/hub/my-org/llama-3-70b-fp8")


# -- the served name of a stack that sizes a local config.json --------------------------------------
def config_stack(tmp_path, model: dict) -> dict:
    """Overrides: the model sized from a copy of the shipped Llama 3.1 8B config.json, in a folder
    named for it, on one H100 of each zone."""
    from pathlib import Path
    path = tmp_path / "my-8b" / "config.json"
    path.parent.mkdir()
    path.write_text((Path(__file__).parent.parent / "sizing/data/models/llama-3.1-8b.json").read_text())
    return {"model": {"config": str(path), "weights": "bf16", "kvCacheDtype": "bf16", **model},
            "workload": {"qps": 2.0, "maxModelLen": 8192}}


@pytest.mark.parametrize("model,served", [
    ({"checkpoint": "meta-llama/Llama-3.1-8B-Instruct"}, "my-8b"),
    ({"checkpoint": "meta-llama/Llama-3.1-8B-Instruct", "id": "team-8b"}, "team-8b"),
], ids=["no-id: the folder's name", "id: as given"])
def test_a_model_config_is_served_under_its_own_name_everywhere(tmp_path, model, served):
    """Never the default id (`llama-3-70b`) of a model it is not: vLLM, the load test and the gate agree."""
    from deployment.jobs import gate_job_spec, load_test_spec
    from deployment.serving import serving_spec
    settings, plan = plan_for("prod", {**config_stack(tmp_path, model), "loadTest": {"enabled": True}})
    launch = serving_spec(plan, settings).launch
    assert (launch.served_model_name, launch.model) == (served, "meta-llama/Llama-3.1-8B-Instruct")
    assert load_test_spec(plan, settings).scenario["spec"]["backend"]["model"] == served
    assert f"model={served}," in gate_job_spec(plan, settings).lm_eval_command[4]


def test_a_model_config_without_a_checkpoint_is_refused_naming_the_key(tmp_path):
    from settings import SettingsError
    with pytest.raises(SettingsError) as err:
        plan_for("prod", config_stack(tmp_path, {}))
    assert any(p.startswith("llm-serving:model.checkpoint: model.config sizes a local config.json")
               for p in err.value.problems)
