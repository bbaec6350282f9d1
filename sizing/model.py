"""The analytic capacity model of one serving replica (one TP group).

Formulas (../shared/reference/sizing-reference.md), per replica of `tp` GPUs:
- F = tp x peak x MFU, B = tp x HBM bandwidth.
- prefill: FLOPs = 2 P s_in + 2 L s_in^2 h; t_prefill = FLOPs / F; prefill share u = QPS x t_prefill.
- decode step (ideal), a roofline: max(bytes / B, FLOPs / F) with
  bytes = weights + n (s_in + s_out/2) KV bytes/token and FLOPs = n (2 P_active + 4 L h ctx).
  Both branches are linear in n.
- TPOT = (real_factor x step + extra all-reduce time) / (1 - u); TTFT0 = real_factor x t_prefill.
- Little's law n = QPS (TTFT0 + (s_out - 1) TPOT). Because the step is linear in n, the fixed
  point of n and TPOT is solved exactly (per roofline branch), not iterated.
- capacity = the largest QPS that keeps mean TPOT and mean TTFT within their SLOs and Little's n
  within the KV cache (and the engine's max_num_seqs).

"ideal" uses real_factor = 1; "real" uses the profile's real_factor.

TP communication: the profile's factors were measured on NVSwitch nodes, so the all-reduce there
is inside them. On any other link the model adds the difference: two ring all-reduces per layer
(attention and MLP) of n x hidden BF16 activations in decode and s_in x hidden in prefill.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .catalog import Instance, Model, bytes_per_element, load_catalog
from .profiles import Profile
from .queueing import erlang_c_wait, md1_wait, poisson_quantile

GB = 1e9


class SizingError(ValueError):
    """A configuration the model cannot serve; the message names the constraint that fails.

    `option` names the input that can fix it, as the CLI names it ("--tp", "--weights", "SLOs";
    None when it is the layout or the load), so the CLI points at it without reading the message.
    """

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Workload:
    input_tokens: int = 1000
    output_tokens: int = 300
    ttft_slo_s: float = 1.0
    tpot_slo_s: float = 0.040
    qps: float | None = 10.0
    concurrency: int | None = None     # closed loop: this many clients, each waits for its answer

    @property
    def is_closed_loop(self) -> bool:
        return self.concurrency is not None


@dataclass(frozen=True)
class Shape:
    """What a replica is: a model at some precision on `tp` GPUs of one node type."""
    model: Model
    instance: Instance
    tp: int
    weights: str = "fp8"
    kv_dtype: str = "bf16"


@dataclass(frozen=True)
class Memory:
    weights_gb: float
    weights_per_gpu_gb: float
    usable_per_gpu_gb: float
    kv_budget_gb: float
    kv_bytes_per_token: float
    max_seqs_kv: int            # sequences whose full context (s_in + s_out) fits in the KV budget
    max_seqs: int               # that, capped by the engine's max_num_seqs
    total_gb: float


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
    queue_ms: float           # mean wait before prefill starts (prefill queue + KV admission)
    stable: bool


@dataclass(frozen=True)
class Capacity:
    qps: float
    binding: str              # tpot | ttft | kv | prefill
    by_constraint: dict


class ReplicaModel:
    """Precomputes the linear coefficients of one shape under one profile."""

    def __init__(self, shape: Shape, workload: Workload, profile: Profile, real: bool = True):
        m, inst, tp = shape.model, shape.instance, shape.tp
        gpu = inst.gpu
        self.shape, self.workload, self.profile, self.real = shape, workload, profile, real
        rf = profile.real_factor if real else 1.0
        s_in, s_out = workload.input_tokens, workload.output_tokens
        F = tp * gpu.peak_tflops(shape.weights) * 1e12 * profile.mfu
        B = tp * gpu.hbm_tbps * 1e12
        P_active = m.active_params_b * 1e9
        self.weight_bytes = m.weight_bytes(shape.weights)
        self.kv_tok = m.kv_bytes_per_token(shape.kv_dtype)
        ctx = s_in + s_out / 2

        # Extra all-reduce time versus the link the profile was measured on (>= 0).
        base = load_catalog().links[profile.comm_baseline_link]
        link = inst.link
        ring = 2 * (tp - 1)
        act = bytes_per_element("bf16") * m.hidden
        d_lat = max(0.0, link.latency_us - base.latency_us) * 1e-6
        d_inv_bw = max(0.0, 1 / (link.bandwidth_gbps * GB) - 1 / (base.bandwidth_gbps * GB))
        calls = 2 * m.layers
        comm0 = calls * ring * d_lat
        comm1 = calls * (ring / tp) * act * d_inv_bw if tp > 1 else 0.0
        self.prefill_comm_s = comm0 + comm1 * s_in if tp > 1 else 0.0
        if tp == 1:
            comm0 = comm1 = 0.0

        self.prefill_s = (2 * P_active * s_in + 2 * m.layers * s_in**2 * m.hidden) / F
        self.share_per_request_s = self.prefill_s + self.prefill_comm_s  # u = QPS x this
        self.ttft0_s = rf * self.prefill_s + self.prefill_comm_s
        # step(n) = max(A1 + B1 n, A2 + B2 n): memory and compute branches of the roofline.
        self.branches = (
            (rf * self.weight_bytes / B + comm0, rf * ctx * self.kv_tok / B + comm1),
            (comm0, rf * n_flops(P_active, m.layers, m.hidden, ctx) / F + comm1),
        )
        self.s_out = s_out
        self.memory = memory(shape, workload, profile)

    # -- one load -------------------------------------------------------------------------
    def step_s(self, n: float) -> float:
        return max(a + b * n for a, b in self.branches)

    def tpot_s(self, qps: float) -> float:
        """Mean TPOT at an open-loop QPS: the exact fixed point of Little's law and the step."""
        u = qps * self.share_per_request_s
        if u >= 1:
            return math.inf
        worst = 0.0
        for a, b in self.branches:
            denom = (1 - u) - b * qps * (self.s_out - 1)
            if denom <= 0:
                return math.inf
            worst = max(worst, (a + b * qps * self.ttft0_s) / denom)
        return worst

    def in_flight(self, qps: float, tpot_s: float) -> float:
        return qps * (self.ttft0_s + (self.s_out - 1) * tpot_s)

    def at(self, qps: float) -> Point:
        """The replica at an open-loop (Poisson) arrival rate."""
        u = qps * self.share_per_request_s
        tpot = self.tpot_s(qps)
        if not math.isfinite(tpot):
            return Point(qps, u, math.inf, math.inf, math.inf, math.inf, math.inf, math.inf, math.inf, False)
        n = self.in_flight(qps, tpot)
        # Prefill queue: M/D/1 on the prefill share; KV admission: M/M/c with c = max_seqs.
        pf_wait, pf_wait_p95 = md1_wait(u, self.ttft0_s)
        service = self.ttft0_s + (self.s_out - 1) * tpot
        kv_wait, kv_wait_p95 = erlang_c_wait(self.memory.max_seqs, n, service)
        stable = math.isfinite(kv_wait) and u < 1
        # TPOT p95: a request sees the Poisson number of sequences alongside it (M/G/inf, mean n)
        # and the Poisson number of prefills arriving in its lifetime (mean n too, by Little).
        n95 = poisson_quantile(n, 0.95)
        u95 = u * n95 / n if n > 0 else u
        tpot95 = self.step_s(n95) / (1 - u95) if u95 < 1 else math.inf
        return Point(
            qps=qps, prefill_share=u,
            ttft_ms=1e3 * (self.ttft0_s + pf_wait + kv_wait),
            ttft_p95_ms=1e3 * (self.ttft0_s + pf_wait_p95 + kv_wait_p95),
            tpot_ms=1e3 * tpot, tpot_p95_ms=1e3 * max(tpot95, tpot),
            in_flight=n,
            kv_cache_gb=n * (self.workload.input_tokens + self.s_out) * self.kv_tok / GB,
            queue_ms=1e3 * (pf_wait + kv_wait), stable=stable,
        )

    # -- capacity -------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        w = self.workload
        caps = {
            "tpot": self.tpot_capacity_qps(w.tpot_slo_s),
            "ttft": self.ttft_capacity_qps(w.ttft_slo_s),
            "kv": self.qps_at_batch(self.memory.max_seqs),
            "prefill": 1 / self.share_per_request_s,
        }
        binding = min(caps, key=caps.get)
        return Capacity(qps=caps[binding], binding=binding, by_constraint=caps)

    def tpot_capacity_qps(self, slo_s: float) -> float:
        """QPS at which mean TPOT reaches the SLO: TPOT = slo solved for QPS, per branch."""
        lam = math.inf
        for a, b in self.branches:
            if slo_s <= a:
                return 0.0
            lam = min(lam, (slo_s - a) / (slo_s * self.share_per_request_s
                                          + b * (self.ttft0_s + (self.s_out - 1) * slo_s)))
        return lam

    def ttft_capacity_qps(self, slo_s: float) -> float:
        """QPS at which the mean TTFT (prefill plus its M/D/1 queue) reaches the SLO."""
        slack = slo_s - self.ttft0_s
        if slack <= 0:
            return 0.0
        rho = 2 * slack / (self.ttft0_s + 2 * slack)
        return rho / self.share_per_request_s

    def qps_at_batch(self, n: float) -> float:
        """The arrival (or completion) rate that keeps exactly n sequences running.

        Solves QPS (TTFT0 + (s_out - 1) step(n) / (1 - QPS t_share)) = n: a quadratic in QPS.
        Also the closed-loop throughput of n always-busy clients.
        """
        if n <= 0:
            return 0.0
        a, c, p = self.ttft0_s, (self.s_out - 1) * self.step_s(n), self.share_per_request_s
        bq = a + c + n * p
        disc = bq * bq - 4 * a * p * n
        return (bq - math.sqrt(max(disc, 0.0))) / (2 * a * p)

    # -- closed loop ----------------------------------------------------------------------
    def closed_loop(self, clients: int, think_s: float = 0.0) -> dict:
        """N clients that each send a request when their last one finished (plus think time).

        Running sequences n = min(N, max_seqs); the rest wait for a KV slot. With think time,
        n solves N = n + X think (X the throughput), found by bisection.
        """
        cap = self.memory.max_seqs
        if think_s > 0:
            lo, hi = 0.0, float(min(clients, cap))
            for _ in range(60):
                mid = (lo + hi) / 2
                if mid + self.qps_at_batch(mid) * think_s < clients:
                    lo = mid
                else:
                    hi = mid
            n = lo
        else:
            n = float(min(clients, cap))
        x = self.qps_at_batch(n)
        u = x * self.share_per_request_s
        tpot = self.step_s(n) / (1 - u)
        waiting = max(0.0, clients - n - x * think_s)
        queue = waiting / x if x > 0 else math.inf
        return {
            "clients": clients, "running": n, "waiting": waiting,
            "requests_per_s": x, "output_tokens_per_s": x * self.s_out,
            "ttft_ms": 1e3 * (self.ttft0_s + queue), "tpot_ms": 1e3 * tpot,
            "queue_ms": 1e3 * queue, "prefill_share": u,
            "kv_cache_gb": n * (self.workload.input_tokens + self.s_out) * self.kv_tok / GB,
        }

    def max_clients_within_slo(self) -> int:
        """The most closed-loop clients one replica serves with mean TTFT and TPOT in SLO."""
        w = self.workload

        def ok(c: int) -> bool:
            r = self.closed_loop(c)
            return r["ttft_ms"] <= 1e3 * w.ttft_slo_s and r["tpot_ms"] <= 1e3 * w.tpot_slo_s

        if not ok(1):
            return 0
        lo, hi = 1, 2
        while ok(hi) and hi < 1 << 20:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo


def n_flops(p_active: float, layers: int, hidden: int, ctx: float) -> float:
    """FLOPs one decode token costs: the matmuls plus attention over its context."""
    return 2 * p_active + 4 * layers * hidden * ctx


def memory(shape: Shape, workload: Workload, profile: Profile) -> Memory:
    m, gpu, tp = shape.model, shape.instance.gpu, shape.tp
    w = m.weight_bytes(shape.weights)
    kv_tok = m.kv_bytes_per_token(shape.kv_dtype)
    usable = gpu.memory_gb * profile.gpu_memory_utilization - profile.runtime_overhead_gb
    budget = tp * usable * GB - w
    per_seq = (workload.input_tokens + workload.output_tokens) * kv_tok
    seqs = max(0, int(budget // per_seq)) if budget > 0 else 0
    return Memory(
        weights_gb=w / GB, weights_per_gpu_gb=w / tp / GB, usable_per_gpu_gb=usable,
        kv_budget_gb=max(budget, 0) / GB, kv_bytes_per_token=kv_tok,
        max_seqs_kv=seqs, max_seqs=min(seqs, profile.max_num_seqs), total_gb=tp * gpu.memory_gb,
    )


def check_shape(shape: Shape, workload: Workload, profile: Profile) -> None:
    """Raise SizingError naming the constraint when a shape cannot run the workload at all."""
    m, inst, tp = shape.model, shape.instance, shape.tp
    if tp < 1 or tp > inst.gpus:
        raise SizingError(f"tensor parallel {tp} exceeds the {inst.gpus} GPUs of one {inst.id} node "
                          "(a TP group never spans nodes)", option="--tp")
    if m.heads % tp:
        raise SizingError(f"tensor parallel {tp} does not divide the {m.heads} attention heads of {m.id}",
                          option="--tp")
    mem = memory(shape, workload, profile)
    if mem.weights_per_gpu_gb >= mem.usable_per_gpu_gb:
        raise SizingError(
            f"{shape.weights} weights of {m.id} need {mem.weights_per_gpu_gb:.1f} GB per GPU at TP={tp}, "
            f"more than the {mem.usable_per_gpu_gb:.1f} GB usable on a {inst.gpu.id} "
            "(raise TP, use fp8 weights or a larger GPU)", option="--weights")
    if mem.max_seqs_kv < 1:
        raise SizingError(
            f"no room for one sequence's KV cache ({workload.input_tokens + workload.output_tokens} tokens) "
            f"beside the weights at TP={tp} on {inst.gpu.id}")
