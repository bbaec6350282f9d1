"""MIG slices for small models: the profiles, the plan on slices, the CLI, and what the program builds."""
from __future__ import annotations

import base64
import json

import pytest

from llmserve.cli import main
from sizing.catalog import load_catalog
from sizing.mig import PROFILES, profile_for, replicas_per_gpu
from sizing.planner import PlanRequest, plan
from sizing.workload import SizingError, Workload
from tests.k8s_schema import validate

SMALL = {"id": "llama-3.1-8b", "weights": "fp8", "kvCacheDtype": "bf16"}


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- the profiles ---------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", sorted(PROFILES))
def test_a_gpu_holds_its_slices_within_seven_compute_and_eight_memory_slices(gpu):
    for p in PROFILES[gpu].values():
        assert p.instances_per_gpu * p.compute_sevenths <= 7 and p.instances_per_gpu * p.memory_eighths <= 8, p.name


@pytest.mark.parametrize("gpu", sorted(PROFILES))
def test_the_whole_gpu_profile_is_the_catalogs_gpu(gpu):
    whole = [p for p in PROFILES[gpu].values() if p.compute_sevenths == 7]
    assert len(whole) == 1 and whole[0].memory_fraction == 1 and whole[0].instances_per_gpu == 1
    assert whole[0].memory_gb == round(load_catalog().gpu(gpu).memory_gb)


@pytest.mark.parametrize("gpu", sorted(PROFILES))
def test_a_profile_is_named_by_its_compute_slices_and_memory(gpu):
    for name, p in PROFILES[gpu].items():
        assert name == f"{p.compute_sevenths}g.{p.memory_gb:.0f}gb" and p.resource == f"nvidia.com/mig-{name}"


# -- the plan on slices ---------------------------------------------------------------------------
def mig_plan(profile: str, model: str = "llama-3.1-8b"):
    return plan(PlanRequest(Workload(), model=model, mig_profile=profile))


def test_an_8b_model_on_3g_40gb_slices_plans_more_than_one_replica_per_gpu():
    p = mig_plan("3g.40gb")
    assert replicas_per_gpu(p) == 2 and p.tp == 1
    assert p.instance.gpus == 8 * 2 and p.instance.id == "p5.48xlarge"
    assert max(n.replicas for n in p.nodes) > 1 and p.survives_failure


def test_the_whole_gpu_slice_carries_what_the_whole_gpu_carries():
    whole = plan(PlanRequest(Workload(), model="llama-3.1-8b", tp=1))
    seven = mig_plan("7g.80gb")
    assert seven.capacity_per_replica.qps == pytest.approx(whole.capacity_per_replica.qps, rel=0.01)


def test_a_larger_slice_carries_more():
    caps = [mig_plan(p).capacity_per_replica.qps for p in ("1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")]
    assert caps == sorted(caps) and len(set(caps)) == len(caps)


def test_a_slice_costs_its_share_of_the_node():
    p = mig_plan("3g.40gb")
    assert p.gpu_hour_price == pytest.approx(p.node_price_per_hour / 16)


@pytest.mark.parametrize("profile, tp, message", [
    ("1g.10gb", None, "llama-3-70b does not fit a MIG 1g.10gb slice of h100-sxm: 70.6 GB of fp8 weights against the "
                      "slice's 10 GB (a replica takes one slice); use a larger profile or whole GPUs"),
    ("9g.10gb", None, "'9g.10gb' is not a MIG profile of h100-sxm; choose one of 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, "
                      "4g.40gb, 7g.80gb"),
    ("7g.80gb", 2, "a replica on MIG 7g.80gb takes one slice (TP=1, one node): a MIG device has no peer access to "
                   "another; drop the TP or nodes setting, or plan whole GPUs"),
])
def test_what_a_slice_cannot_take_is_refused_naming_it(profile, tp, message):
    with pytest.raises(SizingError) as exc:
        plan(PlanRequest(Workload(), model="llama-3-70b", mig_profile=profile, tp=tp))
    assert str(exc.value) == message and exc.value.field == "mig_profile"


def test_a_gpu_without_mig_profiles_is_refused():
    with pytest.raises(SizingError, match="^no MIG profiles for l40s in the catalog; MIG is planned on h100-sxm, h200, b200$"):
        profile_for("l40s", "1g.10gb")


# -- the CLI --------------------------------------------------------------------------------------
def test_size_mig_reports_the_profile_and_replicas_per_gpu(capsys):
    code, out, err = run(capsys, "size", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--mig", "3g.40gb", "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["mig_profile"] == "3g.40gb" and data["replicas_per_gpu"] > 1
    assert data["gpu"] == "h100-sxm/mig-3g.40gb" and data["gpus_per_replica"] == 1


def test_size_refuses_70b_on_a_1g_10gb_slice_naming_it(capsys):
    code, out, err = run(capsys, "size", "--model", "llama-3-70b", "--mig", "1g.10gb")
    assert (code, out) == (2, "")
    assert err == ("error: --mig: llama-3-70b does not fit a MIG 1g.10gb slice of h100-sxm: 70.6 GB of fp8 weights "
                   "against the slice's 10 GB (a replica takes one slice); use a larger profile or whole GPUs\n")


def test_without_mig_the_json_has_no_mig_keys(capsys):
    code, out, _ = run(capsys, "size", "--model", "llama-3.1-8b", "--json")
    assert code == 0 and not {"mig_profile", "replicas_per_gpu"} & set(json.loads(out))


# -- what the program builds ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def mig_stack():
    from tests.conftest import _record
    return _record("prod", {"model": SMALL, "serving": {"mig": "3g.40gb"}})


def serving_pods(recording):
    return [r.inputs["spec"]["template"]["spec"] for r in recording.of_type("kubernetes:apps/v1:Deployment")
            if r.inputs["metadata"]["name"].startswith("vllm-us-")]


def test_serving_pods_request_their_slice_not_whole_gpus(mig_stack):
    for pod in serving_pods(mig_stack):
        resources = pod["containers"][0]["resources"]
        assert resources["limits"]["nvidia.com/mig-3g.40gb"] == "1" and "nvidia.com/gpu" not in resources["limits"]


def test_the_device_plugin_runs_the_mixed_strategy_on_mig_stacks_only(mig_stack, recorded):
    def strategy(recording):
        release = next(r for r in recording.of_type("kubernetes:helm.sh/v3:Release")
                       if r.inputs.get("chart") == "nvidia-device-plugin")
        return release.inputs["values"].get("migStrategy")
    assert (strategy(mig_stack), strategy(recorded("prod"))) == ("mixed", None)


def test_gpu_nodes_slice_their_gpus_before_kubelet_starts(mig_stack):
    templates = [r for r in mig_stack.of_type("aws:ec2/launchTemplate:LaunchTemplate") if r.name.startswith("gpu-")]
    assert templates
    for t in templates:
        script = base64.b64decode(t.inputs["userData"]).decode()
        assert "nvidia-smi -i \"$gpu\" -mig 1" in script and "-cgi '3g.40gb,3g.40gb' -C" in script


def test_a_mig_stack_passes_every_policy_and_its_objects_validate(mig_stack):
    from offline.policy_run import evaluate
    assert evaluate(mig_stack, "prod") == []
    for r in mig_stack.of_type("kubernetes:apps/v1:Deployment"):
        validate({"apiVersion": "apps/v1", "kind": "Deployment", **{k: v for k, v in r.inputs.items()
                                                                      if k in ("metadata", "spec")}}, "1.35")


def test_a_mig_stack_previews_offline(capsys, tmp_path):
    import copy
    import yaml
    from settings import read_stack_config, stack_file
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config["llm-serving:model"] = SMALL
    config["llm-serving:serving"] = {"mig": "3g.40gb"}
    path = tmp_path / "Pulumi.prod-mig.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    code, out, err = run(capsys, "preview", "--stack", "prod-mig", "--config", str(path))
    assert code == 0, err
    assert "Policies: 0 mandatory, 0 advisory violation(s)." in out.splitlines()
