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
- The API server (the profile's `request_overhead_ms`, 0 by default): a FIFO single server of
  that serial CPU time per request in front of the engine. TTFT adds its M/D/1 time at the QPS;
  capacity is at most 1 / overhead requests/s (`server` in `Capacity.by_constraint`, binding when
  the engine and the SLOs would carry more).
- Statistics: mean, or p50/p90/p95/p99 (Poisson arrivals: exponential queue tails; the batch a
  request sees is Poisson with Little's mean, M/G/inf). Capacity is the largest QPS at which TTFT
  and TPOT both hold at the workload's statistic, the batch fits the KV cache, and prefill does
  not saturate the replica.

"ideal" takes the roofline at face value (real_factor 1, full HBM bandwidth); "real" applies the
profile. The reference figures (../shared/reference/sizing-reference.md) reproduce exactly under
the `seed` profile, whose step model is the seed's.

The concepts it reads live beside it: the workload (`sizing.workload`), the replica's shape and
memory (`sizing.memory`) and whether a shape can run at all (`sizing.checks`, which `ReplicaModel`
takes as given: its `checked` argument is `check_shape`'s memory).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .memory import CHUNK_ALIGN, CHUNK_MAX, CHUNK_MIN, GB, Memory, Shape, engine_max_num_seqs, engine_ranks, memory
from .profiles import Profile
from .queueing import QUANTILES, erlang_c_wait, md1_wait_quantile, poisson_quantile_smooth
from .step import build_step, step_comm
from .workload import Workload

PROMPT_POINTS = 16          # prompt-length quantiles a varying prompt's own prefill is averaged over


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
    binding: str              # tpot | ttft | kv | prefill | server (the API server, request_overhead_ms)
    by_constraint: dict
    statistic: str = "mean"


class ReplicaModel:
    """One shape under one profile for one workload: the step model and the queues around it."""

    tokens_per_step = 1.0       # tokens a decode step emits per sequence (speculation: more)

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
        self.branches = _up_to(step.decode_branches(), float(engine_max_num_seqs(shape, profile) * engine_ranks(shape)))
        self.prefill_alone_s = step.prefill_s(s_in)          # one prompt, alone, unchunked
        # Per prompt token beyond the decode step, when a chunk is compute-bound (all of it, additive).
        self.prefill_token_s = step.prefill_token_s()
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
        # vLLM refuses a budget below max_num_seqs (SchedulerConfig): at least the engine's cap
        # (every rank's, under dp-ep: the budget here is the replica's).
        cap = engine_max_num_seqs(self.shape, self.profile) * engine_ranks(self.shape)
        return max(min(max(CHUNK_MIN, chunk), CHUNK_MAX) + self.memory.max_seqs, cap)

    def prompt_quantile(self, q: float) -> float:
        d = self.workload.lengths
        return self.s_in if d is None else max(1, d.input_quantile(q) - self.cached)

    # -- TPOT ---------------------------------------------------------------------------------
    def step_s(self, n: float) -> float:
        """The decode-only step with n sequences."""
        best = -math.inf
        for a, b in self.branches:
            x = a + b * n
            if x > best:
                best = x
        return best

    def prefill_token_cost_s(self, n: float) -> float:
        """p: seconds a prompt token adds to a step that decodes n and carries a full chunk."""
        if self.additive:
            return self.step.e
        n = min(n, float(self.memory.max_seqs))        # the engine runs no more (a fixed point's
        chunk = max(self.batched_tokens - n, 1.0)        # first pass past saturation may say more)
        # At least 0: a per-operation step may change kernels with the chunk (vLLM's custom
        # all-reduce for a decode step's small messages, NCCL for a mixed step's), which at a huge
        # decode batch can make the mixed step the cheaper one.
        p = (self.step.step_s(n, chunk) - self.step.decode_s(n)) / chunk
        return p if p > 0.0 else 0.0

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
        # (per token: a step that speculates emits `tokens_per_step` per sequence, sizing.speculative)
        ceiling = max(self.step.step_s(nq, max(self.batched_tokens - nq, 0.0)) / self.tokens_per_step, mean)
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
        if qps * self.server_s() >= 1:
            return _unstable(qps, u, f"the API server needs {qps * self.server_s():.0%} of its CPU "
                             f"({self.profile.request_overhead_ms:g} ms per request)", self._stat)
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
        ttft_mean = self._ttft_prefill(qps, n, tpot, None, queue) + kv_mean + self.server_wait_s(qps)
        ttft95 = self._ttft_prefill(qps, n, tpot, 0.95, queue) + kv95 + self.server_wait_s(qps, 0.95)
        ttft_q = ttft_mean if q is None else (
            ttft95 if q == 0.95 else self._ttft_prefill(qps, n, tpot, q, queue) + erlang_c_wait(self.memory.max_seqs, n, stay, q)[1]
            + self.server_wait_s(qps, q))
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
        within the KV cache separately) and with the API server's own time but not its queue (the
        `server` ceiling keeps the load within it): the cheap path the capacity search uses."""
        tpot, u = self._tpot_and_share(qps)
        if not math.isfinite(tpot):
            return math.inf, math.inf
        n = self.in_flight(qps, tpot)
        return self._ttft_prefill(qps, n, tpot, q) + self.server_s(), self._tpot_at(n, u, q)

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
        server = self.server_ceiling_qps()
        top = min(kv, prefill, server)
        if not detail:
            def both(lam: float) -> bool:      # TPOT first: a miss there skips the TTFT queue
                tpot, u = self._tpot_and_share(lam)
                if not math.isfinite(tpot):
                    return False
                n = self.in_flight(lam, tpot)
                # `_tpot_at` at the mean, inline (the search's inner loop)
                tpot_q = (self.step_s(n) / (1 - u) if u < 1 else math.inf) if q is None else self._tpot_at(n, u, q)
                return tpot_q <= w.tpot_slo_s and self._ttft_prefill(lam, n, tpot, q) + self.server_s() <= w.ttft_slo_s
            # TPOT at any statistic is at least the mean: the mean's closed form bounds the search.
            lam = _largest(both, min(top, self.tpot_capacity_qps(w.tpot_slo_s)), iterations)
            ttft, tpot = self.latencies_at(lam * (1 + 1e-3), q) if lam < top else (0.0, 0.0)
            which = "ttft" if ttft > w.ttft_slo_s and tpot <= w.tpot_slo_s else "tpot"
            caps = {"kv": kv, "prefill": prefill, **self._server_cap(server), which: lam}
            binding = min(caps, key=caps.get)
            return Capacity(qps=caps[binding], binding=binding, by_constraint=caps, statistic=stat)
        if q is None and self.additive:
            tpot = self.tpot_capacity_qps(w.tpot_slo_s)
        else:
            tpot = _largest(lambda lam: self.latencies_at(lam, q)[1] <= w.tpot_slo_s, top)
        ttft = _largest(lambda lam: self.latencies_at(lam, q)[0] <= w.ttft_slo_s, min(top, tpot * 1.5 + 1e-9))
        caps = {"kv": kv, "prefill": prefill, **self._server_cap(server), "tpot": tpot, "ttft": ttft}   # ties: the structural limit
        binding = min(caps, key=caps.get)
        return Capacity(qps=caps[binding], binding=binding, by_constraint=caps, statistic=stat)

    # -- the API server (the profile's request_overhead_ms) ------------------------------------------
    def server_s(self) -> float:
        """The API server's serial CPU time per request, s (0: not modelled)."""
        return self.profile.request_overhead_ms / 1e3

    def server_ceiling_qps(self) -> float:
        """The most requests per second the API server handles: 1 / its time per request."""
        d = self.server_s()
        return 1 / d if d > 0 else math.inf

    def server_wait_s(self, qps: float, q: float | None = None) -> float:
        """A request's time in the API server at an open-loop QPS, a FIFO single server of
        deterministic service D (M/D/1): D plus the mean wait rho D / (2 (1 - rho)), or plus the
        wait's q-quantile; 0 when not modelled, infinite past the ceiling."""
        d = self.server_s()
        if d <= 0:
            return 0.0
        rho = qps * d
        if rho >= 1:
            return math.inf
        return d + (rho * d / (2 * (1 - rho)) if q is None else md1_wait_quantile(rho, d, q))

    def _server_cap(self, server_qps: float) -> dict:
        """The `server` entry of Capacity.by_constraint: only where the profile models the server."""
        return {"server": server_qps} if math.isfinite(server_qps) else {}

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
        hi = min(self.qps_at_batch(m), self.server_ceiling_qps())

        def cycle(x: float) -> float:
            tpot, _ = self._tpot_and_share(x)
            if not math.isfinite(tpot):
                return math.inf
            return (self._ttft_prefill(x, self.in_flight(x, tpot), tpot, None) + (self.s_out - 1) * tpot
                    + self.server_wait_s(x))

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


def _up_to(lines: tuple, n_max: float) -> tuple:
    """The decode lines (ordered by slope, each binding from where it crosses the one before) that
    bind at some batch up to n_max: the engine runs no more sequences, so the rest never price a
    step (a per-operation step has a dozen lines; the capacity search loops over them)."""
    kept = list(lines[:1])
    for a, b in lines[1:]:
        pa, pb = kept[-1]
        if b > pb and (pa - a) / (b - pb) > n_max:
            break
        kept.append((a, b))
    return tuple(kept)


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
