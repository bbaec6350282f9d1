"""The FP8 accuracy gate: lm-eval against the deployed endpoint, judged against the BF16 baseline.

A Job runs lm-eval (pinned, on a pinned Python image) through the gateway on the configured task
subset (`accuracyGate.tasks`), then `accuracy_check.py` compares each score with its BF16
baseline and exits 1 when one falls more than `accuracyGate.maxDrop` below it.

How a failed gate marks the rollout unhealthy: the Job is awaited by Pulumi (no skipAwait), and
the Kubernetes provider fails a Job resource as soon as its `Failed` condition is true
(`backoffLimit: 0`, so the first failed check fails the Job). `pulumi up` then exits non-zero
with the Job as the failed resource, and the verdict table is the pod's termination message
(`kubectl describe pod`). The Job depends on the serving replicas and the gateway, so it runs
against the rollout that was just applied. `pulumi.com/replaceUnready` makes the next `pulumi up`
run a failed gate again instead of waiting on it. The pod template carries a digest of what
the gate judges (engine arguments, serving image, tasks, baselines), so a new rollout re-runs it.

On by default in staging and prod (`settings.accuracy_gate_enabled`).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

import conventions
from settings import StackSettings
from sizing.planner import Plan

from . import accuracy_check
from .loadtest import NO_PRIVILEGES, client_key, client_key_name, gateway_url, one_shot_pod_spec
from .serving import VLLM_IMAGE

PYTHON_IMAGE = conventions.PYTHON_IMAGE
LM_EVAL = "lm-eval[api]==0.4.13"        # the API client only: no torch in the gate's image
# The gate waits this long for lm-eval (the Job's deadline and Pulumi's await): the default
# tasks are about 13,000 generations, an hour or two at the planned concurrency.
GATE_TIMEOUT_S = 4 * 3600
REQUEST_TIMEOUT_S = 600
WORK = "/work"
LABELS = {"app.kubernetes.io/name": "lm-eval", "app.kubernetes.io/part-of": "llm-serving",
          "llm-serving.io/role": "accuracy-gate"}


# -- what the gate runs (pure) ---------------------------------------------------------------
def gate_spec(settings: StackSettings) -> dict:
    """The tasks, their metrics and baselines, and the allowed drop (accuracy_check.py's input)."""
    g = settings.accuracyGate
    unknown = [t for t in g.tasks if t not in accuracy_check.METRICS]
    if unknown:
        raise ValueError(f"accuracyGate.tasks: no known metric for {', '.join(unknown)}; "
                         f"supported: {', '.join(accuracy_check.METRICS)}")
    return {"max_drop": g.maxDrop,
            "tasks": {t: {"metric": accuracy_check.METRICS[t], "baseline": g.baseline[t]} for t in g.tasks}}


def concurrency(plan: Plan) -> int:
    """Requests in flight: what one replica holds at the planned load, so the gate never
    loads the service beyond what the plan already carries."""
    n = plan.real.in_flight
    return max(1, math.ceil(n)) if math.isfinite(n) else 1


def lm_eval_command(plan: Plan, settings: StackSettings) -> list[str]:
    model_args = ",".join([
        f"model={plan.request.model}",
        f"base_url={gateway_url(settings)}/v1/completions",
        f"num_concurrent={concurrency(plan)}",
        "max_retries=3",
        f"timeout={REQUEST_TIMEOUT_S}",
        "tokenized_requests=False",      # the server tokenizes; the gate needs no tokenizer
        "tokenizer_backend=none",
    ])
    return ["lm_eval", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(settings.accuracyGate.tasks), "--output_path", f"{WORK}/results"]


def rollout_digest(plan: Plan, settings: StackSettings) -> str:
    """Changes whenever what the gate judges changes, so the Job is replaced and runs again."""
    judged = {"engine": plan.engine_args, "image": VLLM_IMAGE, "gate": gate_spec(settings),
              "command": lm_eval_command(plan, settings)}
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:16]


# Before judging: wait until the gateway answers with its real certificate (issued by
# cert-manager a few minutes after `pulumi up` creates it) and the API key is accepted.
READY_WAIT_S = 1800
WAIT_FOR_GATEWAY = """\
import os, sys, time, urllib.request
url, deadline = sys.argv[1] + "/v1/models", time.time() + float(sys.argv[2])
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
while True:
    try:
        urllib.request.urlopen(request, timeout=10).read()
        break
    except Exception as exc:
        if time.time() > deadline:
            sys.exit("gateway not ready at " + url + ": " + str(exc))
        time.sleep(10)
"""


def shell_script(plan: Plan, settings: StackSettings) -> str:
    quoted = " ".join(f"'{a}'" for a in lm_eval_command(plan, settings))
    return "\n".join([
        "set -eu",
        f"python /gate/wait_for_gateway.py '{gateway_url(settings)}' {READY_WAIT_S}",
        f"pip install --no-cache-dir --quiet --target {WORK}/py '{LM_EVAL}'",
        f"export PYTHONPATH={WORK}/py PATH={WORK}/py/bin:$PATH",
        quoted,
        f"python /gate/accuracy_check.py /gate/gate.json {WORK}/results",
    ])


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AccuracyGateArgs:
    plan: Plan
    settings: StackSettings
    provider: k8s.Provider
    namespace: str
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}
    depends_on: tuple = ()              # the serving replicas and the gateway: judge the live rollout


class AccuracyGate(pulumi.ComponentResource):
    """Credentials Secret, the check script and thresholds (ConfigMap), and the awaited Job."""

    def __init__(self, name: str, args: AccuracyGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:accuracy_gate:AccuracyGate", name, None, opts)
        plan, settings, ns = args.plan, args.settings, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.gate = gate_spec(settings)
        self.digest = rollout_digest(plan, settings)
        key_name = client_key_name(settings)
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials", metadata={"namespace": ns, "labels": LABELS}, type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_keys).apply(lambda t: client_key(t, key_name))},
            opts=child)
        self.config = k8s.core.v1.ConfigMap(
            f"{name}-check", metadata={"namespace": ns, "labels": LABELS},
            data={"gate.json": json.dumps(self.gate, indent=2),
                  "accuracy_check.py": Path(accuracy_check.__file__).read_text(),
                  "wait_for_gateway.py": WAIT_FOR_GATEWAY,
                  "run.sh": shell_script(plan, settings)},
            opts=child)
        container = {
            "name": "lm-eval", "image": PYTHON_IMAGE,
            "command": ["sh", "/gate/run.sh"],
            "env": [{"name": "OPENAI_API_KEY",        # lm-eval's local-completions sends it as Bearer
                     "valueFrom": {"secretKeyRef": {"name": self.credentials.metadata.apply(lambda m: m["name"]),
                                                    "key": "api-key"}}},
                    {"name": "HOME", "value": WORK}, {"name": "HF_HOME", "value": f"{WORK}/hf"}],
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
            "securityContext": NO_PRIVILEGES,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True},
                             {"name": "work", "mountPath": WORK}],
        }
        self.job = k8s.batch.v1.Job(
            f"{name}-run",
            metadata={"namespace": ns, "labels": LABELS, "annotations": {"pulumi.com/replaceUnready": "true"}},
            spec={
                "backoffLimit": 0,
                "activeDeadlineSeconds": GATE_TIMEOUT_S,
                "template": {
                    "metadata": {"labels": LABELS, "annotations": {"llm-serving.io/rollout-digest": self.digest}},
                    "spec": one_shot_pod_spec(container, [
                        {"name": "gate", "configMap": {"name": self.config.metadata.apply(lambda m: m["name"])}},
                        {"name": "work", "emptyDir": {}},
                    ], settings.gateway.hostname),
                },
            },
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                custom_timeouts=pulumi.CustomTimeouts(create=f"{GATE_TIMEOUT_S}s", update=f"{GATE_TIMEOUT_S}s"))))
        self.register_outputs({"digest": self.digest, "tasks": list(self.gate["tasks"]),
                               "maxDrop": self.gate["max_drop"]})
