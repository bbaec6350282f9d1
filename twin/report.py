"""What `llmserve twin`, `check` and `calibrate` print (rich tables), and their JSON."""
from __future__ import annotations

from pathlib import Path

from conventions import VLLM_VERSION
from sizing.planner import Plan

from . import efficiency as eff
from .calibrate import Fit
from .check import CheckResult
from .promapi import FleetLive
from .scenario import TwinReport
from .servers import LOOKBACK_S, wall


def _console():
    from rich.console import Console
    # markup off: label values and server messages print as the characters they hold
    return Console(width=max(Console().width, 110), markup=False, highlight=False)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _labels(labels: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k in ("zone", "pod"))


def print_twin(r: TwinReport, stack: str) -> None:
    from rich.table import Table

    console = _console()
    zones = ", ".join(f"{z}: {n}" for z, n in r.plan.replicas_by_zone.items() if n)
    scenario = ""
    if r.failure is not None:
        back = f", back at {r.failure.end_s:g} s" if r.failure.end_s is not None else ", not back"
        scenario = f"; {r.failure.domain} lost at {r.failure.start_s:g} s{back}"
    console.print(f"Twin of {stack}: {r.plan.replicas} emulated vLLM {VLLM_VERSION} replicas ({zones}) at {r.qps:g} QPS "
                  f"for {r.duration_s:g} s{scenario}" + (f"; replicas {r.slowdown:g}x slower than planned"
                                                        if r.slowdown != 1 else "") + ".")
    console.print(f"Clock: {r.scale:g}x (one wall-clock second is {r.scale:g} simulated seconds). Every rule duration "
                  f"is divided by {r.scale:g} (for: 5m -> {wall(300, r.scale)}, rate windows [5m] -> "
                  f"[{wall(300, r.scale)}], lookback {wall(LOOKBACK_S, r.scale)}); scrapes and rule evaluations every "
                  f"{r.scrape_interval_sim_s:g} simulated s; counts are served divided by {r.scale:g}, so rates read "
                  "per simulated second and the QPS thresholds apply as rendered. Times below are simulated seconds.")
    console.print(f"Servers: {r.prometheus_version or 'prometheus'}; {r.alertmanager_version or 'alertmanager'}; "
                  f"on 127.0.0.1, all stopped ({r.wall_s:.0f} s wall).")
    table = Table("alert", "labels", "fired (s)", "resolved (s)", "judged")
    judged = {id(e): "forbidden" for e in r.verdict.forbidden_fired}
    judged.update({id(e): "not judged" for e in r.verdict.not_judged})
    for e in r.events:
        table.add_row(e.name, _labels(e.labels), _s(e.fired_s), _s(e.resolved_s), judged.get(id(e), "expected"))
    if r.events:
        console.print(table)
    else:
        console.print("No alert fired.")
    for exp, problem in r.verdict.required:
        what = exp.name + (f" ({exp.zone})" if exp.zone else "")
        then = " and resolve after the zone is back" if exp.resolve_after_s is not None else ""
        console.print(f"{'ok  ' if not problem else 'FAIL'} expected {what} to fire{then}: "
                      f"{problem or 'it did'} ({exp.reason}).")
    for e in r.verdict.forbidden_fired:
        console.print(f"FAIL {e.name} fired at {e.fired_s:,.0f} s; the plan says it cannot in this scenario.")
    if not r.verdict.ok:
        console.print("Diagnostics (Prometheus at the end): " + ", ".join(f"{k} {v}" for k, v in r.diagnostics.items()))
    verdict = "as the plan expects" if r.verdict.ok else "NOT as the plan expects"
    console.print(f"Result: the alerts behaved {verdict}.")


def twin_dict(r: TwinReport, stack: str) -> dict:
    def event(e) -> dict:
        return {"alert": e.name, "labels": e.labels, "fired_s": round(e.fired_s, 1),
                "resolved_s": None if e.resolved_s is None else round(e.resolved_s, 1)}
    return {
        "stack": stack, "qps": r.qps, "duration_s": r.duration_s, "time_scale": r.scale, "slowdown": r.slowdown,
        "failure": None if r.failure is None else {"zone": r.failure.zone, "node": r.failure.node,
                                                   "start_s": r.failure.start_s,
                                                   "end_s": r.failure.end_s},
        "scrape_interval_simulated_s": r.scrape_interval_sim_s,
        "prometheus": {"version": r.prometheus_version, "url": r.urls[0]},
        "alertmanager": {"version": r.alertmanager_version, "url": r.urls[1]},
        "alerts": [event(e) for e in r.events],
        "expected": [{"alert": x.name, "zone": x.zone, "resolve_after_s": x.resolve_after_s, "reason": x.reason,
                      "problem": problem or None} for x, problem in r.verdict.required],
        "forbidden_fired": [event(e) for e in r.verdict.forbidden_fired],
        "ok": r.verdict.ok, "wall_s": round(r.wall_s, 1), "diagnostics": r.diagnostics,
    }


def check_dict(stack: str, url: str, live: FleetLive, result: CheckResult) -> dict:
    return {"stack": stack, "prometheus": url, "window": live.window, "ok": result.ok,
            "problems": result.problems,
            "rows": [{"scope": r.scope, "figure": r.figure, "plan": r.plan, "live": r.live, "ok": r.ok} for r in result.rows]}


def print_check(stack: str, url: str, live: FleetLive, result: CheckResult) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"Plan of {stack} against {url}, last {live.window} ({len(live.replicas)} vLLM replicas seen).")
    scopes: dict[str, list] = {}
    for row in result.rows:
        scopes.setdefault(row.scope, []).append(row)
    for scope, rows in scopes.items():
        table = Table("figure", "plan", "live", "", title=scope, title_justify="left")
        for row in rows:
            table.add_row(row.figure, row.plan, row.live, "" if row.ok else "outside")
        console.print(table)
    for problem in result.problems:
        console.print(f"FAIL {problem}")
    console.print("Result: " + ("the fleet is within its plan." if result.ok else "the fleet is OUTSIDE its plan."))


def _plan_figures(p: Plan) -> dict:
    return {"profile": p.request.profile, "gpus_per_replica": p.gpus_per_replica, "replicas": p.replicas,
            "capacity_per_replica_qps": round(p.capacity_per_replica.qps, 2),
            "capacity_qps": round(p.capacity_qps, 2),
            "capacity_after_zone_loss_qps": round(p.capacity_after_zone_loss_qps, 2),
            "binding": p.capacity_per_replica.binding, "survives_failure": p.survives_failure}


def calibrate_dict(f: Fit, before: Plan, after: Plan, path: Path) -> dict:
    o = f.observed
    return {
        "observed": {"replicas": o.replicas, "qps_per_replica": round(o.qps_per_replica, 4),
                     "input_tokens": o.input_tokens, "output_tokens": o.output_tokens,
                     "tpot_mean_ms": round(1e3 * o.tpot_mean_s, 3), "prefill_mean_ms": round(1e3 * o.prefill_mean_s, 3)},
        "profile": {"name": f.profile.name, "base": f.base.name,
                    "prefill_efficiency": eff.prefill_efficiency(f.profile),
                    "decode_step_factor": round(eff.decode_factor(f.profile), 4),
                    eff.decode_field(f.profile): getattr(f.profile, eff.decode_field(f.profile)),
                    "prefill_slowdown": round(f.prefill_slowdown, 4), "decode_slowdown": round(f.decode_slowdown, 4),
                    "rms_log_error": round(f.rms_log_error, 5), "iterations": f.iterations, "written_to": str(path)},
        "plan_before": _plan_figures(before), "plan_after": _plan_figures(after),
    }


def print_calibrate(f: Fit, before: Plan, after: Plan, path: Path, stack: str | None) -> None:
    from rich.table import Table

    console = _console()
    o = f.observed
    console.print(f"Observed: {o.replicas} replicas at {o.qps_per_replica:.2f} QPS each, {o.input_tokens} in / "
                  f"{o.output_tokens} out; mean TPOT {1e3 * o.tpot_mean_s:.2f} ms, mean prefill "
                  f"{1e3 * o.prefill_mean_s:.1f} ms.")
    console.print(f"Fitted from '{f.base.name}': prefill efficiency {eff.prefill_efficiency(f.base):g} -> "
                  f"{eff.prefill_efficiency(f.profile):g} (prefill {f.prefill_slowdown:.3f}x the planned time), "
                  f"decode step factor {eff.decode_factor(f.base):.4g} -> {eff.decode_factor(f.profile):.4g} "
                  f"(decode steps {f.decode_slowdown:.3f}x); the simulated fleet under it reproduces both figures "
                  f"to {100 * f.rms_log_error:.2f}% (RMS log error, {f.iterations} Gauss-Newton steps).")
    console.print(f"Wrote profile '{f.profile.name}' to {path}. Select it in the stack: "
                  f"llm-serving:sizing: {{profile: {f.profile.name}}}.")
    table = Table("plan", f"profile {f.base.name}", f"profile {f.profile.name}")
    b, a = _plan_figures(before), _plan_figures(after)
    for key, label in (("tp", "TP"), ("replicas", "replicas"), ("capacity_per_replica_qps", "capacity per replica (QPS)"),
                       ("capacity_qps", "capacity, all replicas (QPS)"),
                       ("capacity_after_zone_loss_qps", "capacity after losing a zone (QPS)"),
                       ("binding", "binding constraint"), ("survives_failure", "N+1 holds")):
        table.add_row(label, str(b[key]), str(a[key]))
    console.print(table)
