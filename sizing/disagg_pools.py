"""One replica of each disaggregated role, priced from the existing step, memory and queue models.

- Prefill replica (`prefill_role`): chunked prefill only. It runs each request with one output
  token (the producer's `max_tokens=1` of vLLM's P/D flow), so it is `sizing.model.ReplicaModel`
  on the workload with `output_tokens=1`: the same chunked-prefill M/G/1 queue, prompt-length
  quantiles and SLO statistic, with the TTFT SLO less what the hand-off and the decode's first
  step take (`prefill_ttft_budget_s`) and no TPOT SLO of its own (its chunk is the engine's
  largest, CHUNK_MAX). Its KV stays resident for the transfer after the prefill (`kv_transfer`):
  the KV cache bounds in-flight prompts x (prefill + transfer).
- Decode replica (`decode_role`): decode-only steps (`ReplicaModel.step_s`, at the decode context
  ISL + OSL / 2), no prefill interference. A request holds its KV from admission (the blocks are
  allocated before the read) through the transfer and its `output_tokens` steps, so Little's law
  n = QPS (transfer + s_out step(n)), a fixed point solved per step branch. TPOT at a statistic is
  the step at the Poisson quantile of the batch (M/G/inf), widened as the aggregated model widens
  it (the batch's feedback on itself). Capacity: the largest QPS with TPOT at the statistic within
  the SLO and the batch within the KV cache (or max_num_seqs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .checks import check_shape
from .memory import Shape
from .model import Capacity, Point, ReplicaModel
from .profiles import Profile
from .queueing import QUANTILES, erlang_c_wait, poisson_quantile_smooth
from .roles import KvTransfer
from .workload import SizingError, Workload

PREFILL_TPOT_SLO_S = 3600.0   # a prefill replica emits one token: no TPOT SLO binds it
SEARCH_STEPS = 40


@dataclass(frozen=True)
class PrefillRole:
    model: ReplicaModel
    capacity: Capacity           # requests/s per replica at the TTFT budget, the KV and the queue
    ttft_budget_s: float


@dataclass(frozen=True)
class DecodeRole:
    model: ReplicaModel
    capacity: Capacity
    transfer_s: float            # the hand-off during which the decode already holds the KV


def prefill_ttft_budget_s(w: Workload, transfer: KvTransfer) -> float:
    """What the TTFT SLO leaves the prefill pool: less the hand-off at the statistic and the
    decode's first step (at most the TPOT SLO)."""
    return w.ttft_slo_s - transfer.transfer_ms_at_statistic / 1e3 - w.tpot_slo_s


def prefill_workload(w: Workload, ttft_budget_s: float) -> Workload:
    return replace(w, output_tokens=1, ttft_slo_s=ttft_budget_s, tpot_slo_s=PREFILL_TPOT_SLO_S)


def prefill_role(shape: Shape, w: Workload, profile: Profile, transfer: KvTransfer, real: bool = True) -> PrefillRole:
    budget = prefill_ttft_budget_s(w, transfer)
    if budget <= 0:
        raise SizingError(
            f"the {w.ttft_slo_s:g} s TTFT SLO leaves the prefill nothing: the KV transfer takes "
            f"{transfer.transfer_ms_at_statistic:.0f} ms at the {w.slo_statistic} prompt and the decode's first "
            f"step up to the {1e3 * w.tpot_slo_s:.0f} ms TPOT SLO", "workload.ttft_slo_s")
    wp = prefill_workload(w, budget)
    checked = check_shape(shape, wp, profile)
    rm = ReplicaModel(shape, wp, profile, real=real, checked=checked)
    cap = rm.capacity()
    # The prompt's KV stays until the decode has read it: in flight = QPS x (prefill + transfer).
    hold = rm.ttft0_s + transfer.transfer_ms / 1e3
    by = dict(cap.by_constraint)
    by["kv"] = min(by.get("kv", math.inf), rm.memory.max_seqs / hold if hold > 0 else math.inf)
    by.pop("tpot", None)
    binding = min(by, key=by.get)
    return PrefillRole(rm, Capacity(by[binding], binding, by, cap.statistic), budget)


def decode_role(shape: Shape, w: Workload, profile: Profile, transfer: KvTransfer, real: bool = True) -> DecodeRole:
    checked = check_shape(shape, w, profile)
    rm = ReplicaModel(shape, w, profile, real=real, checked=checked)
    t = transfer.transfer_ms / 1e3
    q = QUANTILES.get(w.slo_statistic)
    kv_qps = _qps_at_batch(rm, float(rm.memory.max_seqs), t)

    def ok(lam: float) -> bool:
        n = decode_batch(rm, lam, t)
        return math.isfinite(n) and n <= rm.memory.max_seqs and decode_tpot_s(rm, lam, n, q) <= w.tpot_slo_s

    if decode_tpot_s(rm, 0.0, 0.0, None) > w.tpot_slo_s:
        raise SizingError(f"one decode step alone takes {1e3 * rm.step_s(1.0):.1f} ms, over the "
                          f"{1e3 * w.tpot_slo_s:.0f} ms TPOT SLO", "workload.tpot_slo_s")
    tpot_qps = _largest(ok, kv_qps)
    by = {"kv": kv_qps, "tpot": tpot_qps}
    binding = "tpot" if tpot_qps < kv_qps * (1 - 1e-6) else "kv"
    return DecodeRole(rm, Capacity(by[binding], binding, by, w.slo_statistic), t)


def decode_at_load(role: DecodeRole, qps: float, passes: int = 3) -> DecodeRole:
    """The decode role priced at the batch it runs at `qps`: an MoE model's expert read is the
    tangent of the experts-touched curve at one batch (`sizing.step.build_step`; by default where
    the step takes the TPOT SLO, which prices a lighter batch high), so its step is rebuilt at the
    batch Little's law gives, a few passes (exact there; the capacity keeps the SLO batch's)."""
    rm = role.model
    if not rm.shape.model.is_moe:
        return role
    for _ in range(passes):
        n = decode_batch(rm, qps, role.transfer_s)
        if not (math.isfinite(n) and n > 0):
            break
        at = ReplicaModel(rm.shape, replace(rm.workload, qps=None, concurrency=max(1, round(n))), rm.profile,
                          real=rm.real, checked=rm.memory)
        rm = ReplicaModel(rm.shape, rm.workload, rm.profile, real=rm.real, checked=rm.memory)
        rm.step, rm.branches = at.step, at.branches      # the decode-only step at that batch
    return DecodeRole(rm, role.capacity, role.transfer_s)


def decode_batch(rm: ReplicaModel, qps: float, transfer_s: float) -> float:
    """n = QPS (transfer + s_out step(n)) with step(n) = max over branches of a + b n."""
    if qps <= 0:
        return 0.0
    worst = 0.0
    for a, b in rm.branches:
        denom = 1 - qps * rm.s_out * b
        if denom <= 0:
            return math.inf
        worst = max(worst, qps * (transfer_s + rm.s_out * a) / denom)
    return worst


def decode_tpot_s(rm: ReplicaModel, qps: float, n: float, q: float | None) -> float:
    """The decode-only step at the batch's mean (q None) or its Poisson q-quantile, widened by
    the batch's feedback on itself as `ReplicaModel._tpot_at` widens it."""
    base = rm.step_s(max(n, 1.0))
    if q is None or n <= 0:
        return base
    nq = poisson_quantile_smooth(n, q)
    gain = qps * rm.s_out * (rm.step_s(n + 1) - rm.step_s(n))
    amplify = 1 / math.sqrt(1 - gain) if gain < 0.9 else math.sqrt(10.0)
    return base + max(rm.step_s(nq) - base, 0.0) * amplify


def _qps_at_batch(rm: ReplicaModel, n: float, transfer_s: float) -> float:
    return n / (transfer_s + rm.s_out * rm.step_s(n)) if n > 0 else 0.0


def _largest(ok, top: float) -> float:
    if not (math.isfinite(top) and top > 0):
        return 0.0
    if ok(top):
        return top
    lo, hi = 0.0, top
    for _ in range(SEARCH_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def decode_figures(role: DecodeRole, qps: float) -> dict:
    """The decode replica at a load: batch, TPOT (mean, p95, statistic), the KV admission wait."""
    rm, w = role.model, role.model.workload
    n = decode_batch(rm, qps, role.transfer_s)
    q = QUANTILES.get(w.slo_statistic)
    if not (math.isfinite(n) and n < rm.memory.max_seqs):
        reason = ("decode steps slow faster than the load they carry" if not math.isfinite(n) else
                  f"Little's law needs {n:.0f} sequences in flight; the decode KV cache holds {rm.memory.max_seqs}")
        return {"stable": False, "reason": reason, "n": n}
    stay = role.transfer_s + rm.s_out * rm.step_s(max(n, 1.0))
    kv_mean, kv95 = erlang_c_wait(rm.memory.max_seqs, n, stay)
    kv_q = kv_mean if q is None else (kv95 if q == 0.95 else erlang_c_wait(rm.memory.max_seqs, n, stay, q)[1])
    return {"stable": True, "reason": "", "n": n, "tpot": decode_tpot_s(rm, qps, n, None),
            "tpot95": decode_tpot_s(rm, qps, n, 0.95), "tpot_q": decode_tpot_s(rm, qps, n, q),
            "first_step": rm.step_s(max(n, 1.0)), "first_step_q": rm.step_s(max(poisson_quantile_smooth(n, q or 0.5), 1.0)),
            "kv_wait": kv_mean, "kv_wait95": kv95, "kv_wait_q": kv_q,
            "kv_gb": n * (rm.s_in + rm.s_out) * rm.kv_tok / 1e9}


def composite_point(prefill: PrefillRole, decode: DecodeRole, transfer: KvTransfer, qps_prefill: float,
                    qps_decode: float) -> Point:
    """A request's path at the pools' loads: TTFT = prefill (queue and chunks) + hand-off + the
    decode's KV admission and first step; TPOT = the decode's steps. The tails add (an upper bound:
    the parts are not all at their quantile at once)."""
    p = prefill.model.at(qps_prefill)
    d = decode_figures(decode_at_load(decode, qps_decode), qps_decode)
    stat = decode.model.workload.slo_statistic
    inf = math.inf
    if not p.stable or not d["stable"]:
        reason = (f"prefill pool: {p.unstable_reason}" if not p.stable else f"decode pool: {d['reason']}")
        return Point(qps_decode, p.prefill_share, inf, inf, inf, inf, d["n"], inf, inf, False, reason, stat, inf, inf)
    t_mean, t_q = transfer.transfer_ms, transfer.transfer_ms_at_statistic
    ttft = p.ttft_ms + t_mean + 1e3 * (d["kv_wait"] + d["first_step"])
    ttft95 = p.ttft_p95_ms + t_q + 1e3 * (d["kv_wait95"] + d["first_step_q"])
    ttft_q = p.ttft_at_statistic_ms + t_q + 1e3 * (d["kv_wait_q"] + d["first_step_q"])
    return Point(qps=qps_decode, prefill_share=0.0, ttft_ms=ttft, ttft_p95_ms=ttft95, tpot_ms=1e3 * d["tpot"],
                 tpot_p95_ms=1e3 * d["tpot95"], in_flight=d["n"], kv_cache_gb=d["kv_gb"],
                 queue_ms=p.queue_ms + 1e3 * d["kv_wait"], stable=True, statistic=stat,
                 ttft_at_statistic_ms=ttft_q, tpot_at_statistic_ms=1e3 * d["tpot_q"])
