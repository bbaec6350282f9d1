"""`llmserve check`: the plan next to what the fleet's Prometheus says, and whether it still holds.

For each replica: the load it carries, its mean and p95 TTFT and TPOT, KV-cache usage and
requests in flight, next to what the plan's replica model predicts at that same load. For the
service: the offered load against what N+1 carries, and the headroom left if the zone holding
the most ready replicas were lost now.

Outside the plan (exit 1) when any of:
- the load is above what the replicas left after losing a zone carry (N+1 no longer holds);
- with the replicas ready now, losing another zone would leave less than the load;
- TTFT or TPOT at the SLO's statistic (what its alert reads, `observability.rules.slo_alerts`) is
  above its SLO while every replica carries no more than its sized capacity;
- a replica's mean TPOT is more than `tolerance` above the plan's at the load it carries (the
  replicas are slower than the plan's profile: its capacities are too high; `llmserve
  calibrate` measures by how much);
- a figure the verdict needs could not be read: Prometheus sent it as an infinity, NaN where
  it cannot be "no requests", or not a number; or the service served requests but has no
  TTFT/TPOT at an SLO's statistic, a serving replica no mean TPOT, or there is no readiness series. Unknown is never
  "within the plan": `check` is read during incidents, and a fleet it cannot see is not fine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from observability.alerts import Alert
from observability.rules import slo_alerts
from simulator import replica_model
from sizing.planner import Plan

from .promapi import FleetLive

DEFAULT_TOLERANCE = 0.10


@dataclass
class Row:
    scope: str          # "service" or a replica's zone/pod
    figure: str
    plan: str
    live: str
    ok: bool = True


@dataclass
class CheckResult:
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:,.1f} ms"


def _qps(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f} QPS"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def check(plan: Plan, live: FleetLive, tolerance: float = DEFAULT_TOLERANCE) -> CheckResult:
    out = CheckResult()
    w = plan.request.workload
    if not live.replicas:
        out.problems.append(f"no vLLM series over the last {live.window}: is the fleet scraped (job=\"vllm\")?")
        return out
    out.problems.extend(_unknown(plan, live))
    _service_rows(plan, live, out)
    rm = replica_model(plan)
    cap = plan.capacity_per_replica.qps
    for rep in live.replicas:
        point = rm.at(rep.qps)
        planned_tpot = rm.tpot_s(rep.qps)
        name = f"{rep.zone}/{rep.pod}"
        planned_load = (w.qps or 0.0) / plan.replicas
        out.rows.append(Row(name, "load", f"{_qps(planned_load)} ({_qps(plan.load_per_replica_qps)} after a loss; "
                                          f"sized {_qps(cap)})", _qps(rep.qps), rep.qps <= cap))
        slower = rep.tpot_mean_s is not None and rep.tpot_mean_s > (1 + tolerance) * planned_tpot
        out.rows.append(Row(name, "mean TPOT at its load", _ms(planned_tpot), _ms(rep.tpot_mean_s), not slower))
        if slower:
            out.problems.append(
                f"{name}: mean TPOT {_ms(rep.tpot_mean_s)} is {rep.tpot_mean_s / planned_tpot - 1:+.0%} against the "
                f"plan's {_ms(planned_tpot)} at {rep.qps:.2f} QPS (tolerance {tolerance:.0%}): the replicas are "
                "slower than the plan's profile (run `llmserve calibrate`)")
        out.rows.append(Row(name, "p95 TTFT / TPOT at its load",
                            f"{_ms(point.ttft_p95_ms / 1e3)} / {_ms(point.tpot_p95_ms / 1e3)}",
                            f"{_ms(rep.ttft_p95_s)} / {_ms(rep.tpot_p95_s)}"))
        out.rows.append(Row(name, "mean TTFT", _ms(point.ttft_ms / 1e3), _ms(rep.ttft_mean_s)))
        kv_plan = point.kv_cache_gb / rm.memory.kv_budget_gb if rm.memory.kv_budget_gb else None
        out.rows.append(Row(name, "KV cache used (avg / max)", f"<= {_pct(kv_plan)}",
                            f"{_pct(rep.kv_usage_avg)} / {_pct(rep.kv_usage_max)}"))
        out.rows.append(Row(name, "requests in flight", f"{point.in_flight:.1f}",
                            "-" if rep.in_flight_avg is None else f"{rep.in_flight_avg:.1f}"))
    if all(r.qps <= cap for r in live.replicas):
        for alert in slo_alerts(plan):
            value = live.slo_latency_s.get(alert.name)
            if value is not None and value > alert.threshold:
                out.problems.append(f"{_slo_label(alert)} {_ms(value)} is above its {_ms(alert.threshold)} SLO at a "
                                    f"load the plan holds (every replica at or below its sized {_qps(cap)})")
    return out


def _unknown(plan: Plan, live: FleetLive) -> list[str]:
    """What the verdict needs and Prometheus did not give: each is a reason it cannot say "within plan"."""
    problems = []
    if live.unreadable:
        shown = ", ".join(live.unreadable[:5]) + (f" and {len(live.unreadable) - 5} more" if len(live.unreadable) > 5 else "")
        problems.append(f"could not read {len(live.unreadable)} figure(s) from Prometheus ({shown}): unknown, so "
                        "not within the plan")
    if live.served_qps > 0:
        missing = [_slo_label(a) for a in slo_alerts(plan) if live.slo_latency_s.get(a.name) is None]
        if missing:
            problems.append(f"no {' or '.join(missing)} over the last {live.window} although the replicas served "
                            f"{_qps(live.served_qps)}: the SLOs cannot be judged (are the histograms scraped?)")
    silent = [f"{r.zone}/{r.pod}" for r in live.replicas if r.qps > 0 and r.tpot_mean_s is None]
    if silent:
        problems.append(f"no mean TPOT for {', '.join(silent[:5])} although they served requests: cannot compare "
                        "them with the plan")
    if not live.ready_by_zone:
        problems.append("no readiness series (ready replicas by zone): N+1 headroom cannot be judged")
    return problems


def _slo_label(alert: Alert) -> str:
    """e.g. "mean TPOT": the statistic and the figure (the alert guards `tpot_slo_s`)."""
    return f"{alert.statistic} {alert.guards.removesuffix('_slo_s').upper()}"


def _service_rows(plan: Plan, live: FleetLive, out: CheckResult) -> None:
    w = plan.request.workload
    load = live.load_qps
    where = "offered at the gateway" if live.offered_qps is not None else "served by vLLM (no gateway series)"
    after_loss = plan.capacity_after_zone_loss_qps
    n1_ok = plan.redundancy == "none" or load <= after_loss
    out.rows.append(Row("service", f"load ({where})", f"{_qps(w.qps)} (N+1 carries {_qps(after_loss)})",
                        _qps(load), n1_ok))
    if not n1_ok:
        out.problems.append(f"load {_qps(load)} is above the {_qps(after_loss)} the replicas left after losing "
                            f"{plan.lost_domain} carry: N+1 by {plan.redundancy} no longer holds")
    ready = live.ready_by_zone
    if ready and plan.redundancy == "zone":
        _headroom_row(plan, live, ready, out)
    planned_zones = {z: n for z, n in plan.replicas_by_zone.items() if n}
    out.rows.append(Row("service", "ready replicas by zone", ", ".join(f"{z}: {n}" for z, n in planned_zones.items()),
                        ", ".join(f"{z}: {n:g}" for z, n in sorted(ready.items())) or "-",
                        not ready or all(ready.get(z, 0) >= n for z, n in planned_zones.items())))
    for alert in slo_alerts(plan):
        value = live.slo_latency_s.get(alert.name)
        out.rows.append(Row("service", _slo_label(alert), f"SLO {_ms(alert.threshold)}", _ms(value),
                            value is None or value <= alert.threshold))


def _headroom_row(plan: Plan, live: FleetLive, ready: dict[str, float], out: CheckResult) -> None:
    """What losing the zone with the most ready replicas would leave, against the load now."""
    load = live.load_qps
    left = (sum(ready.values()) - max(ready.values())) * plan.capacity_per_replica.qps
    headroom = left - load
    planned = plan.capacity_after_zone_loss_qps - (plan.request.workload.qps or 0.0)
    out.rows.append(Row("service", "headroom if the fullest zone were lost now", _qps(planned), _qps(headroom),
                        headroom >= 0))
    if headroom < 0:
        out.problems.append(f"with the {sum(ready.values()):g} replicas ready now, losing the zone holding the most "
                            f"would leave {_qps(left)}, below the load {_qps(load)}")
