"""What a replica can do at all: the TP degrees that split a model, and why one misses its SLOs
unloaded (shared by the planner and the sweep)."""
from __future__ import annotations

from .catalog import Instance
from .model import ReplicaModel, Workload
from .parallel import fits_tp
from .queueing import QUANTILES


def unloaded_reason(rm: ReplicaModel, w: Workload) -> str:
    """Why a replica misses the SLOs with no load at all, in plain words."""
    if rm.ttft0_s >= w.ttft_slo_s:
        return (f"prefill of a {w.input_tokens:,}-token prompt takes {rm.ttft0_s:.2f} s, "
                f"above the {w.ttft_slo_s:g} s TTFT SLO")
    if rm.step_s(1) >= w.tpot_slo_s:
        return (f"one decode step takes {rm.step_s(1) * 1e3:.1f} ms with a single sequence, "
                f"above the {w.tpot_slo_s * 1e3:g} ms TPOT SLO")
    light = 1e-3 * min(rm.qps_at_batch(rm.memory.max_seqs), 1 / rm.share_per_request_s)
    ttft, tpot = rm.latencies_at(light, QUANTILES.get(w.slo_statistic))
    if ttft >= w.ttft_slo_s:
        return (f"at the lightest load the {w.slo_statistic} TTFT is {ttft:.2f} s (a {w.input_tokens:,}-token "
                f"prompt in chunks of up to {rm.batched_tokens:,} tokens, each step shared with the decodes), "
                f"above the {w.ttft_slo_s:g} s TTFT SLO")
    if tpot >= w.tpot_slo_s:
        return (f"at the lightest load the {w.slo_statistic} TPOT is {tpot * 1e3:.1f} ms, "
                f"above the {w.tpot_slo_s * 1e3:g} ms TPOT SLO")
    return "the KV cache cannot hold the batch the SLOs need"


def candidate_tps(model, instance: Instance) -> list[int]:
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= instance.gpus and not fits_tp(model, tp)]
