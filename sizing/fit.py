"""Why a replica misses its SLOs even unloaded (shared by the planner and the sweep, which must
not import each other)."""
from __future__ import annotations

from .model import ReplicaModel
from .queueing import QUANTILES
from .workload import Workload


def unloaded_reason(rm: ReplicaModel, w: Workload) -> str:
    """Why a replica misses the SLOs with no load at all, in plain words."""
    return _unloaded(rm, w)[1]


def _unloaded(rm: ReplicaModel, w: Workload) -> tuple[str | None, str]:
    """(the SLO field to relax, why) a replica misses the SLOs with no load at all."""
    if rm.ttft0_s >= w.ttft_slo_s:
        return "workload.ttft_slo_s", (f"prefill of a {w.input_tokens:,}-token prompt takes {rm.ttft0_s:.2f} s, "
                                       f"above the {w.ttft_slo_s:g} s TTFT SLO")
    if rm.step_s(1) >= w.tpot_slo_s:
        return "workload.tpot_slo_s", (f"one decode step takes {rm.step_s(1) * 1e3:.1f} ms with a single sequence, "
                                       f"above the {w.tpot_slo_s * 1e3:g} ms TPOT SLO")
    light = 1e-3 * min(rm.load_ceilings())
    ttft, tpot = rm.latencies_at(light, QUANTILES.get(w.slo_statistic))
    if ttft >= w.ttft_slo_s:
        return "workload.ttft_slo_s", (
            f"at the lightest load the {w.slo_statistic} TTFT is {ttft:.2f} s (a {w.input_tokens:,}-token "
            f"prompt in chunks of up to {rm.batched_tokens:,} tokens, each step shared with the decodes), "
            f"above the {w.ttft_slo_s:g} s TTFT SLO")
    if tpot >= w.tpot_slo_s:
        return "workload.tpot_slo_s", (f"at the lightest load the {w.slo_statistic} TPOT is {tpot * 1e3:.1f} ms, "
                                       f"above the {w.tpot_slo_s * 1e3:g} ms TPOT SLO")
    return None, "the KV cache cannot hold the batch the SLOs need"
