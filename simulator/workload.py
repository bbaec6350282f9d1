"""Requests: arrival times (Poisson or bursty gamma) and prompt/output lengths (fixed or drawn).

Two more ways to send them, as benchmark clients do (`WorkloadSpec.clients`):
- `closed-loop`: N clients all send their first request at t = 0 and each sends its next the
  moment its previous one completes, no think time (`vllm bench serve --max-concurrency N` with
  every request ready, GuideLLM's concurrent profile); the requests are made as the run goes
  (`length_draw`), so this module gives only the first wave;
- `burst`: N prompts all at t = 0 and nothing after (`vllm bench serve --request-rate inf`).

Each stream has its own seeded generator (`random.Random` with a string seed is deterministic
across runs and platforms), so changing the length distribution never moves the arrivals.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import accumulate

from sizing.traffic import LengthDistribution

ARRIVALS = ("poisson", "gamma")          # open loop: --arrivals
CLIENT_ARRIVALS = ("closed-loop", "burst")   # a number of clients (or prompts) instead of a rate
LENGTHS = ("fixed", "lognormal", "distribution")


class Request:
    """One request and what happened to it. Times in seconds from the start of the run."""

    __slots__ = (
        "id", "arrival", "prompt", "out",
        # state on the replica that holds it
        "gen", "pf_total", "pf_left", "k0", "finish", "epoch", "decoding",
        # disaggregated serving: prompt tokens whose KV arrived from a prefill replica (the decode
        # computes only the rest); speculative decoding: drafts accepted on this attempt
        "pf_remote", "spec_accepted",
        # outcome
        "t_sched", "t_first", "t_done", "attempts", "preemptions", "lost", "replica",
    )

    def __init__(self, rid: int, arrival: float, prompt: int, out: int):
        self.id, self.arrival, self.prompt, self.out = rid, arrival, prompt, out
        self.gen = 0                 # output tokens produced so far (on this attempt)
        self.pf_total = prompt       # tokens this attempt must prefill (prompt, + output after preemption)
        self.pf_left = prompt
        self.k0 = 0                  # step index at which its decode began
        self.finish = 0              # step index of its last token while decoding
        self.epoch = 0               # bumps on preemption or replica loss: stale heap entries
        self.decoding = False
        self.pf_remote = 0
        self.spec_accepted = 0
        self.t_sched: float | None = None   # first scheduled on the replica that served it
        self.t_first: float | None = None
        self.t_done: float | None = None
        self.attempts = 0            # times routed (a retry after a replica loss is the second)
        self.preemptions = 0
        self.lost = False
        self.replica = ""

    def restart(self) -> None:
        """Back to the start: a retry on another replica recomputes everything."""
        self.gen = 0
        self.pf_total = self.pf_left = self.prompt
        self.pf_remote = self.spec_accepted = 0
        self.decoding = False
        self.t_sched = self.t_first = None
        self.epoch += 1


@dataclass(frozen=True)
class WorkloadSpec:
    qps: float
    duration_s: float
    input_tokens: int
    output_tokens: int
    max_model_len: int
    arrivals: str = "poisson"
    burstiness_cv: float = 2.0     # gamma inter-arrival coefficient of variation (1 = Poisson)
    lengths: str = "fixed"
    length_cv: float = 0.5         # lognormal lengths: coefficient of variation around the means
    seed: int = 0
    # lengths "distribution": drawn from the plan's own (sizing.traffic): observed pairs together,
    # percentile quantiles each on its own
    distribution: LengthDistribution | None = None
    # arrivals "closed-loop": this many clients; "burst": this many prompts at t = 0 (qps unused)
    clients: int = 0


MAX_DURATION_S = 7 * 86_400         # a week of arrivals
MAX_REQUESTS = 1_000_000            # about 6 s CPU compiled, 16 s pure Python (bench/bench_simulate.py)
MAX_CV = 10.0                       # gamma and lognormal coefficients of variation
# The same bound as the stack's workload.inputTokens/outputTokens (settings.schema): longer than any
# context a served model has; a 1e12-token prompt would otherwise be simulated chunk by chunk for hours.
MAX_TOKENS = 1_000_000
# Steps at most 10x the plan's (the twin's --slowdown): beyond it every alert fires at once and the
# run only grows its queue, whose drain the twin's timeline would hold second by second in memory.
MAX_SLOWDOWN = 10.0


class WorkLimitError(ValueError):
    """A simulation the simulator refuses up front; `option` names the input to change."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option


def check_work(qps: float, duration_s: float, burstiness_cv: float = 1.0, length_cv: float = 0.5, *,
               slowdown: float = 1.0, tokens: tuple[float, float] = (1, 1)) -> None:
    """Bound the simulator's work before it starts: every figure finite and positive, the run at
    most a week, the expected requests at most MAX_REQUESTS, the steps at most MAX_SLOWDOWN times
    the plan's and the lengths at most MAX_TOKENS, so no input makes it hang or fill memory.
    The one limit `simulate`, `twin` and `calibrate` check their inputs against."""
    for option, value in (("--duration", duration_s), ("--qps", qps), ("--burstiness", burstiness_cv),
                          ("--length-cv", length_cv), ("--slowdown", slowdown), ("input tokens", tokens[0]),
                          ("output tokens", tokens[1])):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise WorkLimitError(option, f"must be a finite number greater than 0 (got {value!r})")
    if duration_s > MAX_DURATION_S:
        raise WorkLimitError("--duration", f"{duration_s:g} s is above the limit of {MAX_DURATION_S:,} s (a week)")
    for option, value in (("--burstiness", burstiness_cv), ("--length-cv", length_cv)):
        if value > MAX_CV:
            raise WorkLimitError(option, f"{value:g} is above the limit of {MAX_CV:g}")
    if slowdown > MAX_SLOWDOWN:
        raise WorkLimitError("--slowdown", f"{slowdown:g} is above the limit of {MAX_SLOWDOWN:g} (steps that many "
                                           "times the plan's)")
    for option, value in (("input tokens", tokens[0]), ("output tokens", tokens[1])):
        if value > MAX_TOKENS:
            raise WorkLimitError(option, f"{value:.3g} per request is above the limit of {MAX_TOKENS:,}")
    expected = qps * duration_s
    if expected > MAX_REQUESTS:
        raise WorkLimitError("--qps", f"{qps:g} QPS for {duration_s:g} s is {expected:.3g} requests, above the "
                                      f"limit of {MAX_REQUESTS:,} (lower --qps or --duration)")


def check_clients(option: str, clients: int, duration_s: float = 1.0) -> None:
    """A closed loop's clients or a burst's prompts: a whole number from 1 to MAX_REQUESTS (and the
    closed loop's run finite and at most a week); `simulate` also stops a closed loop that would
    serve more than MAX_REQUESTS requests."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients <= 0:
        raise WorkLimitError(option, f"must be a whole number greater than 0 (got {clients!r})")
    if clients > MAX_REQUESTS:
        raise WorkLimitError(option, f"{clients:,} is above the limit of {MAX_REQUESTS:,}")
    check_work(1.0, duration_s)


def generate(spec: WorkloadSpec) -> list[Request]:
    """All requests arriving in [0, duration); a burst's N at t = 0; a closed loop's first wave."""
    if spec.lengths not in LENGTHS:
        raise ValueError(f"lengths '{spec.lengths}': choose one of {', '.join(LENGTHS)}")
    if spec.arrivals in CLIENT_ARRIVALS:
        return client_requests(spec)[0]
    if spec.arrivals not in ARRIVALS:
        raise ValueError(f"arrivals '{spec.arrivals}': choose one of {', '.join(ARRIVALS + CLIENT_ARRIVALS)}")
    check_work(spec.qps, spec.duration_s, spec.burstiness_cv, spec.length_cv)
    lens = random.Random(f"{spec.seed}-lengths")
    times = arrival_times(spec)
    if spec.lengths == "fixed":
        prompt, out = spec.input_tokens, spec.output_tokens
        return [Request(i, t, prompt, out) for i, t in enumerate(times)]
    if spec.lengths == "distribution":
        draw = _distribution_draw(spec, lens)
        return [Request(i, t, *draw()) for i, t in enumerate(times)]
    sigma = math.sqrt(math.log(1 + spec.length_cv ** 2))
    draw = lens.lognormvariate
    mu_in = math.log(spec.input_tokens) - sigma * sigma / 2
    mu_out = math.log(spec.output_tokens) - sigma * sigma / 2
    reqs: list[Request] = []
    for i, t in enumerate(times):
        # vLLM refuses a prompt beyond max_model_len and stops generation at it: clip the same.
        p = min(max(1, round(draw(mu_in, sigma))), spec.max_model_len - 1)
        reqs.append(Request(i, t, p, min(max(1, round(draw(mu_out, sigma))), spec.max_model_len - p)))
    return reqs


def client_requests(spec: WorkloadSpec):
    """(the N requests sent at t = 0, the draw the rest of a closed loop's lengths come from)."""
    check_clients("--concurrency" if spec.arrivals == "closed-loop" else "--burst", spec.clients, spec.duration_s)
    draw = length_draw(spec)
    return [Request(i, 0.0, *draw()) for i in range(spec.clients)], draw


def length_draw(spec: WorkloadSpec):
    """A function giving one (prompt, output) pair at a time from the workload's lengths (the
    lengths stream of `generate`, and its clipping): for requests made as a run goes."""
    lens = random.Random(f"{spec.seed}-lengths")
    if spec.lengths == "distribution":
        return _distribution_draw(spec, lens)
    prompt, out, cap = spec.input_tokens, spec.output_tokens, spec.max_model_len
    if spec.lengths == "fixed":
        return lambda: (prompt, out)
    sigma = math.sqrt(math.log(1 + spec.length_cv ** 2))
    lognormal = lens.lognormvariate
    mu_in = math.log(prompt) - sigma * sigma / 2
    mu_out = math.log(out) - sigma * sigma / 2

    def draw() -> tuple[int, int]:
        p = min(max(1, round(lognormal(mu_in, sigma))), cap - 1)
        return p, min(max(1, round(lognormal(mu_out, sigma))), cap - p)
    return draw


def arrival_times(spec: WorkloadSpec) -> list[float]:
    """Arrival times in [0, duration): the running sum of the gaps, drawn in batches of about the
    expected count. The same draws, in the same order and summed the same way, as one
    `expovariate` (or `gammavariate`) call per request: the seeded times are unchanged."""
    arr = random.Random(f"{spec.seed}-arrivals")
    expected = spec.qps * spec.duration_s
    batch = int(expected + 6 * math.sqrt(expected)) + 16
    if spec.arrivals == "poisson":
        rnd, log, qps = arr.random, math.log, spec.qps

        def gaps(n: int) -> list[float]:      # random.expovariate, inline (CPython 3.11 Lib/random.py)
            return [-log(1.0 - rnd()) / qps for _ in range(n)]
    else:
        shape = 1.0 / (spec.burstiness_cv ** 2)
        scale = 1.0 / (spec.qps * shape)       # mean gap 1/qps
        gamma = arr.gammavariate

        def gaps(n: int) -> list[float]:
            return [gamma(shape, scale) for _ in range(n)]
    times: list[float] = []
    t = 0.0
    while True:
        drawn = gaps(batch)
        drawn[0] += t                          # the sum goes on from the last time, as t += gap
        for t in accumulate(drawn):
            if t >= spec.duration_s:
                return times
            times.append(t)
        batch = max(16, batch // 8)


def _distribution_draw(spec: WorkloadSpec, lens: random.Random):
    """Draws from the plan's length distribution (one stream, so arrivals never move)."""
    d = spec.distribution
    if d is None:
        raise ValueError("lengths 'distribution': the workload's lengths are fixed; use fixed or lognormal")
    ins, outs, n_in, n_out = d.inputs, d.outputs, len(d.inputs), len(d.outputs)
    cap = spec.max_model_len

    def draw() -> tuple[int, int]:
        i = lens.randrange(n_in)
        p = ins[i]
        o = outs[i] if d.paired else outs[lens.randrange(n_out)]
        # vLLM refuses a request beyond max_model_len (a 400); the plan's limit holds the
        # distribution's longest, so this clip only matters for a stated maximum below it.
        p = min(p, cap - 1)
        return p, min(o, cap - p)
    return draw
