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
from conventions import GUIDELLM_IMAGE
from settings import StackSettings
from settings.schema import LoadTestSettings
from sizing.workload import Workload
from sizing.planner import Plan

from .api_keys import client_key
from .cluster import SYSTEM_ROLE_LABEL
from .gateway import GATEWAY_CLUSTER_IP
from .options import after, own
from .serving import HUB_TOKEN_DIR, HUB_TOKEN_KEY, egress_policies, served_checkpoint
from .pod_security import SCRATCH_MOUNT, SCRATCH_VOLUME, container_security, pod_security

# GuideLLM 0.8.1 writes report schema version 2, the one `llmserve loadtest-report` reads.
RESULTS_PATH = "/results"
SCENARIO_PATH = "/config"
SEED = 42
SETUP_MARGIN_S = 1800        # image pull, tokenizer download, warm-up, between-step drain
LABELS = {"app.kubernetes.io/name": "guidellm", "app.kubernetes.io/part-of": "llm-serving",
          "llm-serving.io/role": "load-test"}


def one_shot_pod_spec(container: dict, volumes: list[dict], hostname: str,
                      init_containers: tuple[dict, ...] = ()) -> dict:
    """The pod of a run-once Job (load test, accuracy gate): on the system nodes, non-root with a
    read-only root filesystem (/tmp is an emptyDir), no service-account token (it never calls the
    API server), never restarted in place (a failure is read, not retried over its own results).
    The gateway's public hostname resolves, inside the pod only, to the gateway's in-cluster
    address: the client sends that name as Host and SNI (so TLS, the route and auth are the real
    ones) without waiting for public DNS or going out through the load balancer."""
    def hardened(c: dict) -> dict:
        return {**c, "securityContext": container_security(),
                "volumeMounts": [*c.get("volumeMounts", []), SCRATCH_MOUNT]}

    spec = {"restartPolicy": "Never", "nodeSelector": dict(SYSTEM_ROLE_LABEL), **pod_security(),
            "hostAliases": [{"ip": GATEWAY_CLUSTER_IP, "hostnames": [hostname]}],
            "containers": [hardened(container)], "volumes": [*volumes, SCRATCH_VOLUME]}
    if init_containers:
        spec["initContainers"] = [hardened(c) for c in init_containers]
    return spec


def job_egress(labels: dict[str, str], name: str) -> dict[str, dict]:
    """A Job's egress: HTTPS to public addresses (the model hub, a package index) and the gateway
    in the cluster: its Service address, and its Envoy pods, which listen on the Service port plus
    10000 (Envoy Gateway shifts privileged ports so the proxy needs no capability)."""
    policies = egress_policies(labels, name)
    gateway_pods = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": conventions.GATEWAY_CONTROLLER_NAMESPACE}}}
    policies[name]["egress"].append({"to": [{"ipBlock": {"cidr": f"{GATEWAY_CLUSTER_IP}/32"}}, gateway_pods],
                                     "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 10443}]})
    return policies


# -- figures derived from the plan (pure) ----------------------------------------------------
def loadtest_rates(plan: Plan, steps: int) -> list[float]:
    """The planned QPS first, then `steps` evenly spaced rates up to the sized capacity (an
    open-loop workload: the settings refuse a load test of a closed-loop one)."""
    planned = float(plan.request.workload.qps)
    sweep = [round(plan.capacity_qps * k / steps, 2) for k in range(1, steps + 1)]
    return [planned] + [r for r in sweep if abs(r - planned) > 0.01 * planned]


def gateway_url(hostname: str) -> str:
    """The public hostname (resolved in the pod to the gateway's in-cluster address, see
    one_shot_pod_spec): the jobs go through TLS, auth, quotas and routing like a client."""
    return f"https://{hostname}"


@dataclass(frozen=True)
class LoadTestRun:
    """What the GuideLLM run is made of, and nothing else from the stack."""
    stack: str
    load_test: LoadTestSettings        # steps, arrivals, results volume
    hostname: str                      # the gateway's public name
    key_name: str                      # the API key it sends: the first of gateway.apiKeyNames, which the
                                       # gateway meters at the fleet's capacity while the load test is on
    checkpoint: str                    # the tokenizer: what vLLM serves

    @classmethod
    def for_stack(cls, plan: Plan, settings: StackSettings) -> "LoadTestRun":
        return cls(stack=settings.stack, load_test=settings.loadTest, hostname=settings.gateway.hostname,
                   key_name=settings.gateway.apiKeyNames[0], checkpoint=served_checkpoint(plan, settings))


def scenario(plan: Plan, run: LoadTestRun) -> dict:
    """The GuideLLM run, in its scenario format (the `config` a report echoes back)."""
    w, lt = plan.request.workload, run.load_test
    spec = {
        "backend": {"kind": "openai_http", "target": gateway_url(run.hostname), "model": plan.request.model,
                    "request_format": "/v1/completions"},
        "profile": {"kind": lt.arrivals, "rate": loadtest_rates(plan, lt.sweepSteps)},
        "constraints": [{"kind": "max_duration", "seconds": lt.stepSeconds}],
        "tokenizer": {"kind": "huggingface_auto", "model": run.checkpoint},
        "data": [synthetic_data(w)],
        "seed": {"kind": "static", "value": SEED},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    spec["outputs"] = [{"kind": "json", "path": f"{RESULTS_PATH}/guidellm-{run.stack}-{digest}.json"}]
    labels = {"stack": run.stack, "plan-qps": f"{w.qps:g}", "plan-capacity-qps": f"{plan.capacity_qps:.2f}"}
    return {"metadata": {"labels": labels}, "spec": spec}


def synthetic_data(w: Workload) -> dict:
    """The plan's lengths as GuideLLM 0.8.1's synthetic text options (guidellm/schemas/data/
    deserializers/synthetic.py SyntheticTextDataArgs): a mean, and for a distribution its standard
    deviation, min and max per field, which GuideLLM draws as a normal clipped to [min, max]
    (guidellm/utils/random.py IntegerRangeSampler): the plan's means, spread and range, not its
    shape. A shared prefix is GuideLLM's own prefix (prefix_tokens, one prefix for all requests),
    sent before the prompt, so the prompt's part excludes it."""
    prefix = min(w.shared_prefix_tokens, w.input_tokens - 1)
    data = {"kind": "synthetic_text", "prompt_tokens": w.input_tokens - prefix, "output_tokens": w.output_tokens}
    if w.lengths is not None and w.lengths.form != "fixed":
        for field, name, offset in (("input", "prompt_tokens", prefix), ("output", "output_tokens", 0)):
            mean, std, low, high = w.lengths.spread(field)
            data[name] = max(1, round(mean) - offset)
            if std >= 1:       # GuideLLM takes a standard deviation above 0 only
                data[f"{name}_stdev"] = round(std)
            data[f"{name}_min"], data[f"{name}_max"] = max(1, low - offset), max(1, high - offset)
    if prefix > 0:
        data["prefix_tokens"], data["prefix_count"] = prefix, 1
    return data


def run_deadline_s(plan: Plan, lt: LoadTestSettings) -> int:
    return len(loadtest_rates(plan, lt.sweepSteps)) * lt.stepSeconds + SETUP_MARGIN_S


def guidellm_container(secret_ref: dict) -> dict:
    """The GuideLLM container: the API key from the credentials Secret, the hub token as a file."""
    return {
        "name": "guidellm", "image": GUIDELLM_IMAGE,
        "command": ["guidellm", "run", "--scenario", f"{SCENARIO_PATH}/scenario.json",
                    "--disable-console-interactive"],
        "env": [
            # GuideLLM's scenario settings read nested environment variables (GUIDELLM__ + path).
            {"name": "GUIDELLM__SPEC__BACKEND__API_KEY",
             "valueFrom": {"secretKeyRef": {**secret_ref, "key": "api-key"}}},
            # The tokenizer's hub token as a file (huggingface_hub reads HF_TOKEN_PATH);
            # GuideLLM reads its API key only from its settings, so that one stays in the env.
            {"name": "HF_TOKEN_PATH", "value": f"{HUB_TOKEN_DIR}/{HUB_TOKEN_KEY}"},
            {"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf"},
        ],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "volumeMounts": [{"name": "scenario", "mountPath": SCENARIO_PATH, "readOnly": True},
                         {"name": "results", "mountPath": RESULTS_PATH},
                         {"name": "hub-token", "mountPath": HUB_TOKEN_DIR, "readOnly": True}],
    }


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadTestArgs:
    plan: Plan
    run: LoadTestRun                    # LoadTestRun.for_stack(plan, settings)
    provider: k8s.Provider
    namespace: str                      # the serving namespace (its policies restrict ingress only)
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}
    hub_token: pulumi.Input[str]        # the tokenizer of a gated model comes from the hub


class LoadTest(pulumi.ComponentResource):
    """Credentials Secret, scenario ConfigMap, results volume and the GuideLLM Job.

    `opts.depends_on`: the serving replicas and the gateway (test only what is there); every child waits for them."""

    def __init__(self, name: str, args: LoadTestArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:loadtest:LoadTest", name, None, own(opts))
        plan, run, ns = args.plan, args.run, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        self.scenario = scenario(plan, run)
        self.report_path = self.scenario["spec"]["outputs"][0]["path"]
        key_name = run.key_name
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials", metadata={"namespace": ns, "labels": LABELS}, type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_keys).apply(lambda t: client_key(t, key_name)),
                         HUB_TOKEN_KEY: pulumi.Output.secret(args.hub_token)},
            opts=child)
        self.config = k8s.core.v1.ConfigMap(
            f"{name}-scenario", metadata={"namespace": ns, "labels": LABELS},
            data={"scenario.json": json.dumps(self.scenario, indent=2)}, opts=child)
        self.results = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-results", metadata={"namespace": ns, "labels": LABELS},
            spec={"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": f"{run.load_test.storageGi}Gi"}}},
            opts=child)
        # HTTPS out: the gateway's public name and the model hub (the tokenizer).
        for key, spec in job_egress(LABELS, "load-test-egress").items():
            k8s.networking.v1.NetworkPolicy(f"{name}-egress", metadata={"name": key, "namespace": ns},
                                            spec=spec, opts=child)
        container = guidellm_container({"name": self.credentials.metadata.apply(lambda m: m["name"])})
        self.job = k8s.batch.v1.Job(
            f"{name}-run",
            metadata={"namespace": ns, "labels": LABELS, "annotations": {
                "pulumi.com/skipAwait": "true",
                "llm-serving.io/report-path": self.report_path}},
            spec={
                "backoffLimit": 0,            # a failed load test is read, not retried over the results
                "activeDeadlineSeconds": run_deadline_s(plan, run.load_test),
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": one_shot_pod_spec(container, [
                        {"name": "scenario", "configMap": {"name": self.config.metadata.apply(lambda m: m["name"])}},
                        {"name": "results", "persistentVolumeClaim": {
                            "claimName": self.results.metadata.apply(lambda m: m["name"])}},
                        {"name": "hub-token", "secret": {
                            "secretName": self.credentials.metadata.apply(lambda m: m["name"]),
                            "items": [{"key": HUB_TOKEN_KEY, "path": HUB_TOKEN_KEY}], "defaultMode": 0o440}},
                    ], run.hostname),
                },
            },
            opts=child)
        self.register_outputs({"reportPath": self.report_path, "rates": self.scenario["spec"]["profile"]["rate"]})
