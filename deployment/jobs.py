"""The proving jobs as deployment data: the load test's GuideLLM scenario and the accuracy gate's
lm-eval run, what each is made of and how long each may take.

Pure Python (no Pulumi): components/loadtest.py and components/accuracy_gate.py build the Jobs.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from conventions import VLLM_IMAGE
from settings import StackSettings
from settings.schema import ACCURACY_TASK_METRICS, AccuracyGateSettings, LoadTestSettings
from sizing.workload import Workload
from sizing.planner import Plan

from .gateway import gate_rate_limit, proxy_replicas
from .serving import served_checkpoint, served_model_name


# -- the load test (GuideLLM) ----------------------------------------------------------------
# GuideLLM 0.8.1 writes report schema version 2, the one `llmserve loadtest-report` reads.
RESULTS_PATH = "/results"
SCENARIO_PATH = "/config"
SEED = 42
LOAD_TEST_SETUP_MARGIN_S = 1800    # image pull, tokenizer download, warm-up, between-step drain
# GuideLLM validates its target with `GET {target}/{api_routes["/health"]}` in the main process and
# again in every worker before any request (guidellm 0.8.1 backends/openai/http.py L131-147, called
# from benchmark/entrypoints.py L118-120 and scheduler/worker.py L289; the default route is "health",
# schemas/backends/openai_http.py L16-17, merged with ours at L168-172). The gateway routes only the
# OpenAI paths, so /health would be a 404 and the Job would exit 1 before sending a request: the
# check goes to /v1/models instead, through the same route, TLS, key and backend as the load.
HEALTH_ROUTE = {"/health": "v1/models"}
# One GuideLLM worker process. Each process draws its Poisson gaps from its own random.Random(seed)
# (scheduler/strategies.py L693-696) into one shared clock (L703-706): with GuideLLM's default of 10
# processes (settings.py L103, worker_group.py L174-181) every gap is drawn 10 times, a burstier
# process than Poisson at the same mean. With one process the arrivals are Poisson at the rate.
CLIENT_PROCESSES = 1


# -- figures derived from the plan (pure) ----------------------------------------------------
def loadtest_rates(plan: Plan, steps: int) -> list[float]:
    """The planned QPS first, then the rate N+1 needs (n_plus_one_qps), then `steps` evenly spaced
    rates up to the sized capacity (an open-loop workload: the settings refuse a load test of a
    closed-loop one). Without the N+1 rate, a plan whose survivors carry the load with a thin margin
    could show N+1 only at its top step, the sized capacity itself, where the SLOs hold just so."""
    planned = float(plan.request.workload.qps)
    rates = [planned]
    for rate in [n_plus_one_qps(plan)] + [round(plan.capacity_qps * k / steps, 2) for k in range(1, steps + 1)]:
        if all(abs(rate - r) > 0.01 * r for r in rates):
            rates.append(rate)
    return rates


def n_plus_one_qps(plan: Plan) -> float:
    """The whole fleet's rate at which what is left after losing the plan's failure domain carries
    the planned QPS (planned x replicas / replicas left), rounded up to the next 0.01: the rate the
    load-test verdict's n_plus_one check needs a step at (proving.loadtest_report)."""
    planned = float(plan.request.workload.qps)
    if plan.replicas_carrying == plan.replicas:      # no loss the plan survives: the planned rate is all
        return planned
    return math.ceil(100 * planned * plan.replicas / plan.replicas_carrying) / 100


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
    served_name: str                   # the model name it asks for (vLLM's --served-model-name)

    @classmethod
    def for_stack(cls, plan: Plan, settings: StackSettings) -> "LoadTestRun":
        return cls(stack=settings.stack, load_test=settings.loadTest, hostname=settings.gateway.hostname,
                   key_name=settings.gateway.apiKeyNames[0], checkpoint=served_checkpoint(plan, settings),
                   served_name=served_model_name(plan, settings))


def scenario(plan: Plan, run: LoadTestRun) -> dict:
    """The GuideLLM run, in its scenario format (the `config` a report echoes back)."""
    w, lt = plan.request.workload, run.load_test
    spec = {
        "backend": {"kind": "openai_http", "target": gateway_url(run.hostname), "model": run.served_name,
                    "request_format": "/v1/completions", "api_routes": dict(HEALTH_ROUTE)},
        "profile": {"kind": lt.arrivals, "rate": loadtest_rates(plan, lt.sweepSteps),
                    # measured between a warm-up and a cool-down (GuideLLM's own phases): see transient_s
                    "warmup": {"mode": "duration", "value": transient_s(plan, lt)},
                    "cooldown": {"mode": "duration", "value": transient_s(plan, lt)}},
        "constraints": [{"kind": "max_duration", "seconds": lt.stepSeconds}],
        "tokenizer": {"kind": "huggingface_auto", "model": run.checkpoint},
        "data": [synthetic_data(w)],
        "seed": {"kind": "static", "value": SEED},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    spec["outputs"] = [{"kind": "json", "path": f"{RESULTS_PATH}/guidellm-{run.stack}-{digest}.json"}]
    labels = {"stack": run.stack, "plan-qps": f"{w.qps:g}", "plan-capacity-qps": f"{plan.capacity_qps:.2f}"}
    return {"metadata": {"labels": labels}, "spec": spec}


def transient_s(plan: Plan, lt: LoadTestSettings) -> int:
    """Seconds left out of each step's figures at its start (warm-up) and at its end (cool-down):
    twice the longest a request meeting both SLOs takes (TTFT SLO + output tokens x TPOT SLO),
    never more than a fifth of the step.

    GuideLLM computes a step's metrics over [start + warm-up, end - cool-down] and keeps a request
    that overlaps that window (benchmark/schemas/metrics.py L1246-1257, accumulator.py L632-677;
    the phases are the profile's `warmup`/`cooldown`, schemas/benchmark/profiles/profile.py L63-72,
    in seconds with mode "duration", schemas/benchmark/transient.py L85-121). Left out:
    - the start: a burst, not Poisson arrivals. The main process publishes the step's start time
      (scheduler/strategies.py L163-165) before it sets the Poisson clock (L677-678), so a worker
      that wakes in between adds its gap to the clock's initial -1.0 (L656, L703-706): a time long
      past, sent at once, and again until the clock is set. Those requests, and the queue they
      leave, end within the warm-up.
    - the end: GuideLLM cancels what is still running when the step's time is up (scheduler/
      constraints/request.py L240-242: "incomplete" in the report). A request that starts in the
      cool-down is outside the window, so a healthy step reports (almost) none; one still running
      after a whole cool-down is slow, and the verdict counts it (proving/loadtest_report.py)."""
    w = plan.request.workload
    slo_request_s = w.ttft_slo_s + w.output_tokens * w.tpot_slo_s
    return max(1, min(math.ceil(2 * slo_request_s), lt.stepSeconds // 5))


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
    return len(loadtest_rates(plan, lt.sweepSteps)) * lt.stepSeconds + LOAD_TEST_SETUP_MARGIN_S


# The gate waits this long at least for lm-eval (the Job's deadline and Pulumi's await); more
# when its quota needs longer for the tasks' questions (`gate_timeout_s`).
GATE_TIMEOUT_S = 4 * 3600
TASK_QUESTIONS = {"gsm8k": 1319, "gsm8k_cot": 1319, "mmlu_pro": 12032}   # the tasks' test splits
GATE_SETUP_MARGIN_S = 1800         # image pull, lm-eval install, dataset download
REQUEST_TIMEOUT_S = 600
# Before judging: wait until the gateway answers with its real certificate (issued by
# cert-manager a few minutes after `pulumi up` creates it) and the API key is accepted.
READY_WAIT_S = 1800
WORK = "/work"
GATE_CONFIG_DIR = "/gate"                      # the gate's ConfigMap: its scripts and what they read
GATE_KEY_DIR = "/var/run/secrets/accuracy-gate"    # the gate's key as a file (the credentials Secret), not an env var
GATE_KEY_FILE = f"{GATE_KEY_DIR}/api-key"


# -- what the gate runs (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class GateJob:
    """What the gate's Job is made of, and nothing else from the stack."""
    gate: AccuracyGateSettings         # tasks, baselines, maxDrop
    hostname: str                      # the gateway's public name: the gate goes through it like a client
    rate_limit_share: float            # gateway.rateLimitShare: the gate's quota is a part of it
    zones: int                         # the serving zones: how many proxies split the quota
    checkpoint: str                    # what vLLM serves (judged: a new one re-runs the gate)
    served_name: str                   # the model name it asks for (vLLM's --served-model-name)

    @classmethod
    def for_stack(cls, plan: Plan, settings: StackSettings) -> "GateJob":
        return cls(gate=settings.accuracyGate, hostname=settings.gateway.hostname,
                   rate_limit_share=settings.gateway.rateLimitShare, zones=len(settings.zones),
                   checkpoint=served_checkpoint(plan, settings), served_name=served_model_name(plan, settings))


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
    return max(GATE_TIMEOUT_S, math.ceil(1.25 * questions / quota_qps) + GATE_SETUP_MARGIN_S + READY_WAIT_S)


def lm_eval_command(plan: Plan, job: GateJob) -> list[str]:
    model_args = ",".join([
        f"model={job.served_name}",
        f"base_url={gateway_url(job.hostname)}/v1/completions",
        f"num_concurrent={concurrency(plan, job)}",
        "max_retries=3",
        f"timeout={REQUEST_TIMEOUT_S}",
        # lm-eval 0.4.13 truncates only tokenized requests (lm_eval/models/api_models.py
        # `generate_until`, L732-737 and L759-772): with the served model's tokenizer it left-truncates
        # each context to max_length - 1 - max_gen_toks (L177, L763-765) and sends token ids, so a
        # 5-shot prompt past the served context is cut instead of refused by vLLM with a 400.
        "tokenized_requests=True",
        "tokenizer_backend=huggingface",
        f"tokenizer={plan.checkpoint}",
        f"max_length={plan.engine_args.max_model_len}",
        # The token ids carry the tokenizer's special tokens (BOS), as vLLM adds them to a text
        # prompt (its completions request tokenizes with add_special_tokens by default); lm-eval
        # adds them only when asked (tok_encode, L396-413: add_bos_token defaults to False).
        "add_bos_token=True",
    ])
    return ["lm_eval", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(job.gate.tasks), "--output_path", f"{WORK}/results"]


def gate_run(plan: Plan, job: GateJob) -> dict:
    """What deployment/gate_runner.py runs (its RUN_JSON): every value one argv element, no shell."""
    return {"gateway_url": gateway_url(job.hostname), "ready_wait_s": READY_WAIT_S, "key_file": GATE_KEY_FILE,
            "work": WORK, "tokenizer": plan.checkpoint, "lm_eval": lm_eval_command(plan, job),
            "check": ["python", f"{GATE_CONFIG_DIR}/accuracy_check.py", f"{GATE_CONFIG_DIR}/gate.json", f"{WORK}/results"]}


def rollout_digest(plan: Plan, job: GateJob) -> str:
    """Changes whenever what the gate judges changes, so the Job is replaced and runs again."""
    # The engine as the digest has always read it (its arguments with the weights and the catalog's
    # checkpoint), so a release of this tool does not re-run a gate on an unchanged rollout.
    engine = {**plan.engine_args.as_dict(), "weights": plan.request.weights, "checkpoint": plan.checkpoint}
    judged = {"engine": engine, "checkpoint": job.checkpoint, "image": VLLM_IMAGE,
              "gate": gate_spec(job.gate), "command": lm_eval_command(plan, job)}
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:16]



# -- the jobs' slices of the deployment spec --------------------------------------------------
@dataclass(frozen=True)
class LoadTestSpec:
    """Everything components/loadtest.py builds."""
    run: LoadTestRun
    scenario: dict                   # the GuideLLM scenario (its report path inside)
    deadline_s: int                  # the Job's activeDeadlineSeconds

    @property
    def report_path(self) -> str:
        return self.scenario["spec"]["outputs"][0]["path"]


def load_test_spec(plan: Plan, settings: StackSettings) -> LoadTestSpec:
    run = LoadTestRun.for_stack(plan, settings)
    return LoadTestSpec(run=run, scenario=scenario(plan, run), deadline_s=run_deadline_s(plan, run.load_test))


@dataclass(frozen=True)
class GateSpec:
    """Everything components/accuracy_gate.py builds."""
    job: GateJob
    gate: dict                       # accuracy_check.py's input: tasks, metrics, baselines, max drop
    digest: str                      # changes with what the gate judges: a new digest re-runs the Job
    timeout_s: int
    run: dict                        # gate_runner.py's RUN_JSON

    @property
    def lm_eval_command(self) -> list[str]:
        return self.run["lm_eval"]


def gate_job_spec(plan: Plan, settings: StackSettings) -> GateSpec:
    job = GateJob.for_stack(plan, settings)
    return GateSpec(job=job, gate=gate_spec(job.gate), digest=rollout_digest(plan, job),
                    timeout_s=gate_timeout_s(plan, job), run=gate_run(plan, job))
