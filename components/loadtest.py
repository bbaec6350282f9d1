"""The load test: GuideLLM as a Kubernetes Job against the gateway, measuring what the plan promised.

One GuideLLM run (the pinned image below) sends Poisson traffic (what the plan assumes; or
evenly spaced, `loadTest.arrivals: constant`) of the plan's prompt and output lengths through
the gateway with an API key: first a step at the planned QPS, then a sweep of evenly spaced
rates up to the sized capacity of all replicas. Each step lasts `loadTest.stepSeconds`. The
JSON report lands on a volume; `llmserve loadtest-report` reads it and says whether the plan holds.

Off by default (`loadTest.enabled`): it sends real traffic, up to the sized capacity. The Job is
not awaited (`pulumi.com/skipAwait`): a sweep outlasts any sensible `pulumi up`. A changed plan
changes the scenario, which replaces the ConfigMap and so the Job: the test runs again.

Both load generators used here (GuideLLM, lm-eval) send `Authorization: Bearer <key>`, the
header the gateway's API-key filter reads.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

import conventions
from settings import StackSettings
from sizing.planner import Plan

from .cluster import SYSTEM_ROLE_LABEL
from .gateway import GATEWAY_CLUSTER_IP

# GuideLLM 0.8.1 writes report schema version 2, the one `llmserve loadtest-report` reads.
GUIDELLM_IMAGE = conventions.GUIDELLM_IMAGE
RESULTS_PATH = "/results"
SCENARIO_PATH = "/config"
SEED = 42
SETUP_MARGIN_S = 1800        # image pull, tokenizer download, warm-up, between-step drain
LABELS = {"app.kubernetes.io/name": "guidellm", "app.kubernetes.io/part-of": "llm-serving",
          "llm-serving.io/role": "load-test"}
NON_ROOT = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"}}
NO_PRIVILEGES = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def one_shot_pod_spec(container: dict, volumes: list[dict], hostname: str) -> dict:
    """The pod of a run-once Job (load test, accuracy gate): on the system nodes, non-root,
    never restarted in place (a failure is read, not retried over its own results). The
    gateway's public hostname resolves, inside the pod only, to the gateway's in-cluster
    address: the client sends that name as Host and SNI (so TLS, the route and auth are the
    real ones) without waiting for public DNS or going out through the load balancer."""
    return {"restartPolicy": "Never", "nodeSelector": dict(SYSTEM_ROLE_LABEL), "securityContext": NON_ROOT,
            "hostAliases": [{"ip": GATEWAY_CLUSTER_IP, "hostnames": [hostname]}],
            "containers": [container], "volumes": volumes}


# -- figures derived from the plan (pure) ----------------------------------------------------
def loadtest_rates(plan: Plan, steps: int) -> list[float]:
    """The planned QPS first, then `steps` evenly spaced rates up to the sized capacity."""
    if plan.request.workload.qps is None:
        raise ValueError("loadTest: the workload is closed-loop (concurrency); the rate sweep needs workload.qps")
    planned = float(plan.request.workload.qps)
    sweep = [round(plan.capacity_qps * k / steps, 2) for k in range(1, steps + 1)]
    return [planned] + [r for r in sweep if abs(r - planned) > 0.01 * planned]


def gateway_url(settings: StackSettings) -> str:
    """The public hostname (resolved in the pod to the gateway's in-cluster address, see
    one_shot_pod_spec): the test goes through TLS, auth, quotas and routing like a client."""
    return f"https://{settings.gateway.hostname}"


def client_key_name(settings: StackSettings) -> str:
    """The jobs use the first configured API key. While the load test is on, the gateway meters
    that key at the fleet's capacity (gateway.load_test_rate_limit) so the sweep is not cut by
    the key's quota; the accuracy gate's few requests fit in any quota."""
    return settings.gateway.apiKeyNames[0]


def client_key(api_keys_json: str, name: str) -> str:
    """The key as a client sends it: the apiKeys secret maps names to keys; clients add "Bearer "."""
    value = str(json.loads(api_keys_json)[name])
    return value[len("Bearer "):] if value.startswith("Bearer ") else value


def scenario(plan: Plan, settings: StackSettings) -> dict:
    """The GuideLLM run, in its scenario format (the `config` a report echoes back)."""
    w, lt = plan.request.workload, settings.loadTest
    spec = {
        "backend": {"kind": "openai_http", "target": gateway_url(settings), "model": plan.request.model,
                    "request_format": "/v1/completions"},
        "profile": {"kind": lt.arrivals, "rate": loadtest_rates(plan, lt.sweepSteps)},
        "constraints": [{"kind": "max_duration", "seconds": lt.stepSeconds}],
        "tokenizer": {"kind": "huggingface_auto", "model": plan.engine_args["checkpoint"]},
        "data": [{"kind": "synthetic_text", "prompt_tokens": w.input_tokens, "output_tokens": w.output_tokens}],
        "seed": {"kind": "static", "value": SEED},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    spec["outputs"] = [{"kind": "json", "path": f"{RESULTS_PATH}/guidellm-{settings.stack}-{digest}.json"}]
    labels = {"stack": settings.stack, "plan-qps": f"{w.qps:g}", "plan-capacity-qps": f"{plan.capacity_qps:.2f}"}
    return {"metadata": {"labels": labels}, "spec": spec}


def run_deadline_s(plan: Plan, settings: StackSettings) -> int:
    lt = settings.loadTest
    return len(loadtest_rates(plan, lt.sweepSteps)) * lt.stepSeconds + SETUP_MARGIN_S


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadTestArgs:
    plan: Plan
    settings: StackSettings
    provider: k8s.Provider
    namespace: str                      # the serving namespace (its policies restrict ingress only)
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}
    hub_token: pulumi.Input[str]        # the tokenizer of a gated model comes from the hub
    depends_on: tuple = ()              # the gateway: test only what is there


class LoadTest(pulumi.ComponentResource):
    """Credentials Secret, scenario ConfigMap, results volume and the GuideLLM Job."""

    def __init__(self, name: str, args: LoadTestArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:loadtest:LoadTest", name, None, opts)
        plan, settings, ns = args.plan, args.settings, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.scenario = scenario(plan, settings)
        self.report_path = self.scenario["spec"]["outputs"][0]["path"]
        key_name = client_key_name(settings)
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials", metadata={"namespace": ns, "labels": LABELS}, type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_keys).apply(lambda t: client_key(t, key_name)),
                         "hub-token": pulumi.Output.secret(args.hub_token)},
            opts=child)
        self.config = k8s.core.v1.ConfigMap(
            f"{name}-scenario", metadata={"namespace": ns, "labels": LABELS},
            data={"scenario.json": json.dumps(self.scenario, indent=2)}, opts=child)
        self.results = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-results", metadata={"namespace": ns, "labels": LABELS},
            spec={"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": f"{settings.loadTest.storageGi}Gi"}}},
            opts=child)
        secret_ref = {"name": self.credentials.metadata.apply(lambda m: m["name"])}
        container = {
            "name": "guidellm", "image": GUIDELLM_IMAGE,
            "command": ["guidellm", "run", "--scenario", f"{SCENARIO_PATH}/scenario.json",
                        "--disable-console-interactive"],
            "env": [
                # GuideLLM's scenario settings read nested environment variables (GUIDELLM__ + path).
                {"name": "GUIDELLM__SPEC__BACKEND__API_KEY",
                 "valueFrom": {"secretKeyRef": {**secret_ref, "key": "api-key"}}},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {**secret_ref, "key": "hub-token"}}},
                {"name": "HOME", "value": "/tmp"},
            ],
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
            "securityContext": NO_PRIVILEGES,
            "volumeMounts": [{"name": "scenario", "mountPath": SCENARIO_PATH, "readOnly": True},
                             {"name": "results", "mountPath": RESULTS_PATH}],
        }
        self.job = k8s.batch.v1.Job(
            f"{name}-run",
            metadata={"namespace": ns, "labels": LABELS, "annotations": {
                "pulumi.com/skipAwait": "true",
                "llm-serving.io/report-path": self.report_path}},
            spec={
                "backoffLimit": 0,            # a failed load test is read, not retried over the results
                "activeDeadlineSeconds": run_deadline_s(plan, settings),
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": one_shot_pod_spec(container, [
                        {"name": "scenario", "configMap": {"name": self.config.metadata.apply(lambda m: m["name"])}},
                        {"name": "results", "persistentVolumeClaim": {
                            "claimName": self.results.metadata.apply(lambda m: m["name"])}},
                    ], settings.gateway.hostname),
                },
            },
            opts=child)
        self.register_outputs({"reportPath": self.report_path, "rates": self.scenario["spec"]["profile"]["rate"]})
