"""`llmserve size --plot`: TTFT and TPOT against QPS for one replica (matplotlib, imported here only)."""
from __future__ import annotations

import math
from pathlib import Path

from inputs.outputs import atomic_path
from sizing.model import ReplicaModel
from sizing.planner import Plan


def latency_curves(plan: Plan, points: int = 200) -> dict:
    """Both curves of the replica the plan sized (its shape: the model, whether the catalog's or a
    config.json's, its layout and nodes), never the model looked up again by name."""
    real = plan.replica_model            # the one step model the plan's figures come from
    models = {"ideal": ReplicaModel(real.shape, plan.request.workload, real.profile, real=False), "real": real}
    top = 1.15 * max(plan.capacity_per_replica_ideal.qps, plan.load_per_replica_qps, 1e-6)
    qps = [top * (i + 1) / points for i in range(points)]
    curves = {}
    for kind, rm in models.items():
        pts = [rm.at(q) for q in qps]
        curves[kind] = {
            "ttft": [p.ttft_ms if p.stable else math.nan for p in pts],
            "ttft_p95": [p.ttft_p95_ms if p.stable else math.nan for p in pts],
            "tpot": [p.tpot_ms if p.stable else math.nan for p in pts],
            "tpot_p95": [p.tpot_p95_ms if p.stable else math.nan for p in pts],
            "ttft_stat": [p.ttft_at_statistic_ms if p.stable else math.nan for p in pts],
            "tpot_stat": [p.tpot_at_statistic_ms if p.stable else math.nan for p in pts],
        }
    return {"qps": qps, **curves}


def plot_latency_vs_qps(plan: Plan, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = plan.request.workload
    c = latency_curves(plan)
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.8), sharex=True)
    cap, cap_ideal, load = plan.capacity_per_replica.qps, plan.capacity_per_replica_ideal.qps, plan.load_per_replica_qps
    for ax, key, slo, title in ((ax_ttft, "ttft", w.ttft_slo_s * 1e3, "TTFT"),
                                (ax_tpot, "tpot", w.tpot_slo_s * 1e3, "TPOT")):
        ax.plot(c["qps"], c["ideal"][key], color="tab:blue", lw=2, label="ideal, mean")
        ax.plot(c["qps"], c["real"][key], color="tab:red", lw=2, label="real, mean")
        ax.plot(c["qps"], c["real"][f"{key}_p95"], color="tab:red", lw=1.2, ls="--", label="real, p95 (Poisson)")
        if w.slo_statistic not in ("mean", "p95"):      # the statistic the SLOs and the capacity use
            ax.plot(c["qps"], c["real"][f"{key}_stat"], color="tab:purple", lw=1.2, ls="-.",
                    label=f"real, {w.slo_statistic} (Poisson)")
        ax.axhline(slo, color="black", lw=1.2, ls=":", label=f"SLO {slo:g} ms")
        ax.axvline(cap, color="tab:red", lw=1, alpha=0.6)
        ax.axvline(cap_ideal, color="tab:blue", lw=1, alpha=0.6)
        ax.annotate(f"capacity {cap:.1f} (real)", (cap, slo * 1.6), rotation=90, va="bottom", ha="right",
                    fontsize=8, color="tab:red")
        ax.annotate(f"{cap_ideal:.1f} (ideal)", (cap_ideal, slo * 1.6), rotation=90, va="bottom", ha="right",
                    fontsize=8, color="tab:blue")
        real_now = plan.real.ttft_ms if key == "ttft" else plan.real.tpot_ms
        if math.isfinite(real_now):
            ax.plot([load], [real_now], "o", color="black", ms=7, zorder=5)
            ax.annotate(f"operating point\n{load:.3g} QPS, {real_now:.0f} ms", (load, real_now),
                        textcoords="offset points", xytext=(8, 8), fontsize=8)
        ax.set_ylim(0, slo * 2.5)
        ax.set_xlim(0, c["qps"][-1])
        ax.set_xlabel("QPS per replica (Poisson arrivals)")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} against load")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    req = plan.request
    fig.suptitle(f"{plan.replica_model.shape.model.id} {req.weights}, TP={plan.tp} on {plan.instance.id}: "
                 f"{w.input_tokens} in / {w.output_tokens} out, profile {req.profile}", fontsize=11)
    fig.tight_layout()
    with atomic_path(path) as tmp:                  # the previous PNG stays whole if this fails
        fig.savefig(tmp, dpi=110, format="png")     # exactly that path: no ".png" appended
    plt.close(fig)
