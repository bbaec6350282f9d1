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

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import GUIDELLM_IMAGE, LABEL_ROLE
from deployment.api_keys import client_key
from deployment.jobs import CLIENT_PROCESSES, RESULTS_PATH, SCENARIO_PATH, LoadTestSpec
from deployment.serving import HUB_TOKEN_DIR, HUB_TOKEN_KEY

from .options import after, own
from .pods import job_egress, one_shot_pod_spec

LABELS = {"app.kubernetes.io/name": "guidellm", "app.kubernetes.io/part-of": "llm-serving",
          LABEL_ROLE: "load-test"}


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
            # One worker process, so the arrivals are Poisson (deployment.jobs.CLIENT_PROCESSES; GuideLLM's
            # settings read GUIDELLM__ variables, guidellm 0.8.1 settings.py L75-76 and L103).
            {"name": "GUIDELLM__MAX_WORKER_PROCESSES", "value": str(CLIENT_PROCESSES)},
        ],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "volumeMounts": [{"name": "scenario", "mountPath": SCENARIO_PATH, "readOnly": True},
                         {"name": "results", "mountPath": RESULTS_PATH},
                         {"name": "hub-token", "mountPath": HUB_TOKEN_DIR, "readOnly": True}],
    }


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadTestArgs:
    spec: LoadTestSpec                  # deployment.jobs.load_test_spec(plan, settings)
    provider: k8s.Provider
    namespace: str                      # the serving namespace (its policies restrict ingress only)
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}
    hub_token: pulumi.Input[str]        # the tokenizer of a gated model comes from the hub


class LoadTest(pulumi.ComponentResource):
    """Credentials Secret, scenario ConfigMap, results volume and the GuideLLM Job.

    `opts.depends_on`: the serving replicas and the gateway (test only what is there); every child waits for them."""

    def __init__(self, name: str, args: LoadTestArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:loadtest:LoadTest", name, None, own(opts))
        run, ns = args.spec.run, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        self.scenario = args.spec.scenario
        self.report_path = args.spec.report_path
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
                "activeDeadlineSeconds": args.spec.deadline_s,
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
