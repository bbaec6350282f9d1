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

import json
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from conventions import LABEL_ROLE, PYTHON_IMAGE
from deployment import accuracy_check, gate_runner
from deployment.api_keys import gate_key
from deployment.jobs import GATE_CONFIG_DIR, GATE_KEY_DIR, WORK, GateSpec
from deployment.serving import HUB_TOKEN_DIR, HUB_TOKEN_KEY

from .options import after, own
from .pods import job_egress, one_shot_pod_spec

LM_EVAL = "lm-eval[api]==0.4.13"        # the API client only: no torch in the gate's image
# LM_EVAL and all it needs, each with its PyPI SHA-256 (how to regenerate: docs/security.md).
REQUIREMENTS = Path(__file__).resolve().parent / "data" / "lm-eval-requirements.txt"
# The served model's tokenizer (transformers, in the requirements; AutoTokenizer needs no torch):
# lm-eval counts each context with it and left-truncates one past max_length - max_gen_toks
# (lm_eval/models/api_models.py, 0.4.13).
TRANSFORMERS = "transformers==5.24.0"
LABELS = {"app.kubernetes.io/name": "lm-eval", "app.kubernetes.io/part-of": "llm-serving",
          LABEL_ROLE: "accuracy-gate"}


def install_command() -> list[str]:
    """The init container's: lm-eval into the shared work folder, with no secret in reach, from
    the hash-pinned requirements (every package and its SHA-256: pip refuses any other file)."""
    return ["pip", "install", "--no-cache-dir", "--quiet", "--require-hashes", "--target", f"{WORK}/py",
            "-r", f"{GATE_CONFIG_DIR}/{REQUIREMENTS.name}"]


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AccuracyGateArgs:
    spec: GateSpec                      # deployment.jobs.gate_job_spec(plan, settings)
    provider: k8s.Provider
    namespace: str
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}
    hub_token: pulumi.Input[str]        # the tokenizer of a gated model comes from the hub


class AccuracyGate(pulumi.ComponentResource):
    """Credentials Secret, the check script and thresholds (ConfigMap), its egress, and the awaited Job.

    `opts.depends_on`: the serving replicas and the gateway (judge the live rollout); every child waits for them."""

    def __init__(self, name: str, args: AccuracyGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:accuracy_gate:AccuracyGate", name, None, own(opts))
        spec, ns = args.spec, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        self.gate = spec.gate
        self.digest = spec.digest
        self.timeout_s = spec.timeout_s
        self.hostname = spec.job.hostname
        # The gate's own key (the gateway meters it at the gate's share), never a tenant's.
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials", metadata={"namespace": ns, "labels": LABELS}, type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_keys).apply(gate_key),
                         HUB_TOKEN_KEY: pulumi.Output.secret(args.hub_token)},
            opts=child)
        self.config = k8s.core.v1.ConfigMap(
            f"{name}-check", metadata={"namespace": ns, "labels": LABELS},
            data={"gate.json": json.dumps(self.gate, indent=2),
                  "accuracy_check.py": Path(accuracy_check.__file__).read_text(),
                  "gate_runner.py": Path(gate_runner.__file__).read_text(),
                  "gate-run.json": json.dumps(spec.run, indent=2),
                  REQUIREMENTS.name: REQUIREMENTS.read_text()},
            opts=child)
        # HTTPS out: the package index (init container) and the gateway's public name (the gate).
        for key, spec in job_egress(LABELS, "accuracy-gate-egress").items():
            k8s.networking.v1.NetworkPolicy(f"{name}-egress", metadata={"name": key, "namespace": ns},
                                            spec=spec, opts=child)
        self.job = k8s.batch.v1.Job(
            f"{name}-run",
            metadata={"namespace": ns, "labels": LABELS, "annotations": {"pulumi.com/replaceUnready": "true"}},
            spec={
                "backoffLimit": 0,
                "activeDeadlineSeconds": self.timeout_s,
                "template": {
                    "metadata": {"labels": LABELS, "annotations": {"llm-serving.io/rollout-digest": self.digest}},
                    "spec": self._pod_spec(),
                },
            },
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                custom_timeouts=pulumi.CustomTimeouts(create=f"{self.timeout_s}s", update=f"{self.timeout_s}s"))))
        self.register_outputs({"digest": self.digest, "tasks": list(self.gate["tasks"]),
                               "maxDrop": self.gate["max_drop"]})

    def _pod_spec(self) -> dict:
        """An init container installs lm-eval with no secret in reach; the gate container, which
        holds the key, installs nothing and runs only what is on the shared work volume."""
        work = [{"name": "work", "mountPath": WORK}]
        install = {
            "name": "install", "image": PYTHON_IMAGE, "command": install_command(),
            "env": [{"name": "HOME", "value": WORK}, {"name": "PIP_DISABLE_PIP_VERSION_CHECK", "value": "1"}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "volumeMounts": [{"name": "gate", "mountPath": GATE_CONFIG_DIR, "readOnly": True}, *work],
        }
        gate = {
            "name": "lm-eval", "image": PYTHON_IMAGE,
            # No shell: the runner reads every value from gate-run.json (deployment/gate_runner.py).
            "command": ["python", f"{GATE_CONFIG_DIR}/gate_runner.py", f"{GATE_CONFIG_DIR}/gate-run.json"],
            # The tokenizer of a gated model: huggingface_hub reads the token from HF_TOKEN_PATH.
            "env": [{"name": "HOME", "value": WORK}, {"name": "HF_HOME", "value": f"{WORK}/hf"},
                    {"name": "HF_TOKEN_PATH", "value": f"{HUB_TOKEN_DIR}/{HUB_TOKEN_KEY}"}],
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "gate", "mountPath": GATE_CONFIG_DIR, "readOnly": True},
                             {"name": "gate-key", "mountPath": GATE_KEY_DIR, "readOnly": True},
                             {"name": "hub-token", "mountPath": HUB_TOKEN_DIR, "readOnly": True}, *work],
        }
        secret = self.credentials.metadata.apply(lambda m: m["name"])
        return one_shot_pod_spec(gate, [
            {"name": "gate", "configMap": {"name": self.config.metadata.apply(lambda m: m["name"])}},
            # Readable by the pod's group only (fsGroup), mounted in the gate container alone.
            {"name": "gate-key", "secret": {"secretName": secret, "defaultMode": 0o440,
                                            "items": [{"key": "api-key", "path": "api-key"}]}},
            {"name": "hub-token", "secret": {"secretName": secret, "defaultMode": 0o440,
                                             "items": [{"key": HUB_TOKEN_KEY, "path": HUB_TOKEN_KEY}]}},
            {"name": "work", "emptyDir": {}},
        ], self.hostname, init_containers=(install,))
