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

from conventions import PYTHON_IMAGE, VLLM_IMAGE
from settings import StackSettings
from settings.schema import ACCURACY_TASK_METRICS, AccuracyGateSettings
from sizing.planner import Plan

from . import accuracy_check
from .api_keys import gate_key
from .gateway import gate_rate_limit, proxy_replicas
from .loadtest import gateway_url, job_egress, one_shot_pod_spec
from .options import after, own
from .serving import served_checkpoint

LM_EVAL = "lm-eval[api]==0.4.13"        # the API client only: no torch in the gate's image
# LM_EVAL and all it needs, each with its PyPI SHA-256 (how to regenerate: docs/security.md).
REQUIREMENTS = Path(__file__).resolve().parent / "data" / "lm-eval-requirements.txt"
# The served model's tokenizer (transformers, in the requirements; AutoTokenizer needs no torch):
# lm-eval counts each context with it and left-truncates one past max_length - max_gen_toks
# (lm_eval/models/api_models.py, 0.4.13).
TRANSFORMERS = "transformers==5.24.0"
# The gate waits this long at least for lm-eval (the Job's deadline and Pulumi's await); more
# when its quota needs longer for the tasks' questions (`gate_timeout_s`).
GATE_TIMEOUT_S = 4 * 3600
TASK_QUESTIONS = {"gsm8k": 1319, "gsm8k_cot": 1319, "mmlu_pro": 12032}   # the tasks' test splits
SETUP_MARGIN_S = 1800          # image pull, lm-eval install, dataset download
REQUEST_TIMEOUT_S = 600
WORK = "/work"
KEY_DIR = "/var/run/secrets/accuracy-gate"    # the gate's key as a file (the credentials Secret), not an env var
KEY_FILE = f"{KEY_DIR}/api-key"
LABELS = {"app.kubernetes.io/name": "lm-eval", "app.kubernetes.io/part-of": "llm-serving",
          "llm-serving.io/role": "accuracy-gate"}


# -- what the gate runs (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class GateJob:
    """What the gate's Job is made of, and nothing else from the stack."""
    gate: AccuracyGateSettings         # tasks, baselines, maxDrop
    hostname: str                      # the gateway's public name: the gate goes through it like a client
    rate_limit_share: float            # gateway.rateLimitShare: the gate's quota is a part of it
    zones: int                         # the serving zones: how many proxies split the quota
    checkpoint: str                    # what vLLM serves (judged: a new one re-runs the gate)

    @classmethod
    def for_stack(cls, plan: Plan, settings: StackSettings) -> "GateJob":
        return cls(gate=settings.accuracyGate, hostname=settings.gateway.hostname,
                   rate_limit_share=settings.gateway.rateLimitShare, zones=len(settings.zones),
                   checkpoint=served_checkpoint(plan, settings))


def gate_spec(g: AccuracyGateSettings) -> dict:
    """The tasks, their metrics and baselines, and the allowed drop (accuracy_check.py's input)."""
    # tasks are known and have baselines (settings check both)
    return {"max_drop": g.maxDrop,
            "tasks": {t: {"metric": ACCURACY_TASK_METRICS[t], "baseline": g.baseline[t]} for t in g.tasks}}


def concurrency(plan: Plan, job: GateJob) -> int:
    """Requests in flight: what the gate's own quota carries at the plan's latency (Little's law on
    one proxy's bucket, since its connections may all reach one), never more than one replica
    holds at the planned load."""
    n = plan.real.in_flight
    if not (math.isfinite(n) and plan.load_per_replica_qps > 0):
        return 1
    limit = gate_rate_limit(plan, job.rate_limit_share, proxy_replicas(job.zones))
    request_s = n / plan.load_per_replica_qps
    return max(1, min(math.ceil(n), math.floor(limit.requests / limit.unit_s * request_s)))


def gate_timeout_s(plan: Plan, job: GateJob) -> int:
    """Long enough for every question at the gate's own quota (its buckets on all proxies: the load
    balancer spreads its connections), with a quarter spare for retries; never under GATE_TIMEOUT_S."""
    proxies = proxy_replicas(job.zones)
    limit = gate_rate_limit(plan, job.rate_limit_share, proxies)
    questions = sum(TASK_QUESTIONS[t] for t in job.gate.tasks)
    quota_qps = limit.requests * proxies / limit.unit_s
    return max(GATE_TIMEOUT_S, math.ceil(1.25 * questions / quota_qps) + SETUP_MARGIN_S + READY_WAIT_S)


def lm_eval_command(plan: Plan, job: GateJob) -> list[str]:
    model_args = ",".join([
        f"model={plan.request.model}",
        f"base_url={gateway_url(job.hostname)}/v1/completions",
        f"num_concurrent={concurrency(plan, job)}",
        "max_retries=3",
        f"timeout={REQUEST_TIMEOUT_S}",
        "tokenized_requests=False",      # the server tokenizes the text it is sent
        # The served model's tokenizer and context: lm-eval truncates an over-long few-shot context
        # (max_length - max_gen_toks) instead of sending what vLLM would refuse with a 400.
        "tokenizer_backend=huggingface",
        f"tokenizer={plan.engine_args['checkpoint']}",
        f"max_length={plan.engine_args['max_model_len']}",
    ])
    return ["lm_eval", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(job.gate.tasks), "--output_path", f"{WORK}/results"]


def rollout_digest(plan: Plan, job: GateJob) -> str:
    """Changes whenever what the gate judges changes, so the Job is replaced and runs again."""
    judged = {"engine": plan.engine_args, "checkpoint": job.checkpoint, "image": VLLM_IMAGE,
              "gate": gate_spec(job.gate), "command": lm_eval_command(plan, job)}
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:16]


# Before judging: wait until the gateway answers with its real certificate (issued by
# cert-manager a few minutes after `pulumi up` creates it) and the API key is accepted.
READY_WAIT_S = 1800
WAIT_FOR_GATEWAY = """\
import sys, time, urllib.request
url, deadline = sys.argv[1] + "/v1/models", time.time() + float(sys.argv[2])
key = open(sys.argv[3]).read().strip()
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
while True:
    try:
        urllib.request.urlopen(request, timeout=10).read()
        break
    except Exception as exc:
        if time.time() > deadline:
            sys.exit("gateway not ready at " + url + ": " + str(exc))
        time.sleep(10)
"""


def install_command() -> list[str]:
    """The init container's: lm-eval into the shared work folder, with no secret in reach, from
    the hash-pinned requirements (every package and its SHA-256: pip refuses any other file)."""
    return ["pip", "install", "--no-cache-dir", "--quiet", "--require-hashes", "--target", f"{WORK}/py",
            "-r", f"/gate/{REQUIREMENTS.name}"]


def shell_script(plan: Plan, job: GateJob) -> str:
    """The gate container's: wait for the gateway, lm-eval (installed by the init container), the
    check; no install here."""
    quoted = " ".join(f"'{a}'" for a in lm_eval_command(plan, job))
    return "\n".join([
        "set -eu",
        f"python /gate/wait_for_gateway.py '{gateway_url(job.hostname)}' {READY_WAIT_S} {KEY_FILE}",
        f"export PYTHONPATH={WORK}/py PATH={WORK}/py/bin:$PATH",
        # lm-eval's local-completions reads its Bearer key from OPENAI_API_KEY: set for lm_eval's
        # process alone, from the mounted file, so the key is in no pod spec and no other process.
        f'OPENAI_API_KEY="$(cat {KEY_FILE})" {quoted}',
        f"python /gate/accuracy_check.py /gate/gate.json {WORK}/results",
    ])


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AccuracyGateArgs:
    plan: Plan
    job: GateJob                        # GateJob.for_stack(plan, settings)
    provider: k8s.Provider
    namespace: str
    api_keys: pulumi.Input[str]         # the apiKeys Pulumi secret: JSON {name: key}


class AccuracyGate(pulumi.ComponentResource):
    """Credentials Secret, the check script and thresholds (ConfigMap), its egress, and the awaited Job.

    `opts.depends_on`: the serving replicas and the gateway (judge the live rollout); every child waits for them."""

    def __init__(self, name: str, args: AccuracyGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:accuracy_gate:AccuracyGate", name, None, own(opts))
        plan, job, ns = args.plan, args.job, args.namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        self.gate = gate_spec(job.gate)
        self.digest = rollout_digest(plan, job)
        self.timeout_s = gate_timeout_s(plan, job)
        self.hostname = job.hostname
        # The gate's own key (the gateway meters it at the gate's share), never a tenant's.
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials", metadata={"namespace": ns, "labels": LABELS}, type="Opaque",
            string_data={"api-key": pulumi.Output.secret(args.api_keys).apply(gate_key)},
            opts=child)
        self.config = k8s.core.v1.ConfigMap(
            f"{name}-check", metadata={"namespace": ns, "labels": LABELS},
            data={"gate.json": json.dumps(self.gate, indent=2),
                  "accuracy_check.py": Path(accuracy_check.__file__).read_text(),
                  "wait_for_gateway.py": WAIT_FOR_GATEWAY,
                  "run.sh": shell_script(plan, job),
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
            "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True}, *work],
        }
        gate = {
            "name": "lm-eval", "image": PYTHON_IMAGE,
            "command": ["sh", "/gate/run.sh"],
            "env": [{"name": "HOME", "value": WORK}, {"name": "HF_HOME", "value": f"{WORK}/hf"}],
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True},
                             {"name": "gate-key", "mountPath": KEY_DIR, "readOnly": True}, *work],
        }
        return one_shot_pod_spec(gate, [
            {"name": "gate", "configMap": {"name": self.config.metadata.apply(lambda m: m["name"])}},
            # Readable by the pod's group only (fsGroup), mounted in the gate container alone.
            {"name": "gate-key", "secret": {"secretName": self.credentials.metadata.apply(lambda m: m["name"]),
                                            "defaultMode": 0o440}},
            {"name": "work", "emptyDir": {}},
        ], self.hostname, init_containers=(install,))
