"""The analytic capacity model of one serving replica (one TP group).

Every figure comes from one step model (`sizing.step`): a step decodes n sequences and prefills
c prompt tokens; its time is t(n, c). Per replica at an open-loop (Poisson) load of QPS:

- TPOT: over a second the replica runs decode steps and, with them, the prompts' chunks. A chunk
  of C = T - n tokens (T = max_num_batched_tokens) costs p = (t(n, C) - t(n, 0)) / C per token
  beyond the decode step, so the prompts take a share u = QPS s_in p of the time and
  TPOT = t(n, 0) / (1 - u). Little's law n = QPS (TTFT0 + (s_out - 1) TPOT) closes it; each
  decode branch is linear in n, so the fixed point is solved exactly (the `additive` reference
  profile has p constant: one pass; `mixed` refines p from n, three passes).
- TTFT: a prompt waits for the step in progress, then for the prompts ahead of it (an M/D/1 queue
  of prompt work drained at C / t(n, C) tokens/s: chunks share each step with the decodes), then
  needs ceil(s_in / C) steps of its own; then, past the KV cache or max_num_seqs, for a slot
  (Erlang C). Finite while the queue has a steady state; past it the point is unstable and says
  why. Closed loop: C clients at throughput X spend C / X per request (Little), so TTFT is bounded.
- Statistics: mean, or p50/p90/p95/p99 (Poisson arrivals: exponential queue tails; the batch a
  request sees is Poisson with Little's mean, M/G/inf). Capacity is the largest QPS at which TTFT
  and TPOT both hold at the workload's statistic, the batch fits the KV cache, and prefill does
  not saturate the replica.

"ideal" takes the roofline at face value (real_factor 1, full HBM bandwidth); "real" applies the
profile. The reference figures (../shared/reference/sizing-reference.md) reproduce exactly under
the `reference` profile, whose step model is the seed's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import parallel
from .catalog import Instance, Model
from .profiles import Profile
from .queueing import QUANTILES, STATISTICS, erlang_c_wait, md1_wait_quantile, poisson_quantile_smooth
from .step import build_step, step_comm
from .traffic import LengthDistribution, fixed as fixed_lengths
from .vllm_engine import BLOCK_TOKENS, NULL_BLOCKS, batch_defaults, blocks_for, reported_memory_bytes

GB = 1e9
CHUNK_MIN, CHUNK_MAX, CHUNK_ALIGN = 512, 8192, 256
PROMPT_POINTS = 16          # prompt-length quantiles a varying prompt's own prefill is averaged over


class SizingError(ValueError):
    """A configuration the model cannot serve; the message names the constraint that fails.

    `field` names the `PlanRequest` field that can fix it ("tp", "weights", "workload.qps", ...;
    None when it is the layout): the settings turn it into the stack key, the CLI into the flag,
    whichever the user wrote (settings.schema.REQUEST_KEYS, llmserve/size_flags.py). The message
    itself names neither.
    """

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Workload:
    input_tokens: int = 1000
    output_tokens: int = 300
    ttft_slo_s: float = 1.0
    tpot_slo_s: float = 0.040
    qps: float | None = 10.0
    concurrency: int | None = None     # closed loop: this many clients, each waits for its answer
    slo_statistic: str = "p95"         # mean | p50 | p90 | p95 | p99: the SLOs hold at this statistic
    # The lengths as a distribution (sizing.traffic); None: every request is input/output_tokens.
    # With one, input_tokens and output_tokens are its means (`with_lengths`).
    lengths: LengthDistribution | None = None
    max_model_len: int | None = None   # the served limit, stated; None: the longest the lengths allow
    # Prefix caching (vLLM's automatic prefix caching, on by default in 0.29.0): the prompt tokens
    # every request shares (a system prompt or template), or the share of prompt tokens found in
    # the cache (multi-turn chats). 0: the plan does not count on it.
    shared_prefix_tokens: int = 0
    prefix_hit_fraction: float = 0.0

    def __post_init__(self):
        check_finite_workload(self)

    @classmethod
    def with_lengths(cls, lengths: LengthDistribution, **kwargs) -> "Workload":
        """A workload whose mean lengths come from `lengths`."""
        return cls(input_tokens=max(1, round(lengths.mean_input)), output_tokens=max(1, round(lengths.mean_output)),
                   lengths=lengths, **kwargs)

    @property
    def is_closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def distribution(self) -> LengthDistribution:
        return self.lengths or fixed_lengths(self.input_tokens, self.output_tokens)

    @property
    def cached_prompt_tokens(self) -> int:
        """Prompt tokens per request served from the prefix cache: whole 16-token blocks only (vLLM
        caches full blocks), and never the last prompt token (it is recomputed for its logits)."""
        cached = max(self.shared_prefix_tokens, self.prefix_hit_fraction * self.input_tokens)
        return max(0, min(int(cached), self.input_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS)

    @property
    def counts_on_prefix_cache(self) -> bool:
        return self.cached_prompt_tokens > 0

    def without_prefix_cache(self) -> "Workload":
        return replace(self, shared_prefix_tokens=0, prefix_hit_fraction=0.0)

    @property
    def served_max_len(self) -> int:
        """vLLM's max_model_len: the stated maximum, else the longest request the traffic holds."""
        d = self.lengths      # fixed lengths: their sum (what `distribution` would say, without building it)
        return self.max_model_len or (d.max_request_tokens if d else self.input_tokens + self.output_tokens)

    @property
    def prompt_attention_tokens(self) -> float:
        """The prompt length one prompt token's causal attention sees, on average over tokens."""
        return self.input_tokens if self.lengths is None else self.lengths.prompt_attention_tokens

    @property
    def decode_context_tokens(self) -> float:
        """A decoding sequence's context, averaged over decode steps (its KV read per step)."""
        if self.lengths is None:
            return self.input_tokens + self.output_tokens / 2
        return self.lengths.decode_context_tokens


WORKLOAD_FIGURES = ("input_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s", "qps", "concurrency")


def check_finite_workload(w: Workload) -> None:
    """Refuse nan, inf and non-positive figures up front, naming the field."""
    for name in WORKLOAD_FIGURES:
        value = getattr(w, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SizingError(f"expected a number (got {value!r})", f"workload.{name}")
        if not math.isfinite(value) or value <= 0:
            raise SizingError(f"must be a finite number greater than 0 (got {value!r})", f"workload.{name}")
    if isinstance(w.shared_prefix_tokens, bool) or not isinstance(w.shared_prefix_tokens, int) or w.shared_prefix_tokens < 0:
        raise SizingError(f"must be a whole number of tokens, 0 or more (got {w.shared_prefix_tokens!r})",
                          "workload.shared_prefix_tokens")
    if not (isinstance(w.prefix_hit_fraction, (int, float)) and 0 <= w.prefix_hit_fraction < 1):
        raise SizingError(f"must be from 0 to below 1 (got {w.prefix_hit_fraction!r})", "workload.prefix_hit_fraction")
    if w.max_model_len is not None and (isinstance(w.max_model_len, bool) or not isinstance(w.max_model_len, int)
                                        or w.max_model_len <= 0):
        raise SizingError(f"must be a whole number of tokens above 0 (got {w.max_model_len!r})",
                          "workload.max_model_len")
    if w.slo_statistic not in STATISTICS:
        raise SizingError(f"unknown statistic '{w.slo_statistic}'; choose one of: {', '.join(STATISTICS)}",
                          "workload.slo_statistic")


@dataclass(frozen=True)
class Shape:
    """What a replica is: a model at some precision on `tp` GPUs of one node type, split by
    `layout` (`sizing.parallel`: tp, or dp-ep for data-parallel attention with expert parallelism;
    `tp` is the node's share of the replica's GPUs either way), or on `nodes` such nodes: TP within
    each node, pipeline stages across them (vLLM's multi-node layout: `--tensor-parallel-size`
    GPUs per node, `--pipeline-parallel-size` nodes)."""
    model: Model
    instance: Instance
    tp: int
    weights: str = "fp8"
    kv_dtype: str = "bf16"
    layout: str = "tp"
    nodes: int = 1

    @property
    def gpus(self) -> int:
        """GPUs one replica holds: tp on each of its nodes."""
        return self.tp * self.nodes


@dataclass(frozen=True)
class Memory:
    """Per replica, as vLLM accounts it at start-up (`kv_accounting: vllm`), or the seed's way."""
    weights_gb: float
    weights_per_gpu_gb: float
    usable_per_gpu_gb: float       # gpu_memory_utilization x HBM - overheads, per GPU
    activation_gb: float           # per GPU: the peak of a max_num_batched_tokens step
    cuda_graph_gb: float           # per GPU
    kv_budget_gb: float
    kv_bytes_per_token: float
    kv_cache_tokens: int           # vLLM's "GPU KV cache size: N tokens"
    max_model_len: int
    max_seqs_kv: int               # running sequences the KV cache holds at saturation (see memory())
    max_seqs: int                  # that, capped by the engine's max_num_seqs
    total_gb: float

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.kv_cache_tokens / self.max_model_len if self.max_model_len else 0.0


@dataclass(frozen=True)
class Point:
    """One replica at one load, ideal or real. Latencies in ms, memory in GB."""
    qps: float
    prefill_share: float
    ttft_ms: float            # mean, with prefill and KV-admission queueing
    ttft_p95_ms: float
    tpot_ms: float            # mean
    tpot_p95_ms: float
    in_flight: float          # Little's law
    kv_cache_gb: float        # KV reserved for the sequences in flight (each holds s_in + s_out)
    queue_ms: float           # mean wait before the prompt's prefill completes its queue (prefill + KV)
    stable: bool
    unstable_reason: str = ""
    statistic: str = "mean"
    ttft_at_statistic_ms: float = math.nan
    tpot_at_statistic_ms: float = math.nan


@dataclass(frozen=True)
class Capacity:
    qps: float
    binding: str              # tpot | ttft | kv | prefill
    by_constraint: dict
    statistic: str = "mean"


class ReplicaModel:
    """One shape under one profile for one workload: the step model and the queues around it."""

    def __init__(self, shape: Shape, workload: Workload, profile: Profile, real: bool = True,
                 batched_tokens: int | None = None, checked: Memory | None = None):
        """`checked`: what `check_shape` returned for this shape and workload (the memory at the
        smallest step budget), so that it is not computed again."""
        self.shape, self.workload, self.profile, self.real = shape, workload, profile, real
        # The step's communication: the step and the prefill's comm part both read it.
        comm = step_comm(shape, profile)
        self.step = step = build_step(shape, workload, profile, real, comm)
        self.additive = profile.step_model == "additive"
        # The prompt tokens each request computes: a prefix found in the cache is not recomputed.
        self.cached = cached = workload.cached_prompt_tokens
        s_in, self.s_out = workload.input_tokens - cached, workload.output_tokens
        self.s_in = s_in
        # Prompt lengths: E[s^2] / E[s] (the M/G/1 work ahead) and PROMPT_POINTS quantiles (own service).
        self.s_work = workload.prompt_attention_tokens - cached
        d = workload.lengths
        self.prompt_points = ((s_in,) if d is None else
                              tuple(max(1, d.input_quantile((i + 0.5) / PROMPT_POINTS) - cached)
                                    for i in range(PROMPT_POINTS)))
        self.branches = step.decode_branches()
        self.prefill_alone_s = step.prefill_s(s_in)          # one prompt, alone, unchunked
        # Per prompt token beyond the decode step, when a chunk is compute-bound (all of it, additive).
        self.prefill_token_s = step.e if self.additive else step.g2 + step.e
        self.share_per_request_s = s_in * self.prefill_token_s   # u = QPS x this (at most)
        self.prefill_comm_s = comm[0] + comm[1] * s_in      # not scaled by real_factor in the seed
        if self.additive:   # the seed: TTFT0 = real_factor x prefill FLOPs time + communication
            rf = profile.real_factor if real else 1.0
            self.ttft0_s = rf * (self.prefill_alone_s - self.prefill_comm_s) + self.prefill_comm_s
        else:
            self.ttft0_s = self.prefill_alone_s
        self.memory = (checked if checked is not None and batched_tokens is None else
                       memory(shape, workload, profile, batched_tokens or CHUNK_MIN + profile.max_num_seqs))
        self.batched_tokens = batched_tokens or self._batched_tokens()
        if batched_tokens is None and profile.kv_accounting == "vllm":
            self.memory = memory(shape, workload, profile, self.batched_tokens)
            self.batched_tokens = self._batched_tokens()
        self.kv_tok = self.memory.kv_bytes_per_token      # at the mean request's context, as memory() reads it
        self._stat = workload.slo_statistic

    # -- the engine's step budget -------------------------------------------------------------
    def _batched_tokens(self) -> int:
        """max_num_batched_tokens: a chunk whose step keeps the TPOT SLO at the capacity batch.

        The chunk is the largest multiple of 256 (at least 512) whose prefill cost fits in what
        the decode step at the batch of the mean-TPOT capacity leaves of the SLO; the budget adds
        one token per running sequence (vLLM gives decodes their tokens first)."""
        w = self.workload
        per_token = self.ttft0_s / w.input_tokens if self.additive else self.prefill_token_s
        lam = self._tpot_capacity_fixed_p(w.tpot_slo_s, self.prefill_token_s)
        n = self.in_flight(lam, w.tpot_slo_s) if math.isfinite(lam) and lam > 0 else 1.0
        room = w.tpot_slo_s - self.step.decode_s(n)
        chunk = int(room / per_token) // CHUNK_ALIGN * CHUNK_ALIGN if per_token > 0 and room > 0 else 0
        # vLLM refuses a budget below max_num_seqs (SchedulerConfig): at least the engine's cap.
        cap = engine_max_num_seqs(self.shape, self.profile)
        return max(min(max(CHUNK_MIN, chunk), CHUNK_MAX) + self.memory.max_seqs, cap)

    def prompt_quantile(self, q: float) -> float:
        d = self.workload.lengths
        return self.s_in if d is None else max(1, d.input_quantile(q) - self.cached)

    # -- TPOT ---------------------------------------------------------------------------------
    def step_s(self, n: float) -> float:
        """The decode-only step with n sequences."""
        (a1, b1), (a2, b2) = self.branches
        x, y = a1 + b1 * n, a2 + b2 * n
        return x if x > y else y

    def prefill_token_cost_s(self, n: float) -> float:
        """p: seconds a prompt token adds to a step that decodes n and carries a full chunk."""
        if self.additive:
            return self.step.e
        chunk = max(self.batched_tokens - n, 1.0)
        return (self.step.step_s(n, chunk) - self.step.decode_s(n)) / chunk

    def _tpot_fixed_p(self, qps: float, p: float) -> float:
        u = qps * self.s_in * p
        if u >= 1:
            return math.inf
        worst = 0.0
        for a, b in self.branches:
            denom = (1 - u) - b * qps * (self.s_out - 1)
            if denom <= 0:
                return math.inf
            t = (a + b * qps * self.ttft0_s) / denom
            worst = t if t > worst else worst      # max(worst, t), without the call
        return worst

    def tpot_s(self, qps: float) -> float:
        """Mean TPOT at an open-loop QPS: the fixed point of Little's law and the step."""
        return self._tpot_and_share(qps)[0]

    def _tpot_and_share(self, qps: float) -> tuple[float, float]:
        p = self.prefill_token_s
        tpot = self._tpot_fixed_p(qps, p)
        if not self.additive and math.isfinite(tpot):    # p moves little with n: one refinement settles it
            p = self.prefill_token_cost_s(self.in_flight(qps, tpot))
            tpot = self._tpot_fixed_p(qps, p)
        return tpot, qps * self.s_in * p

    def in_flight(self, qps: float, tpot_s: float) -> float:
        return qps * (self.ttft0_s + (self.s_out - 1) * tpot_s)

    def _tpot_at(self, n: float, u: float, q: float | None) -> float:
        """TPOT at a statistic: the step at the Poisson q-quantile of the batch, prefill share alike."""
        if q is None:
            return self.step_s(n) / (1 - u) if u < 1 else math.inf
        nq = poisson_quantile_smooth(n, q)
        uq = u * nq / n if n > 0 else u
        mean = self.step_s(n) / (1 - u)
        # vLLM gives the decodes their tokens first: a step is at most a full-chunk step, however
        # many prompts wait (they wait in the prefill queue, in TTFT, instead).
        ceiling = max(self.step.step_s(nq, max(self.batched_tokens - nq, 0.0)), mean)
        if uq >= 1:
            return ceiling
        # A batch above its mean lasts a request's lifetime and slows every step, which keeps
        # more requests in flight: the batch varies 1 / (1 - loop gain) times more (its std, sqrt).
        qps = n / (self.ttft0_s + (self.s_out - 1) * mean) if n > 0 else 0.0
        gain = qps * (self.s_out - 1) * (self.step_s(n + 1) - self.step_s(n)) / (1 - u)
        amplify = 1 / math.sqrt(1 - gain) if gain < 0.9 else math.sqrt(10.0)   # std of an OU process
        return min(mean + max(self.step_s(nq) / (1 - uq) - mean, 0.0) * amplify, ceiling)

    # -- TTFT ---------------------------------------------------------------------------------
    def _prefill_queue(self, qps: float, n: float) -> tuple[float, float, float, float, float]:
        """(rho, prompt work D, own service S, full-chunk step, own last step) in s, of the
        chunked-prefill queue at batch n. rho is also the share of time in full-chunk steps.

        Prompt lengths that vary make it M/G/1: the work a waiting prompt finds ahead scales with
        E[s_in^2] / E[s_in] (a long prompt is more likely the one in the way), and its own service
        is the mean over the prompt lengths (`prompt_points`)."""
        chunk = self.batched_tokens - n
        chunk = 1.0 if 1.0 > chunk else chunk                 # max(chunk, 1.0), without the call
        full = self.step.step_s(n, chunk)
        rho = qps * self.s_in * full / chunk                  # chunks drain chunk / full tokens per second
        k = math.ceil(self.s_in / chunk)                      # its own steps (`_own_service`, inline:
        last = self.step.step_s(n, self.s_in - (k - 1) * chunk)   # the capacity search's inner loop)
        service = (k - 1) * full + last
        if len(self.prompt_points) > 1:
            service = sum(self._own_service(n, s, chunk, full)[0] for s in self.prompt_points) / len(self.prompt_points)
        return rho, self.s_work * full / chunk, service, full, last

    def _own_service(self, n: float, s_in: float, chunk: float | None = None,
                     full: float | None = None) -> tuple[float, float]:
        """(all its steps, its last step) for a prompt of s_in tokens in chunks beside n decodes
        (`chunk`, `full`: the chunk at n and its step, when the caller has them)."""
        if chunk is None:
            chunk = max(self.batched_tokens - n, 1.0)
            full = self.step.step_s(n, chunk)
        k = math.ceil(s_in / chunk)
        last = self.step.step_s(n, s_in - (k - 1) * chunk)
        return (k - 1) * full + last, last

    def _ttft_prefill(self, qps: float, n: float, tpot: float, q: float | None, queue: tuple | None = None) -> float:
        """TTFT before any KV-admission wait, at a statistic (q None: the mean).

        A prompt first waits for the step in progress: with probability rho a chunk step (length
        `full`), else, while decodes run, a decode step; then for the prompt work ahead of it
        (M/D/1); then its own ceil(s_in / chunk) steps, the last of which is full when a prompt
        that arrived meanwhile fills the rest of its budget (vLLM schedules it in the same step).
        `queue`: `_prefill_queue(qps, n)` when the caller has it already."""
        rho, work, service, full, last = queue or self._prefill_queue(qps, n)
        if rho >= 1:
            return math.inf
        busy = 1 - math.exp(-n)                              # decodes run: a step is in progress
        f = rho if rho < busy else busy
        dec = self.step.decode_s(n)
        residual = (f * full + (busy - f) * dec) / 2
        mean_wait = rho * work / (2 * (1 - rho))
        earlier = service - last
        extra = full - last if full > last else 0.0           # a shared last step is a full one
        shared = 1 - math.exp(-qps * (earlier + residual)) if earlier > 0 else 0.0
        if q is None:
            return residual + mean_wait + service + shared * extra
        # The quantile of the sum: the means plus the spreads combined in quadrature.
        tail = 1 - q
        res_q = _residual_quantile(tail, f, full, busy - f, dec)
        wait_q = md1_wait_quantile(rho, work, q)
        last_q = extra if shared > tail else 0.0
        # Its own steps at the quantile: a long prompt (the lengths' q-quantile) beside a batch at
        # its q-quantile (a larger batch leaves smaller chunks, so more steps).
        own_q = self._own_service(poisson_quantile_smooth(n, q), self.prompt_quantile(q))[0]
        spread = math.sqrt(max(res_q - residual, 0.0) ** 2 + max(wait_q - mean_wait, 0.0) ** 2
                           + max(last_q - shared * extra, 0.0) ** 2 + max(own_q - service, 0.0) ** 2)
        return residual + mean_wait + shared * extra + spread + service

    # -- one load -------------------------------------------------------------------------------
    def at(self, qps: float) -> Point:
        """The replica at an open-loop (Poisson) arrival rate."""
        tpot, u = self._tpot_and_share(qps)
        q = QUANTILES.get(self._stat)
        if not math.isfinite(tpot):
            reason = (f"prefill alone needs {u:.0%} of the replica" if u >= 1 else
                      "decode steps slow faster than the load they carry: TPOT has no steady state")
            return _unstable(qps, u, reason, self._stat)
        n = self.in_flight(qps, tpot)
        queue = self._prefill_queue(qps, n)            # once: every TTFT figure below reads it
        rho = queue[0]
        if rho >= 1:
            reason = (f"prompts arrive faster than chunks of {max(self.batched_tokens - n, 1):.0f} tokens "
                      f"drain beside {n:.0f} decodes (prefill queue at {rho:.0%})")
            return _unstable(qps, u, reason, self._stat, tpot, n)
        if n >= self.memory.max_seqs:
            reason = (f"Little's law needs {n:.0f} sequences in flight; the KV cache (or max_num_seqs) "
                      f"holds {self.memory.max_seqs}")
            return _unstable(qps, u, reason, self._stat, tpot, n)
        stay = self.ttft0_s + (self.s_out - 1) * tpot
        kv_mean, kv95 = erlang_c_wait(self.memory.max_seqs, n, stay)
        ttft_mean = self._ttft_prefill(qps, n, tpot, None, queue) + kv_mean
        ttft95 = self._ttft_prefill(qps, n, tpot, 0.95, queue) + kv95
        ttft_q = ttft_mean if q is None else (
            ttft95 if q == 0.95 else self._ttft_prefill(qps, n, tpot, q, queue) + erlang_c_wait(self.memory.max_seqs, n, stay, q)[1])
        tpot95 = self._tpot_at(n, u, 0.95)
        tpot_q = self._tpot_at(n, u, q)
        return Point(
            qps=qps, prefill_share=u, ttft_ms=1e3 * ttft_mean, ttft_p95_ms=1e3 * ttft95,
            tpot_ms=1e3 * tpot, tpot_p95_ms=1e3 * tpot95, in_flight=n,
            kv_cache_gb=n * (self.s_in + self.s_out) * self.kv_tok / GB,
            queue_ms=1e3 * (ttft_mean - queue[2]), stable=True,
            statistic=self._stat, ttft_at_statistic_ms=1e3 * ttft_q, tpot_at_statistic_ms=1e3 * tpot_q,
        )

    def latencies_at(self, qps: float, q: float | None) -> tuple[float, float]:
        """(TTFT, TPOT) in s at a statistic, without the KV-admission wait (capacity keeps the batch
        within the KV cache separately): the cheap path the capacity search uses."""
        tpot, u = self._tpot_and_share(qps)
        if not math.isfinite(tpot):
            return math.inf, math.inf
        n = self.in_flight(qps, tpot)
        return self._ttft_prefill(qps, n, tpot, q), self._tpot_at(n, u, q)

    # -- capacity ---------------------------------------------------------------------------------
    def load_ceilings(self) -> tuple[float, float]:
        """(kv, prefill): the QPS that fills the KV cache (or max_num_seqs) by Little's law, and the
        QPS at which prefill alone takes the whole replica. The one place either is written."""
        return self.qps_at_batch(self.memory.max_seqs), 1 / self.share_per_request_s

    def capacity(self, statistic: str | None = None, detail: bool = True, iterations: int = 11) -> Capacity:
        """The largest QPS within the SLOs at the statistic, the KV cache and the prefill share.

        With detail, each latency constraint's own limit (one search each); without (the sweep),
        one search for both, which leaves the non-binding one at the binding one's value."""
        w = self.workload
        stat = statistic or self._stat
        q = QUANTILES.get(stat)
        kv, prefill = self.load_ceilings()
        top = min(kv, prefill)
        if not detail:
            def both(lam: float) -> bool:      # TPOT first: a miss there skips the TTFT queue
                tpot, u = self._tpot_and_share(lam)
                if not math.isfinite(tpot):
                    return False
                n = self.in_flight(lam, tpot)
                # `_tpot_at` at the mean, inline (the search's inner loop)
                tpot_q = (self.step_s(n) / (1 - u) if u < 1 else math.inf) if q is None else self._tpot_at(n, u, q)
                return tpot_q <= w.tpot_slo_s and self._ttft_prefill(lam, n, tpot, q) <= w.ttft_slo_s
            # TPOT at any statistic is at least the mean: the mean's closed form bounds the search.
            lam = _largest(both, min(top, self.tpot_capacity_qps(w.tpot_slo_s)), iterations)
            ttft, tpot = self.latencies_at(lam * (1 + 1e-3), q) if lam < top else (0.0, 0.0)
            which = "ttft" if ttft > w.ttft_slo_s and tpot <= w.tpot_slo_s else "tpot"
            caps = {"kv": kv, "prefill": prefill, which: lam}
            binding = min(caps, key=caps.get)
            return Capacity(qps=caps[binding], binding=binding, by_constraint=caps, statistic=stat)
        if q is None and self.additive:
            tpot = self.tpot_capacity_qps(w.tpot_slo_s)
        else:
            tpot = _largest(lambda lam: self.latencies_at(lam, q)[1] <= w.tpot_slo_s, top)
        ttft = _largest(lambda lam: self.latencies_at(lam, q)[0] <= w.ttft_slo_s, min(top, tpot * 1.5 + 1e-9))
        caps = {"kv": kv, "prefill": prefill, "tpot": tpot, "ttft": ttft}   # ties: the structural limit
        binding = min(caps, key=caps.get)
        return Capacity(qps=caps[binding], binding=binding, by_constraint=caps, statistic=stat)

    def tpot_capacity_qps(self, slo_s: float) -> float:
        """QPS at which mean TPOT reaches the SLO (closed form per branch; `mixed` refines p)."""
        lam = self._tpot_capacity_fixed_p(slo_s, self.prefill_token_s)
        if not self.additive:
            for _ in range(3):
                if not (math.isfinite(lam) and lam > 0):
                    break
                lam = self._tpot_capacity_fixed_p(slo_s, self.prefill_token_cost_s(self.in_flight(lam, slo_s)))
        return lam

    def _tpot_capacity_fixed_p(self, slo_s: float, p: float) -> float:
        lam = math.inf
        share = self.s_in * p
        for a, b in self.branches:
            if slo_s <= a:
                return 0.0
            lam = min(lam, (slo_s - a) / (slo_s * share + b * (self.ttft0_s + (self.s_out - 1) * slo_s)))
        return lam

    def qps_at_batch(self, n: float) -> float:
        """The arrival (or completion) rate that keeps exactly n sequences running.

        Solves QPS (TTFT0 + (s_out - 1) step(n) / (1 - QPS s_in p)) = n: a quadratic in QPS.
        """
        if n <= 0:
            return 0.0
        a, c = self.ttft0_s, (self.s_out - 1) * self.step_s(n)
        p = self.s_in * self.prefill_token_cost_s(n)
        bq = a + c + n * p
        disc = bq * bq - 4 * a * p * n
        return (bq - math.sqrt(max(disc, 0.0))) / (2 * a * p)

    # -- closed loop ------------------------------------------------------------------------------
    def closed_loop(self, clients: int) -> dict:
        """N clients that each send a request when their last one finished.

        m = min(N, max_seqs) run; the rest wait for a slot. The throughput X solves Little's law
        X (TTFT(X) + (s_out - 1) TPOT(X)) = m with TTFT(X) the chunked-prefill queue at rate X
        (bisection: the left side rises with X). Each client's cycle is N / X, so
        TTFT = N / X - (s_out - 1) TPOT: finite, and linear in N past saturation.
        """
        m = float(min(clients, self.memory.max_seqs))
        hi = self.qps_at_batch(m)

        def cycle(x: float) -> float:
            tpot, _ = self._tpot_and_share(x)
            if not math.isfinite(tpot):
                return math.inf
            return self._ttft_prefill(x, self.in_flight(x, tpot), tpot, None) + (self.s_out - 1) * tpot

        lo = 0.0
        for _ in range(40):
            mid = (lo + hi) / 2
            if mid * cycle(mid) < m:
                lo = mid
            else:
                hi = mid
        x = lo
        tpot, u = self._tpot_and_share(x)
        ttft = clients / x - (self.s_out - 1) * tpot if x > 0 else math.inf
        n = self.in_flight(x, tpot)
        q = QUANTILES.get(self._stat)
        tpot_q = self._tpot_at(n, u, q)
        waiting = max(0.0, clients - m)
        queue = waiting / x if x > 0 else math.inf
        return {
            "clients": clients, "running": m, "waiting": waiting,
            "requests_per_s": x, "output_tokens_per_s": x * self.s_out,
            "ttft_ms": 1e3 * ttft, "tpot_ms": 1e3 * tpot, "tpot_at_statistic_ms": 1e3 * tpot_q,
            "queue_ms": 1e3 * queue, "prefill_share": u,
            "kv_cache_gb": m * (self.s_in + self.s_out) * self.kv_tok / GB,
        }

    def closed_point(self, clients: int, cl: dict | None = None) -> Point:
        """The replica under N closed-loop clients, as a Point: TTFT is the cycle bound N / X less
        the decode time (finite for any N), its tail the chunked-prefill queue's spread at X.
        `cl`: `closed_loop(clients)` when the caller has it already (its bisection, once)."""
        cl = cl or self.closed_loop(clients)
        x, tpot = cl["requests_per_s"], cl["tpot_ms"] / 1e3
        if not (x > 0 and math.isfinite(tpot)):
            return _unstable(x, cl["prefill_share"], "no throughput at this batch", self._stat)
        n = self.in_flight(x, tpot)
        q = QUANTILES.get(self._stat)
        ttft = cl["ttft_ms"] / 1e3

        def spread(qq: float | None) -> float:
            if qq is None:
                return 0.0
            mean = self._ttft_prefill(x, n, tpot, None)
            return max(self._ttft_prefill(x, n, tpot, qq) - mean, 0.0) if math.isfinite(mean) else 0.0

        return Point(
            qps=x, prefill_share=cl["prefill_share"], ttft_ms=1e3 * ttft, ttft_p95_ms=1e3 * (ttft + spread(0.95)),
            tpot_ms=1e3 * tpot, tpot_p95_ms=1e3 * self._tpot_at(n, cl["prefill_share"], 0.95),
            in_flight=cl["running"], kv_cache_gb=cl["kv_cache_gb"], queue_ms=cl["queue_ms"], stable=True,
            statistic=self._stat, ttft_at_statistic_ms=1e3 * (ttft + spread(q)),
            tpot_at_statistic_ms=cl["tpot_at_statistic_ms"])

    def max_clients_within_slo(self) -> int:
        """The most closed-loop clients one replica serves with TTFT and TPOT in SLO (mean TTFT,
        the cycle bound; TPOT at the workload's statistic)."""
        w = self.workload

        def ok(c: int) -> bool:
            r = self.closed_loop(c)
            return r["ttft_ms"] <= 1e3 * w.ttft_slo_s and r["tpot_at_statistic_ms"] <= 1e3 * w.tpot_slo_s

        if not ok(1):
            return 0
        lo, hi = 1, 2
        while ok(hi) and hi < 1 << 20:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo


def _residual_quantile(tail: float, p_long: float, long: float, p_short: float, short: float) -> float:
    """t with P(R > t) = tail, R uniform on [0, long] with probability p_long, on [0, short] with
    p_short, else 0 (the replica idle)."""
    if p_long + p_short <= tail:
        return 0.0
    if long > 0 and p_long > tail and long * (1 - tail / p_long) >= short:
        return long * (1 - tail / p_long)
    rate = (p_long / long if long > 0 else 0.0) + (p_short / short if short > 0 else 0.0)
    return (p_long + p_short - tail) / rate if rate > 0 else 0.0


def _largest(ok, top: float, iterations: int = 11) -> float:
    """The largest load in (0, top] for which ok holds (ok true below, false above), to 0.05% of
    top: the part of the range where it changes (above or below 70% of top), then halving."""
    if not (math.isfinite(top) and top > 0):
        return 0.0
    if ok(top):
        return top
    lo, hi = (0.7 * top, top) if ok(0.7 * top) else (0.0, 0.7 * top)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _unstable(qps, u, reason, stat, tpot=math.inf, n=math.inf) -> Point:
    inf = math.inf
    return Point(qps, u, inf, inf, 1e3 * tpot, inf, n, inf, inf, False, reason, stat, inf, inf)


def activation_gb(model: Model, tp: int, batched_tokens: int, max_seqs: int) -> float:
    """Per GPU, the activation peak of a step of `batched_tokens` tokens as vLLM's start-up
    profiling run sees it: the MLP's gate/up output and the residual stream (BF16) plus the
    sampler's FP32 logits for max_num_seqs sequences."""
    tokens = batched_tokens * (2 * 2 * model.ffn / tp + 4 * model.hidden)
    logits = max_seqs * model.vocab * 4 / tp
    return (tokens + logits) / GB


def memory(shape: Shape, workload: Workload, profile: Profile, batched_tokens: int | None = None) -> Memory:
    """The replica's memory; `batched_tokens` (max_num_batched_tokens) sets the activation peak
    (default: the smallest chunk beside the profile's max_num_seqs).

    `kv_accounting: vllm` follows vLLM 0.29.0 (`sizing.vllm_engine`): gpu_memory_utilization x the
    memory the driver reports, less weights, activation peak, CUDA graphs and runtime memory, in
    blocks of 16 tokens, one held back; a running sequence holds the blocks of the tokens it has
    so far, so at saturation the batch is the blocks over a sequence's average resident blocks.
    `fixed` (the seed) reserves each sequence's whole mean request."""
    m, gpu, tp = shape.model, shape.instance.gpu, shape.tp
    batched_tokens = batched_tokens or CHUNK_MIN + profile.max_num_seqs
    w = parallel.replica_weight_bytes(shape)
    # KV bytes per token at the mean request's context (sliding-window layers hold at most their window)
    kv_tok = parallel.kv_bytes_per_token(shape, workload.input_tokens + workload.output_tokens)
    vllm = profile.kv_accounting == "vllm"
    seqs_cap = engine_max_num_seqs(shape, profile)
    act = activation_gb(m, tp, batched_tokens, seqs_cap) if vllm else 0.0
    graphs = profile.cuda_graph_gb if vllm else 0.0
    total_gb = reported_memory_bytes(gpu) / GB if vllm else gpu.memory_gb
    usable = total_gb * profile.gpu_memory_utilization - profile.runtime_overhead_gb - act - graphs
    budget = shape.gpus * usable * GB - w      # weights and KV spread over every stage's GPUs
    if vllm:
        block = profile.block_tokens
        blocks = max(0, int(budget // (block * kv_tok))) if budget > 0 else 0
        kv_cache_tokens = blocks * block
        per_seq = (resident_blocks(workload, block) if profile.kv_reservation == "grow"
                   else blocks_for(workload.input_tokens + workload.output_tokens, block))
        seqs = int(max(0, blocks - NULL_BLOCKS) // per_seq)
    else:
        kv_cache_tokens = max(0, int(budget // kv_tok)) if budget > 0 else 0
        seqs = max(0, int(budget // ((workload.input_tokens + workload.output_tokens) * kv_tok))) if budget > 0 else 0
    return Memory(
        weights_gb=w / GB, weights_per_gpu_gb=w / shape.gpus / GB, usable_per_gpu_gb=usable, activation_gb=act,
        cuda_graph_gb=graphs, kv_budget_gb=max(budget, 0) / GB, kv_bytes_per_token=kv_tok,
        kv_cache_tokens=kv_cache_tokens, max_model_len=workload.served_max_len,
        max_seqs_kv=seqs, max_seqs=min(seqs, seqs_cap), total_gb=shape.gpus * gpu.memory_gb,
    )


def engine_max_num_seqs(shape: Shape, profile: Profile) -> int:
    """The engine's cap on running sequences: vLLM 0.29.0's default for the GPU class under vLLM
    accounting (the plan sets no other, `sizing.vllm_engine.batch_defaults`); the seed's figure
    under the reference profile."""
    return batch_defaults(shape.instance.gpu)[1] if profile.kv_accounting == "vllm" else profile.max_num_seqs


def resident_blocks(workload: Workload, block: int = BLOCK_TOKENS) -> float:
    """Blocks a running sequence holds on average over its life: its context averaged over its
    decode steps, plus half a block (the last block is partly filled), less the blocks of a
    prefix found in the cache: those are shared, held once for all the batch (not counted)."""
    return (workload.decode_context_tokens - workload.cached_prompt_tokens) / block + 0.5


def kv_blocks_needed(tokens: int, block: int = BLOCK_TOKENS) -> int:
    """vLLM's start-up check (check_enough_kv_cache_memory): blocks for one max_model_len request
    plus the null block."""
    return blocks_for(tokens, block) + NULL_BLOCKS


def candidate_tps(model: Model, instance: Instance) -> list[int]:
    """The TP degrees a replica may take: within one node, splitting the attention heads (and an
    MoE model's experts, sizing.parallel.fits_tp)."""
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= instance.gpus and not parallel.fits_tp(model, tp)]


def layout_refusal(shape: Shape) -> tuple[str, str] | None:
    """(why, field) when the layout or precision cannot run this model on this GPU at all."""
    m, tp = shape.model, shape.tp
    if shape.layout not in parallel.LAYOUTS:
        return f"unknown layout '{shape.layout}'; choose one of: {', '.join(parallel.LAYOUTS)}", "layout"
    if shape.layout == "dp-ep" and not m.is_moe:
        return f"expert parallelism does not apply to {m.id}: a dense model has no experts", "layout"
    if shape.layout == "tp" and parallel.fits_tp(m, tp):
        return (f"{parallel.fits_tp(m, tp)}; use one of {', '.join(map(str, candidate_tps(m, shape.instance)))}",
                "tp")
    native_fp4 = m.arch is not None and m.arch.quantization.method == "mxfp4"
    if shape.weights == "fp4" and "fp4" not in m.checkpoints:
        return f"no FP4 checkpoint of {m.id} in the catalog (vLLM does not quantize to FP4 at load)", "weights"
    if native_fp4 and shape.weights != "fp4" and shape.weights not in m.checkpoints:
        return (f"{m.id} is published in MXFP4 only: serve it with fp4 weights (Hopper runs them "
                "as W4A16)"), "weights"
    return None


def check_shape(shape: Shape, workload: Workload, profile: Profile) -> Memory:
    """Raise SizingError naming the constraint when a shape cannot run the workload at all; else
    the memory it checked (at the smallest step budget: `ReplicaModel(checked=...)` reads it)."""
    m, inst, tp = shape.model, shape.instance, shape.tp
    if tp < 1 or tp > inst.gpus:
        raise SizingError(f"tensor parallel {tp} exceeds the {inst.gpus} GPUs of one {inst.id} node "
                          f"(a TP group never spans nodes); use at most {inst.gpus}", "tp")
    check_nodes(shape)
    refusal = layout_refusal(shape)
    if refusal:
        raise SizingError(*refusal)
    mem = memory(shape, workload, profile, CHUNK_MIN + profile.max_num_seqs)
    if mem.weights_per_gpu_gb >= mem.usable_per_gpu_gb:
        can_tp, can_fp8 = tp < inst.gpus and shape.layout == "tp", shape.weights in ("bf16", "fp16")
        advice = {(True, True): "raise TP, use fp8 weights or a larger GPU", (True, False): "raise TP or use a larger GPU",
                  (False, True): "use fp8 weights or a larger GPU",
                  (False, False): "use a larger GPU or a replica over several nodes"}[(can_tp, can_fp8)]
        where = replica_words(shape)
        raise SizingError(
            f"{shape.weights} weights of {m.id} need {mem.weights_per_gpu_gb:.1f} GB per GPU at {where}, "
            f"more than the {mem.usable_per_gpu_gb:.1f} GB usable on a {inst.gpu.id} "
            f"({advice})", "weights")
    check_served_length(shape, workload, profile, mem)
    return mem


def check_served_length(shape: Shape, workload: Workload, profile: Profile, mem: Memory) -> None:
    """max_model_len within the model's context, and one request of it in the KV cache: vLLM
    0.29.0 refuses to start otherwise (kv_cache_utils.check_enough_kv_cache_memory)."""
    m, served = shape.model, workload.served_max_len
    limit = m.context_tokens
    if limit and served > limit:
        raise SizingError(
            f"max_model_len {served:,} is above the {limit:,}-token context of {m.id} (max_position_embeddings); "
            f"state a maximum of at most {limit:,} (longer requests are refused)", "workload.max_model_len")
    block = profile.block_tokens
    have = mem.kv_cache_tokens // block
    if have < kv_blocks_needed(served, block):
        raise SizingError(
            f"no room for one request of max_model_len {served:,} tokens: the KV cache beside the weights "
            f"holds {max(have - NULL_BLOCKS, 0) * block:,} tokens at {layout_words(shape)} on {shape.instance.gpu.id}, and "
            "vLLM refuses to start (raise TP, use fp8 KV, or lower the stated maximum)", "workload.max_model_len")


MAX_NODES_PER_REPLICA = 4     # the planner and the sweep try replicas of up to this many nodes (PP=2..4)


def layout_words(shape: Shape) -> str:
    """"TP=8", or "TP=8 x PP=2 (2 nodes)" for a replica that spans nodes."""
    return f"TP={shape.tp}" if shape.nodes == 1 else f"TP={shape.tp} x PP={shape.nodes} ({shape.nodes} nodes)"


def replica_words(shape: Shape) -> str:
    """How messages name a replica's layout: `layout_words` for TP, "dp-ep over 8 GPUs" otherwise."""
    return layout_words(shape) if shape.layout == "tp" else f"{shape.layout} over {shape.tp} GPUs"


def check_nodes(shape: Shape) -> None:
    """A replica spans nodes only as vLLM 0.29.0 lays it out across nodes: TP fills each node,
    PP = the node count (docs/serving/parallelism_scaling.md at v0.29.0: "set tensor_parallel_size
    to the number of GPUs per node and pipeline_parallel_size to the number of nodes")."""
    inst, n = shape.instance, shape.nodes
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SizingError(f"nodes per replica: must be an integer of at least 1 (got {n!r})")
    if n > 1 and getattr(shape, "layout", "tp") != "tp":
        raise SizingError(f"a replica spanning {n} nodes runs tensor parallel within a node and pipeline "
                          f"stages across nodes; layout {shape.layout} stays within one node", "layout")
    if n > 1 and shape.tp != inst.gpus:
        raise SizingError(f"a replica spanning {n} nodes runs TP={inst.gpus} (every GPU of each {inst.id}) "
                          f"and PP={n} across them; TP={shape.tp} leaves GPUs of each node idle", "tp")
    if n > shape.model.layers:
        raise SizingError(f"{n} pipeline stages exceed the {shape.model.layers} layers of {shape.model.id}",
                          "pools")
