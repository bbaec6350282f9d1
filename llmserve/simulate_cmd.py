"""Simulate the planned layout request by request: continuous batching with chunked prefill on
each replica, a router, Poisson or bursty arrivals (or a closed loop of clients, `--concurrency
N`, or N prompts at once, `--burst N`), and optionally the loss of a zone
(`--fail-zone ZONE@T[:T2]`). Prints p50/p95/p99 of TTFT, TPOT, queue time and end-to-end latency,
goodput, per-replica utilisation, and each window around the failure. Exit code 1 when a request
is lost."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from . import options, simulate_disagg
from .errors import check_output_file, check_positive, fail, writing
from .sim_tables import emit, latency_table, ms as _ms
from .stack_arg import load, requested_failure


DURATION = typer.Option(None, help="Seconds of arrivals to simulate (all of them are then served); default 600 "
                                   "(with --traffic: the curve's span).")
TRAFFIC = typer.Option(None, help="A load over time: a CSV of t_s,qps (the run lasts its span) through the fleet "
                                  "planned for its peak (default with --autoscale: the stack's workload.traffic).")
AUTOSCALE = typer.Option(False, "--autoscale", help="With a load over time: the plan's autoscaling policy in the loop "
                                                    "(cold starts, drains, the floor and ceiling by zone).")


def simulate(
    stack: Optional[str] = options.STACK_OR_REFERENCE,
    duration: Optional[float] = DURATION,
    qps: Optional[float] = typer.Option(None, help="Arrival rate, requests per second (default: the stack's)."),
    concurrency: Optional[int] = typer.Option(None, help="A closed loop: N clients all send at t = 0, each its next "
                                              "request as its last completes (default for a closed-loop stack: "
                                              "its clients)."),
    burst: Optional[int] = typer.Option(None, help="N prompts all at t = 0, nothing after: the makespan."),
    router: str = typer.Option("least-outstanding", help="round-robin, least-outstanding or least-pending-tokens."),
    arrivals: str = typer.Option("poisson", help="poisson, or gamma (bursty)."),
    burstiness: float = typer.Option(2.0, help="Coefficient of variation of gamma inter-arrival times (1 = Poisson)."),
    lengths: str = typer.Option("fixed", help="fixed (the workload's lengths: its distribution when it has one) or lognormal around the means."),
    length_cv: float = typer.Option(0.5, "--length-cv", help="Coefficient of variation of lognormal lengths."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens",
                                                         help="Token budget per step (default: the plan's)."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Running-sequence cap (default: plan's)."),
    fail_zone: Optional[str] = typer.Option(None, "--fail-zone", help="ZONE@T[:T2]: lose a zone at T s (back at T2)."),
    fail_node: Optional[str] = typer.Option(None, "--fail-node", help="POOL/node-I@T[:T2]: lose one node (and every "
                                            "replica on it: a multi-node replica whole) at T s (back at T2)."),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same result."),
    as_json: bool = options.JSON,
    plot: Optional[Path] = typer.Option(None, help="Write a PNG: latency percentiles over time."),
    traffic: Optional[Path] = TRAFFIC,
    autoscale: bool = AUTOSCALE,
    fail_pool: Optional[str] = simulate_disagg.FAIL_POOL,
    kill_prefill_at: Optional[float] = simulate_disagg.KILL_PREFILL_AT,
    kv_load_failure_policy: Optional[str] = simulate_disagg.KV_LOAD_FAILURE_POLICY,
) -> None:
    from simulator import ARRIVALS, LENGTHS, ROUTERS, config_from_plan, simulate as run, to_dict

    if plot is not None:
        check_output_file("--plot", plot, ".png")
    if traffic is not None or autoscale:
        return _with_traffic(locals())
    duration = 600.0 if duration is None else duration
    _check_options({"--duration": duration, "--qps": qps, "--burstiness": burstiness, "--length-cv": length_cv,
                    "--max-num-batched-tokens": max_num_batched_tokens, "--max-num-seqs": max_num_seqs},
                   {"--router": (router, ROUTERS), "--arrivals": (arrivals, ARRIVALS), "--lengths": (lengths, LENGTHS)})
    _check_mode(qps, concurrency, burst)
    p = load(stack, plan=True).plan
    if simulate_disagg.dispatch(p, duration):     # a disaggregated plan's own run (llmserve/simulate_disagg.py)
        return
    _check_work(p.request.workload, qps, concurrency, burst, duration, burstiness, length_cv)
    failure = requested_failure(fail_zone, fail_node, duration, p)
    batched = max_num_batched_tokens or p.engine_args.max_num_batched_tokens
    seqs = max_num_seqs or p.engine_args.max_num_seqs
    if batched < seqs:
        fail(f"--max-num-batched-tokens: {batched} is below max_num_seqs {seqs} (vLLM refuses this too)")
    try:
        cfg = config_from_plan(p, duration, qps, router=router, arrivals=arrivals, burstiness_cv=burstiness,
                               lengths=lengths, length_cv=length_cv, seed=seed, failure=failure,
                               max_num_batched_tokens=batched, max_num_seqs=seqs, concurrency=concurrency,
                               burst=burst)
        result = run(cfg)
    except ValueError as exc:
        fail(str(exc))
    _report({"stack": stack, **to_dict(result), "analytic": _analytic(p, cfg)}, result, cfg, stack, plot, as_json)


def _report(data: dict, result, cfg, stack, plot, as_json: bool) -> None:
    """The plot, the JSON or the tables, and exit 1 when a request was lost."""
    if plot is not None:
        from simulator.plot import plot_timeline
        with writing("--plot", plot):
            plot_timeline(result, plot, _title(stack, cfg))
    emit(data, as_json, lambda: _print(data, cfg, stack, plot))


def _with_traffic(o: dict) -> None:
    """`--traffic` / `--autoscale`: the options that shape a constant load do not apply."""
    from simulator import LENGTHS, ROUTERS
    from .simulate_traffic import simulate_traffic
    for option, key in (("--qps", "qps"), ("--concurrency", "concurrency"), ("--burst", "burst"),
                        ("--duration", "duration"), ("--max-num-batched-tokens", "max_num_batched_tokens"),
                        ("--max-num-seqs", "max_num_seqs")):
        if o[key] is not None:
            fail(f"{option}: not with --traffic/--autoscale (the curve sets the rate and the run's length; "
                 "the plan sets the engine)")
    for option, key in (("--fail-pool", "fail_pool"), ("--kill-prefill-at", "kill_prefill_at"),
                        ("--kv-load-failure-policy", "kv_load_failure_policy")):
        if o[key] is not None:      # the autoscaled run is aggregated only (sizing.autoscale refuses P/D)
            fail(f"{option}: not with --traffic/--autoscale (a load over time runs an aggregated plan)")
    if o["arrivals"] != "poisson":
        fail("--arrivals: with --traffic the arrivals are Poisson at the curve's rate")
    _check_options({"--length-cv": o["length_cv"]}, {"--router": (o["router"], ROUTERS), "--lengths": (o["lengths"], LENGTHS)})
    p = load(o["stack"], plan=True).plan
    simulate_traffic(o["stack"], p, o["traffic"], o["autoscale"], o["fail_zone"], o["fail_node"], o["router"],
                     o["lengths"], o["length_cv"], o["seed"], o["as_json"], o["plot"])


def _check_work(w, qps, concurrency, burst, duration, burstiness, length_cv) -> None:
    """Bound the work before any of it: the rate (the plan's when --qps is not given) over the
    duration, or the clients (a closed-loop stack's own when none is given)."""
    from simulator.workload import WorkLimitError, check_clients, check_work

    rate = qps if qps is not None else w.qps
    try:
        if concurrency is not None or burst is not None:
            for option, n in (("--concurrency", concurrency), ("--burst", burst)):
                if n is not None:
                    check_clients(option, n, duration)
        elif rate is not None:
            check_work(rate, duration, burstiness, length_cv)
        else:
            check_clients("--concurrency", w.concurrency, duration)
    except WorkLimitError as exc:
        fail(str(exc))


def _check_mode(qps: float | None, concurrency: int | None, burst: int | None) -> None:
    """At most one of an open loop's rate, a closed loop's clients and a burst's prompts."""
    if qps is not None and concurrency is not None:
        fail("--concurrency: give either --qps (an open loop) or --concurrency (a closed loop), not both")
    if qps is not None and burst is not None:
        fail("--burst: give either --qps (an open loop) or --burst (N prompts at t = 0), not both")
    if concurrency is not None and burst is not None:
        fail("--burst: give either --concurrency (a closed loop) or --burst (N prompts at t = 0), not both")


def _check_options(positive: dict[str, float | None], choices: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    check_positive(positive)
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            fail(f"{name}: unknown value '{value}'; choose one of: {', '.join(allowed)}")


def _analytic(p, cfg) -> dict:
    """The analytic engine at the same load per replica (all replicas up), for comparison: the
    open loop's QPS, or a closed loop's clients (ReplicaModel.closed_point); a burst has no
    steady state to compare with (only the capacity)."""
    from simulator import replica_model
    w, model = cfg.workload, replica_model(p)

    def fin(x: float):
        return round(x, 3) if math.isfinite(x) else None     # JSON has no infinity: unstable is null
    capacity = {"capacity_per_replica_qps": round(p.capacity_per_replica.qps, 4)}
    if w.arrivals == "burst":
        return {"load_per_replica_qps": None, "ttft_ms": None, "ttft_p95_ms": None, "tpot_ms": None,
                "tpot_p95_ms": None, **capacity}
    if w.arrivals == "closed-loop":
        clients = max(1, round(w.clients / len(cfg.replicas)))
        point = model.closed_point(clients)
        extra = {"clients_per_replica": clients}
    else:
        point = model.at(w.qps / len(cfg.replicas))
        extra = {}
    return {"load_per_replica_qps": round(point.qps, 4), **extra, "ttft_ms": fin(point.ttft_ms),
            "ttft_p95_ms": fin(point.ttft_p95_ms), "tpot_ms": fin(point.tpot_ms),
            "tpot_p95_ms": fin(point.tpot_p95_ms), **capacity}


def _title(stack, cfg) -> str:
    w = cfg.workload
    if w.arrivals == "closed-loop":
        load = f"{w.clients:,} closed-loop clients"
    elif w.arrivals == "burst":
        load = f"a burst of {w.clients:,} prompts at t = 0"
    else:
        load = f"{w.qps:g} QPS " + ("Poisson" if w.arrivals == "poisson" else f"gamma (cv {w.burstiness_cv:g})")
    return (f"{stack or 'reference'}: {len(cfg.replicas)} replicas, {load}, "
            f"{w.input_tokens} in / {w.output_tokens} out ({w.lengths}), router {cfg.router}, seed {w.seed}")


def _print(data: dict, cfg, stack, plot) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    arrivals = cfg.workload.arrivals
    window = "" if arrivals == "burst" else f", {cfg.workload.duration_s:g} s of " + (
        "sending (measured from t = 0, no warm-up left out)" if arrivals == "closed-loop" else "arrivals")
    console.print(f"Simulated {_title(stack, cfg)}{window}.")
    if "throughput" in data:
        t = data["throughput"]
        makespan = f"makespan {data['makespan_s']:g} s; " if "makespan_s" in data else ""
        console.print(f"{makespan}{t['requests_per_s'] or 0:,.2f} requests/s, {t['output_tokens_per_s'] or 0:,.0f} "
                      "output tokens/s")
    console.print(f"{data['requests']:,} requests, {data['requests_lost']} lost, {data['requests_retried']} retried; "
                  f"goodput {100 * (data['goodput'] or 0):.1f}% (TTFT <= {data['slo']['ttft_ms']:g} ms and "
                  f"TPOT <= {data['slo']['tpot_ms']:g} ms)")
    console.print(latency_table(data))
    # load: requests served per second of up time over the sized capacity of one replica, the
    # sizing table's utilisation; busy saturates early (continuous batching steps whenever any runs).
    capacity = data["analytic"]["capacity_per_replica_qps"]
    reps = Table("replica", "zone", "requests", "load / capacity", "busy", "mean batch", "prefill share", "preemptions")
    for r in data["replicas"]:
        reps.add_row(r["name"], r["zone"], f"{r['requests']:,}", f"{100 * r['served_qps'] / capacity:.0f}%",
                     f"{100 * r['utilization']:.0f}%",
                     f"{r['mean_running']:.1f}",
                     f"{100 * r['prefill_share']:.0f}%", str(r["preemptions"]))
    console.print(reps)
    if "windows" in data:
        f = data["failure"]
        win = Table("window", "arrivals (s)", "requests", "lost", "goodput", "TTFT p95", "TPOT p95")
        for name, w in data["windows"].items():
            win.add_row(name, f"{w['from_s']:g}-{w['to_s']:g}", f"{w['requests']:,}", str(w["requests_lost"]),
                        f"{100 * (w['goodput'] or 0):.1f}%", _ms(w["ttft_ms"]["p95"]), _ms(w["tpot_ms"]["p95"]))
        lost = f"Node {f['node']} ({f['zone']})" if "node" in f else f"Zone {f['zone']}"
        console.print(f"{lost} lost at {f['start_s']:g} s" +
                      (f", back at {f['end_s']:g} s" if f["end_s"] is not None else ", not back") +
                      f" ({', '.join(f['replicas_lost'])}):")
        console.print(win)
    a = data["analytic"]
    if a["load_per_replica_qps"] is not None:     # a burst has no steady state to compare with
        console.print(f"Analytic engine at {a['load_per_replica_qps']:g} QPS per replica: "
                      f"mean TTFT {_ms(a['ttft_ms'])} ms, "
                      f"mean TPOT {_ms(a['tpot_ms'])} ms (simulated: {_ms(data['ttft_ms']['mean'])} / "
                      f"{_ms(data['tpot_ms']['mean'])} ms).")
    if plot is not None:
        console.print(f"Plot: {plot}")


def register(app: typer.Typer) -> None:
    app.command("simulate", help=__doc__)(simulate)
