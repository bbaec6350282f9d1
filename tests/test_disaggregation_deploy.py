"""Deploying a disaggregated (prefill/decode) or speculative plan: the stack keys, the deployment spec,
the rendered workloads, the P/D picker, the network policies, the policies and the offline preview.

The plans come from the planner's hooks filled by `disaggregated_planner` / `speculative_planner`
(tests/conftest.py, tests/disagg_plans.py): plans of the contract's shape (sizing/roles.py). Once
sizing/disagg.py and sizing/speculative.py are merged, the preview test
(`test_a_disaggregated_stack_previews_offline_and_validates`) is the one to run on the real planner.
"""
from __future__ import annotations

import copy
import json
import math

import pytest
import yaml

from settings import SettingsError, read_stack_config, settings_from_config, stack_file
from sizing.speculative import NGRAM_LOOKUP_MAX
from tests.stacks import stack_config, with_overrides

DISAGGREGATED = {"serving": {"mode": "disaggregated"}}
EAGLE = {"method": "eagle3", "draftTokens": 3, "acceptanceRate": 0.7}
POD_IP = {"fieldRef": {"fieldPath": "status.podIP"}}


def prod_with(serving: dict) -> dict:
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config["llm-serving:serving"] = serving
    return config


def problems(config: dict) -> list[str]:
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", config)
    return err.value.problems


# -- settings: serving.mode and serving.speculative ------------------------------------------------
@pytest.mark.parametrize("serving, expected", [
    ({"speculative": {"method": "eagle3", "draftTokens": 3}},
     "llm-serving:serving.speculative.acceptanceRate: required when serving.speculative is set (the per-token "
     "acceptance, between 0 and 1; it depends on the workload, so no default is assumed): measure it on this "
     "workload with the method and k you plan: vLLM exports vllm:spec_decode_num_accepted_tokens and "
     "vllm:spec_decode_num_draft_tokens, and their ratio over a window (rate of the first / rate of the second) "
     "is the per-token acceptance (docs/speculative-deploy.md)"),
    ({"speculative": {"method": "eagle3", "acceptanceRate": 1.5}},
     "llm-serving:serving.speculative.acceptanceRate: must be less than 1 (got 1.5)"),
    ({"speculative": {"method": "medusa", "acceptanceRate": 0.5}},
     "llm-serving:serving.speculative.method: unknown value 'medusa'; choose one of: eagle3, mtp, ngram, draft"),
    ({"speculative": {"method": "eagle3", "acceptanceRate": 0.6, "draftTokens": 0}},
     "llm-serving:serving.speculative.draftTokens: must be at least 1 (got 0)"),
    ({"speculative": {"method": "draft", "acceptanceRate": 0.6}},
     "llm-serving:serving.speculative: method draft needs draftModel: the drafter's checkpoint (a hub id or a path "
     "in the model cache)"),
    ({"speculative": {"method": "ngram", "acceptanceRate": 0.6, "draftModel": "org/drafter"}},
     "llm-serving:serving.speculative: method ngram drafts from the prompt and needs no draftModel; drop it"),
    ({"speculative": {"method": "eagle3", "acceptanceRate": 0.6, "draftModel": "$(rm -rf /)"}},
     "llm-serving:serving.speculative.draftModel: '$(rm -rf /)' is not a checkpoint; use a model hub id (org/name) "
     "or a path under /models/ on the node's model cache, without '..' or spaces"),
    ({"mode": "split"},
     "llm-serving:serving.mode: unknown value 'split'; choose one of: aggregated, disaggregated, auto"),
], ids=["no-acceptance", "acceptance-above-1", "unknown-method", "k-zero", "draft-without-model", "ngram-with-model",
        "hostile-drafter", "unknown-mode"])
def test_a_bad_serving_key_is_one_line_naming_it(serving, expected):
    assert problems(prod_with(serving)) == [expected]


def test_serving_keys_reach_the_plan_request():
    from sizing.roles import SpeculativeRequest
    settings = settings_from_config("prod", prod_with({"mode": "disaggregated", "speculative": {**EAGLE, "draftModel": "org/drafter"}}))
    req = settings.plan_request()
    assert (req.serving_mode, req.speculative) == ("disaggregated", SpeculativeRequest("eagle3", 3, 0.7, "org/drafter"))
    # `llmserve size --stack` reads the same keys, and none of the stack's own serving keys.
    body = settings_from_config("prod", prod_with({"mode": "disaggregated", "burstScaling": False})).request_body()
    assert body["serving"] == {"mode": "disaggregated"}


def test_without_the_serving_keys_the_request_is_aggregated_with_no_speculation():
    req = settings_from_config("prod", read_stack_config(stack_file("prod"))).plan_request()
    assert (req.serving_mode, req.speculative) == ("aggregated", None)


# -- the deployment spec -------------------------------------------------------------------------
def spec_of(overrides: dict):
    from deployment.spec import deployment_spec
    from offline.stack import load_stack
    loaded = load_stack("prod", raw=with_overrides(stack_config("prod"), overrides))
    return loaded.plan, deployment_spec(loaded.plan, loaded.settings)


@pytest.mark.parametrize("link, backend", [("nvlink", "UCX"), ("efa", "LIBFABRIC")])
def test_each_pool_launches_vllm_with_the_nixl_connector_for_its_link(disaggregated_planner, link, backend):
    disaggregated_planner(link=link)
    plan, spec = spec_of(DISAGGREGATED)
    assert (spec.serving.zones, [p.role for p in spec.serving.pools]) == ((), ["prefill", "decode"])
    for pool in spec.serving.pools:
        assert json.loads(pool.launch.kv_transfer_config) == {
            "kv_connector": "NixlConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"backends": [backend], "kv_lease_duration": math.ceil(plan.kv_transfer.kv_lease_s)}}
        assert pool.kv_over_efa is (link == "efa")
    assert spec.kv_over_efa is (link == "efa")
    assert all(p.efa for p in spec.node_pools) is (link == "efa")


def test_each_pool_gets_its_own_port_placement_drain_and_budget(disaggregated_planner):
    from conventions import DECODE_ENGINE_PORT, LABEL_LLM_D_ROLE, VLLM_API_PORT
    disaggregated_planner()
    plan, spec = spec_of(DISAGGREGATED)
    prefill, decode = spec.serving.pools
    pools = plan.pools_by_role
    assert (prefill.launch.port, decode.launch.port) == (VLLM_API_PORT, DECODE_ENGINE_PORT)
    for role, served in (("prefill", prefill), ("decode", decode)):
        assert {z.zone: z.replicas for z in served.zones} == pools[role].replicas_by_zone
        assert served.disruption_budget["selector"]["matchLabels"][LABEL_LLM_D_ROLE] == role
        assert served.disruption_budget["minAvailable"] == pools[role].replicas - max(pools[role].replicas_by_zone.values())
        assert served.drain.holds
    # A prefill pod holds a request for its TTFT and the KV lease, a decode pod for the whole generation.
    w = plan.request.workload
    assert prefill.drain.shutdown_timeout_s == math.ceil(w.ttft_slo_s + plan.kv_transfer.kv_lease_s)
    assert decode.drain.shutdown_timeout_s == math.ceil(w.ttft_slo_s + plan.engine_args.max_model_len * w.tpot_slo_s)


def test_the_gateways_circuit_limits_count_the_decode_pods_that_hold_requests(disaggregated_planner):
    disaggregated_planner(decode={"us-east-1a": 3, "us-east-1b": 3})
    plan, spec = spec_of(DISAGGREGATED)
    decode = plan.pools_by_role["decode"]
    in_flight = math.ceil(decode.replicas * decode.max_num_seqs / spec.gateway.proxies)
    assert spec.gateway.circuit_limits == {"maxConnections": in_flight, "maxParallelRequests": in_flight,
                                           "maxPendingRequests": in_flight, "maxParallelRetries": decode.replicas}


@pytest.mark.parametrize("overrides, expected", [
    ({"serving": {"mode": "disaggregated", "burstScaling": True}},
     "llm-serving:serving.burstScaling: a disaggregated plan sizes its prefill and decode pools apart, and burst "
     "scaling adds aggregated replicas into idle GPUs; set burstScaling: false"),
    ({"gateway": {**stack_config("prod")["llm-serving:gateway"], "inferenceExtension": False}},
     "llm-serving:gateway.inferenceExtension: a disaggregated plan needs the P/D endpoint picker (it sends each "
     "request to a decode pod with the prefill pod it pairs); set it to true"),
    ({"gpuPools": [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "efa": False},
                   {"zone": "us-east-1b", "instanceType": "p5.48xlarge"}]},
     "llm-serving:gpuPools[0].efa: the plan moves KV between prefill and decode nodes over EFA, so EFA is on "
     "regardless (docs/disaggregation-deploy.md); drop efa: false"),
], ids=["burst-scaling", "no-inference-extension", "efa-off-for-an-efa-link"])
def test_a_setting_the_disaggregated_plan_cannot_deploy_with_names_its_key(disaggregated_planner, overrides, expected):
    from deployment.disagg import disaggregation_problems
    from offline.stack import load_stack
    disaggregated_planner(link="efa")
    loaded = load_stack("prod", raw=with_overrides(stack_config("prod"), {**DISAGGREGATED, **overrides}))
    assert disaggregation_problems(loaded.plan, loaded.settings) == [expected]


@pytest.mark.parametrize("method, k, drafter, expected", [
    ("eagle3", 3, "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
     {"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}),
    ("ngram", 4, None, {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": NGRAM_LOOKUP_MAX}),
    ("draft", 2, "meta-llama/Llama-3.2-1B-Instruct",
     {"method": "draft_model", "num_speculative_tokens": 2, "model": "meta-llama/Llama-3.2-1B-Instruct"}),
])
def test_a_speculative_plan_launches_vllm_with_its_speculative_config(speculative_planner, method, k, drafter, expected):
    from conventions import ANNOTATION_SPECULATIVE_ACCEPTANCE, ANNOTATION_SPECULATIVE_METHOD
    speculative_planner()
    stated = {"method": method, "draftTokens": k, "acceptanceRate": 0.6, **({"draftModel": drafter} if drafter else {})}
    _, spec = spec_of({"serving": {"speculative": stated}})
    assert json.loads(spec.serving.launch.speculative_config) == expected
    for zone in spec.serving.annotations.values():
        assert (zone[ANNOTATION_SPECULATIVE_METHOD], zone[ANNOTATION_SPECULATIVE_ACCEPTANCE]) == (method, "0.6")


def test_speculation_the_plan_turned_off_adds_no_flag(speculative_planner):
    speculative_planner(enabled=False)
    _, spec = spec_of({"serving": {"speculative": EAGLE}})
    assert spec.serving.launch.speculative_config is None
    assert "--speculative-config" not in __import__("deployment.engine", fromlist=["vllm_args"]).vllm_args(spec.serving.launch)


# -- the rendered program ------------------------------------------------------------------------
def workloads(recording, role: str) -> dict:
    prefix = f"serving-{role}-"
    return {r.name.removeprefix(prefix): r.inputs for r in recording.of_type("kubernetes:apps/v1:Deployment")
            if r.name.startswith(prefix)}


def engine_of(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def arg(container: dict, flag: str) -> str:
    args = container["args"]
    return args[args.index(flag) + 1]


def test_two_workloads_per_zone_carry_their_role_and_the_nixl_side_channel(disaggregated_planner, build_program):
    from conventions import LABEL_LLM_D_ROLE, LLM_D_ROUTING_SIDECAR_IMAGE
    disaggregated_planner()
    rec = build_program("prod", DISAGGREGATED)
    zones = set(rec.plan.replicas_by_zone)
    for role in ("prefill", "decode"):
        found = workloads(rec, role)
        assert set(found) == zones
        for zone, d in found.items():
            assert d["spec"]["template"]["metadata"]["labels"][LABEL_LLM_D_ROLE] == role
            assert d["spec"]["replicas"] == rec.plan.pools_by_role[role].replicas_by_zone[zone]
            engine = engine_of(d)
            env = {e["name"]: e for e in engine["env"]}
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == POD_IP
            assert {"name": "nixl", "containerPort": 5600, "protocol": "TCP"} in engine["ports"]
            # Both roles fill the model cache first; a decode pod then starts llm-d's routing sidecar.
            init = d["spec"]["template"]["spec"]["initContainers"]
            assert [c["name"] for c in init] == ["model-download", *(["routing-sidecar"] if role == "decode" else [])]
    decode = next(iter(workloads(rec, "decode").values()))
    assert arg(engine_of(decode), "--port") == "8200"
    sidecar = decode["spec"]["template"]["spec"]["initContainers"][-1]
    assert (sidecar["image"], sidecar["restartPolicy"]) == (LLM_D_ROUTING_SIDECAR_IMAGE, "Always")
    assert sidecar["args"][:3] == ["--port=8000", "--vllm-port=8200", "--kv-connector=nixlv2"]
    assert {r.name for r in rec.of_type("kubernetes:policy/v1:PodDisruptionBudget")} >= {
        "serving-prefill-pdb", "serving-decode-pdb"}


def test_kv_over_efa_requests_the_nodes_efa_devices(disaggregated_planner, build_program):
    from conventions import EFA_RESOURCE, VLLM_EFA_IMAGE
    disaggregated_planner(link="efa")
    rec = build_program("prod", DISAGGREGATED)
    for role in ("prefill", "decode"):
        for d in workloads(rec, role).values():
            assert int(engine_of(d)["resources"]["limits"][EFA_RESOURCE]) > 0
            assert engine_of(d)["image"] == VLLM_EFA_IMAGE      # NIXL's LIBFABRIC backend needs libfabric
            assert json.loads(arg(engine_of(d), "--kv-transfer-config"))["kv_connector_extra_config"]["backends"] == [
                "LIBFABRIC"]
    # The nodes get EFA interfaces (launch templates), and the EFA device plugin is installed.
    templates = [r for r in rec.of_type("aws:ec2/launchTemplate:LaunchTemplate") if r.inputs.get("networkInterfaces")]
    assert len(templates) == len(rec.plan.request.pools)
    assert all(i["interfaceType"] == "efa" for t in templates for i in t.inputs["networkInterfaces"])
    assert any(r.name.startswith("efa-plugin") for r in rec.of_type("kubernetes:helm.sh/v3:Release"))


@pytest.mark.parametrize("link, ports", [("nvlink", [{"protocol": "TCP"}]),
                                         ("efa", [{"protocol": "TCP", "port": 5600}, {"protocol": "TCP", "port": 8000}])])
def test_a_zones_prefill_and_decode_pods_reach_only_each_other(disaggregated_planner, build_program, link, ports):
    disaggregated_planner(link=link)
    rec = build_program("prod", DISAGGREGATED)
    for zone in rec.plan.replicas_by_zone:
        spec = rec.named(f"serving-vllm-kv-transfer-{zone}").inputs["spec"]
        selector = spec["podSelector"]
        assert selector["matchLabels"]["llm-serving.io/zone"] == zone
        assert selector["matchExpressions"] == [{"key": "llm-d.ai/role", "operator": "In", "values": ["prefill", "decode"]}]
        peers = {"podSelector": selector}
        assert spec["ingress"] == [{"from": [peers], "ports": ports}] and spec["egress"] == [{"to": [peers], "ports": ports}]


def test_the_pd_picker_is_llm_d_one_per_zone_pairing_within_its_zone(disaggregated_planner, build_program):
    from conventions import LLM_D_SCHEDULER_IMAGE
    # llm-d inference scheduler v0.8.0 pkg/epp/framework/plugins/register.go, and GAIE v1.5.0's in-tree
    # plugins it also registers (cmd/epp/runner/runner.go registerInTreePlugins).
    registered = {"disagg-headers-handler", "by-label", "prefill-filter", "decode-filter", "queue-scorer",
                  "kv-cache-utilization-scorer", "max-score-picker", "always-disagg-pd-decider",
                  "disagg-profile-handler"}
    disaggregated_planner()
    rec = build_program("prod", DISAGGREGATED)
    for zone in rec.plan.replicas_by_zone:
        epp = rec.named(f"llm-gateway-picker-{zone}-deploy").inputs["spec"]["template"]["spec"]["containers"][0]
        assert epp["image"] == LLM_D_SCHEDULER_IMAGE
        config = yaml.safe_load(rec.named(f"llm-gateway-picker-{zone}-config").inputs["data"]["scorers.yaml"])
        assert {p["type"] for p in config["plugins"]} == registered
        zone_filter = next(p for p in config["plugins"] if p.get("name") == "zone-filter")
        assert zone_filter["parameters"] == {"label": "llm-serving.io/zone", "validValues": [zone], "allowsNoLabel": False}
        profiles = {p["name"]: [ref["pluginRef"] for ref in p["plugins"]] for p in config["schedulingProfiles"]}
        assert profiles == {r: ["zone-filter", f"{r}-filter", "queue-scorer", "kv-cache-utilization-scorer",
                                "max-score-picker"] for r in ("prefill", "decode")}


def test_an_aggregated_stack_renders_as_before(recorded):
    """A default is a promise: no serving keys, no P/D objects, no new flags."""
    from conventions import ENDPOINT_PICKER_IMAGE
    rec = recorded("prod")
    for d in rec.of_type("kubernetes:apps/v1:Deployment"):
        for c in d.inputs["spec"]["template"]["spec"]["containers"]:
            assert not {"--kv-transfer-config", "--speculative-config"} & set(c.get("args", []))
    assert {r.name for r in rec.of_type("kubernetes:apps/v1:Deployment") if r.name.startswith("serving-")} == {
        f"serving-{z}" for z in rec.plan.replicas_by_zone}
    assert rec.named("llm-gateway-picker-deploy").inputs["spec"]["template"]["spec"]["containers"][0]["image"] == \
        ENDPOINT_PICKER_IMAGE


# -- policies on the rendered program -------------------------------------------------------------
PD_POLICIES = {"pd-pair-in-one-zone", "pool-capacity-after-zone-loss", "kv-transfer-on-planned-fabric",
               "speculative-plan-declares-acceptance"}


@pytest.mark.parametrize("link", ["nvlink", "efa"])
def test_the_rendered_disaggregated_stack_passes_every_policy(disaggregated_planner, build_program, link):
    from offline.policy_run import evaluate
    disaggregated_planner(link=link)
    assert evaluate(build_program("prod", DISAGGREGATED), "prod") == []


def test_the_pd_policies_are_mandatory_in_prod_and_staging_and_advise_in_dev():
    from pulumi_policy import EnforcementLevel
    from policies.registry import levels
    for environment, level in (("prod", "mandatory"), ("staging", "mandatory"), ("dev", "advisory")):
        assert {levels(environment)[p] for p in PD_POLICIES} == {EnforcementLevel(level)}


def test_a_pool_too_small_for_a_zone_loss_is_refused(disaggregated_planner, build_program):
    from offline.policy_run import evaluate
    disaggregated_planner(margin=0.5)
    violations = evaluate(build_program("prod", DISAGGREGATED), "prod")
    assert {(v["policy"], v["level"]) for v in violations} == {("pool-capacity-after-zone-loss", "mandatory")}
    assert [v["message"] for v in violations] == [
        "losing us-east-1a leaves the prefill pool 5 of 10 QPS at the SLOs, short of the 10 QPS target",
        "losing us-east-1a leaves the decode pool 5 of 10 QPS at the SLOs, short of the 10 QPS target"]


# -- the offline preview of a disaggregated stack --------------------------------------------------
def test_a_disaggregated_stack_previews_offline_and_validates(capsys, tmp_path):
    """`llmserve preview` and `llmserve render` of a stack with serving.mode: disaggregated (the suite's prod
    stack with the key), planned by sizing.disagg, its manifests valid for Kubernetes and the upstream CRDs."""
    from llmserve.cli import main
    from tests.k8s_schema import CrdMissing, validate
    from tests.test_render import kinds_of_optional_crds_not_fetched
    path = tmp_path / "Pulumi.pd.yaml"
    path.write_text(yaml.safe_dump({"config": with_overrides(stack_config("prod"), DISAGGREGATED)}))
    assert main(["preview", "--stack", "pd", "--config", str(path), "--json"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert preview["violations"] == []
    assert {"serving-prefill-us-east-1a", "serving-decode-us-east-1b"} <= {r["name"] for r in preview["resources"]}
    assert main(["render", "--stack", "pd", "--config", str(path), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    objects = [yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "out" / "manifests").glob("*.yaml"))]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("Deployment", "vllm-prefill-us-east-1a"), ("Deployment", "vllm-decode-us-east-1b"),
            ("NetworkPolicy", "vllm-kv-transfer-us-east-1a"), ("Deployment", "vllm-epp-us-east-1b"),
            ("InferencePool", "vllm")} <= kinds
    not_validated = set()
    for obj in objects:
        try:
            validate(obj, "1.35")      # raises ValidationFailed naming the object and the field
        except CrdMissing:
            not_validated.add(obj["kind"])
    assert not_validated <= kinds_of_optional_crds_not_fetched()


def test_kv_over_nvlink_keeps_the_stock_image(disaggregated_planner, build_program):
    from conventions import VLLM_IMAGE
    disaggregated_planner(link="nvlink")
    rec = build_program("prod", DISAGGREGATED)
    assert {engine_of(d)["image"] for role in ("prefill", "decode") for d in workloads(rec, role).values()} == {VLLM_IMAGE}
