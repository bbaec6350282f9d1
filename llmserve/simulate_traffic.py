"""`simulate --traffic FILE [--autoscale]`: a load over time through the fleet planned for its peak,
static or with the plan's autoscaling policy in the loop (simulator/autoscale.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path


from .errors import fail, writing
from .sim_tables import emit

MAX_TRAFFIC_FILE_BYTES = 8 * 2**20     # settings.schema.MAX_TRAFFIC_FILE_BYTES


def read_curve(path: Path | None, stack_curve):
    """The curve of `--traffic FILE` (a CSV of t_s,qps), else the stack's `workload.traffic`."""
    if path is None:
        return stack_curve
    from inputs import InputError
    from inputs.files import read_text
    from sizing.load_curve import LoadCurveError, parse_curve_csv
    try:
        return parse_curve_csv(read_text(path, MAX_TRAFFIC_FILE_BYTES, "CSV traffic file"), str(path))
    except (InputError, LoadCurveError) as exc:
        fail(f"--traffic: {exc}")


def plan_for_curve(p, curve):
    """The static plan for the curve's peak, with its autoscaling policy (the stack's own when it
    names this curve, else the stack's request re-planned at the curve's peak)."""
    from sizing.planner import plan
    from sizing.workload import SizingError
    if p.request.traffic is curve and p.autoscale is not None:
        return p
    w = p.request.workload
    if w.is_closed_loop:
        fail("--traffic: a load over time is a request rate; the stack's workload is closed-loop (concurrency)")
    try:
        return plan(replace(p.request, workload=replace(w, qps=curve.peak_qps), traffic=curve, replicas=None))
    except SizingError as exc:
        fail(f"--traffic: at the curve's peak of {curve.peak_qps:g} QPS: {exc}")


def simulate_traffic(stack, p, path: Path | None, autoscale: bool, fail_zone: str | None, fail_node: str | None,
                     router: str, lengths: str, length_cv: float, seed: int, as_json: bool, plot: Path | None) -> None:
    from simulator import config_from_plan, parse_fail_zone
    from simulator.autoscale import scaling_from_plan, simulate_autoscaled, to_dict
    from simulator.workload import WorkLimitError

    curve = read_curve(path, p.request.traffic)
    if curve is None:
        fail("--autoscale: needs a load over time: --traffic FILE (a CSV of t_s,qps) or the stack's workload.traffic")
    if fail_node is not None:
        fail("--fail-node: a node failure is not simulated with a load curve; lose a zone with --fail-zone ZONE@T[:T2]")
    q = plan_for_curve(p, curve)
    failure = None
    if fail_zone is not None:
        try:
            failure = parse_fail_zone(fail_zone, curve.span_s)
        except ValueError as exc:
            fail(f"--fail-zone: {exc}")
        if failure.zone not in q.autoscale.ceiling_by_zone:
            fail(f"--fail-zone: zone {failure.zone} holds no replica (zones: {', '.join(sorted(q.autoscale.ceiling_by_zone))})")
    try:
        cfg = config_from_plan(q, curve.span_s, curve.peak_qps, router=router, lengths=lengths, length_cv=length_cv,
                               seed=seed)
        result = simulate_autoscaled(cfg, curve, scaling_from_plan(q, autoscale), failure)
    except (ValueError, WorkLimitError) as exc:
        fail(str(exc))
    data = {"stack": stack, "traffic": {"source": str(path) if path is not None else "workload.traffic",
                                        "span_s": curve.span_s, "peak_qps": curve.peak_qps,
                                        "trough_qps": curve.trough_qps, "mean_qps": round(curve.mean_qps, 4)},
            **to_dict(result, q)}
    if plot is not None:
        with writing("--plot", plot):
            plot_day(data, plot)
    emit(data, as_json, lambda: print_day(data, plot))


def print_day(d: dict, plot: Path | None) -> None:
    from rich.console import Console
    console = Console(width=110)
    t = d["traffic"]
    mode = "the fleet autoscaled by the plan's policy" if d["autoscale"] else "the static plan for the peak"
    console.print(f"Simulated {t['span_s'] / 3600:g} h of traffic ({t['trough_qps']:g} to {t['peak_qps']:g} QPS, "
                  f"mean {t['mean_qps']:g}) on {mode}.")
    console.print(f"{d['requests']:,} requests, {d['requests_lost']} lost, {d['requests_retried']} retried; goodput "
                  f"{100 * (d['goodput'] or 0):.2f}% (TTFT <= {d['slo']['ttft_ms']:g} ms and TPOT <= "
                  f"{d['slo']['tpot_ms']:g} ms).")
    console.print(f"GPU-hours {d['gpu_hours']:g} (static plan for the peak: {d['gpu_hours_static']:g}); node-hours "
                  f"{d['node_hours']:g} (static: {d['node_hours_static']:g}).")
    console.print(f"Cold starts: {d['cold_starts']} ({d['cold_starts_on_new_nodes']} on new nodes); a replica serves "
                  f"{d['cold_start_s']['warm_node']:g} s after its start on a warm node, "
                  f"{d['cold_start_s']['new_node']:g} s on a new one.")
    console.print(f"Floor {d['floor_by_zone']} " + ("held" if d["floor_held"] else f"breached: {d['floor_breaches'][:3]}")
                  + f"; fewest serving by zone {d['min_serving_by_zone']}; ceiling {d['ceiling_by_zone']}.")
    if "failure" in d:
        f = d["failure"]
        console.print(f"Zone {f['zone']} lost at {f['start_s']:g} s" + (f", back at {f['end_s']:g} s" if f["end_s"] else "")
                      + f": goodput {100 * (f['during']['goodput'] or 0):.2f}% of the {f['during']['requests']:,} "
                      "requests arriving while it was down.")
    if plot is not None:
        console.print(f"Plot: {plot}")


def plot_day(d: dict, path: Path) -> None:
    """The curve, the served rate, and the replicas each zone holds, over the run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inputs.outputs import atomic_path
    rows = d["timeline"]
    hours = [r["t_s"] / 3600 for r in rows]
    fig, (ax_q, ax_r) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    ax_q.plot(hours, [r["curve_qps"] for r in rows], label="curve (QPS)", color="black", lw=1.2)
    ax_q.plot(hours, [r["served_qps"] for r in rows], label="served (2 min rate)", color="tab:blue", lw=1.0)
    ax_q.set_ylabel("requests/s")
    for zone in d["floor_by_zone"]:
        ax_r.step(hours, [r["serving"][zone] for r in rows], where="post", label=f"{zone} serving")
        ax_r.step(hours, [r["replicas"][zone] for r in rows], where="post", ls="--", lw=0.8, label=f"{zone} wanted")
    ax_r.set_ylabel("replicas")
    ax_r.set_xlabel("hours")
    for ax in (ax_q, ax_r):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, ncol=4)
    fig.suptitle(f"{d['stack'] or 'reference'}: goodput {100 * (d['goodput'] or 0):.2f}%, GPU-hours "
                 f"{d['gpu_hours']:g} (static {d['gpu_hours_static']:g})", fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
