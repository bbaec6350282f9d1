"""`llmserve simulate --plot`: latency percentiles over time, the failure window shaded.

matplotlib is imported inside the function, so importing the simulator never loads it.
"""
from __future__ import annotations

import math
from pathlib import Path

from inputs.outputs import atomic_path
from .loop import SimResult
from .report import latencies, percentile


def series(result: SimResult, bins: int = 60) -> dict:
    """Per time bin (by arrival): p50/p95/p99 of TTFT and TPOT in ms, NaN where a bin is empty."""
    duration = result.config.workload.duration_s
    width = max(duration / bins, 1.0)
    count = math.ceil(duration / width)
    ttft: list[list[float]] = [[] for _ in range(count)]
    tpot: list[list[float]] = [[] for _ in range(count)]
    for r in result.requests:
        if r.lost or r.t_done is None:
            continue
        i = min(int(r.arrival / width), count - 1)
        first, per_token, _, _ = latencies(r)
        ttft[i].append(first)
        if per_token is not None:
            tpot[i].append(per_token)
    out = {"t": [(i + 0.5) * width for i in range(count)]}
    for name, cols in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 95, 99):
            out[f"{name}_p{q}"] = [percentile(sorted(c), q / 100) if c else math.nan for c in cols]
    return out


def plot_timeline(result: SimResult, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = result.config
    s = series(result)
    fig, (ax_ttft, ax_tpot) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for ax, key, slo, label in ((ax_ttft, "ttft", cfg.ttft_slo_s * 1e3, "TTFT (ms)"),
                                (ax_tpot, "tpot", cfg.tpot_slo_s * 1e3, "TPOT (ms)")):
        for q, style in ((50, dict(lw=1.2, color="tab:blue")), (95, dict(lw=1.6, color="tab:red")),
                         (99, dict(lw=1.0, color="tab:red", ls="--"))):
            ax.plot(s["t"], s[f"{key}_p{q}"], label=f"p{q}", **style)
        ax.axhline(slo, color="black", ls=":", lw=1.2, label=f"SLO {slo:g} ms")
        if cfg.failure is not None:
            f = cfg.failure
            end = f.end_s if f.end_s is not None else cfg.workload.duration_s
            ax.axvspan(f.start_s, end, color="tab:orange", alpha=0.15,
                       label=f"{f.zone} down" + ("" if f.end_s is not None else " (until the end)"))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, ncol=5)
        finite = [v for q in (50, 95, 99) for v in s[f"{key}_p{q}"] if math.isfinite(v)]
        if finite and max(finite) > 20 * slo:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, max([slo * 1.5] + finite) * 1.1)
    ax_tpot.set_xlabel("arrival time (s); each point is one time bin")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:                  # the previous PNG stays whole if this fails
        fig.savefig(tmp, dpi=110, format="png")     # exactly that path: no ".png" appended
    plt.close(fig)
