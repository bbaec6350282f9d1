"""`llmserve twin`: the plan's fleet emulated, scraped and alerted on, and what fired when.

`Twin` starts everything (emulated replicas, Prometheus, Alertmanager) and stops everything on
exit. `run` plays one scenario to its end and judges the alerts against what the plan says:

- at the planned load (within what N+1 carries and below the capacity-share alert), nothing fires;
- a lost zone fires the zone's replica-count alerts and "N+1 no longer holds", each only if the
  outage outlasts its `for:` (plus the detection lag), and they resolve once the zone is back;
  the latency and load alerts stay silent (the plan carries the load on what is left);
- past the sized capacity, the latency alert of the plan's binding constraint fires, and the load
  alerts whose threshold the offered load passes.
Everything else that fires is listed, not judged.

A run whose Prometheus or Alertmanager died, stopped, stopped answering or restarted is judged
by nothing: `Twin.check_servers` (every poll while the twin waits, and once more after its last
read) raises ServerLost naming the server, and no verdict is made.
"""
from __future__ import annotations

import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from observability.alerts import Alert, Behaviour
from observability.rules import AlertPolicy, plan_alerts, rule_groups
from simulator import ZoneFailure, config_from_plan, replica_specs
from simulator.plan import disagg_config_from_plan, is_disaggregated
from sizing.planner import Plan

from .exporters import Clock, Exporters
from .health import PROBE_INTERVAL_S
from .lifecycle import Started
from .servers import GROUP_INTERVAL_S, WHILE_STARTING, Servers, TwinError, seconds
from .pd_timeline import build_disaggregated
from .timeline import build

DETECTION_LAG_S = 120.0     # simulated: rate windows filling, scrape and evaluation, AM grouping
# Simulated seconds run past the end, so the last resolves arrive: Alertmanager sends a group's
# resolve at its next group_interval tick.
SETTLE_S = GROUP_INTERVAL_S + DETECTION_LAG_S
POLL_WALL_S = 0.1
FIRST_SCRAPE_TIMEOUT_S = 60.0   # Prometheus hands targets to its scrapers after about 5 s (more on a busy machine)



@dataclass
class AlertEvent:
    name: str
    labels: dict
    fired_s: float                  # simulated seconds
    resolved_s: float | None


@dataclass
class Expectation:
    name: str
    zone: str | None = None         # the alert's zone label, when it has one
    resolve_after_s: float | None = None   # must also resolve after this instant (the zone's return)
    reason: str = ""


@dataclass
class Verdict:
    required: list[tuple[Expectation, str]] = field(default_factory=list)   # (expectation, problem or "")
    forbidden_fired: list[AlertEvent] = field(default_factory=list)
    not_judged: list[AlertEvent] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.forbidden_fired and all(not problem for _, problem in self.required)


class Twin(Started):
    """The emulated fleet of a plan on a real Prometheus and Alertmanager (a context manager)."""

    def __init__(self, plan: Plan, namespace: str, *, qps: float | None = None, duration_s: float = 1200.0,
                 failure: ZoneFailure | None = None, scale: float = 60.0, slowdown: float = 1.0, seed: int = 0,
                 policy: AlertPolicy = AlertPolicy()):
        self.plan, self.namespace, self.scale, self.policy = plan, namespace, scale, policy
        self.disaggregated = is_disaggregated(plan)
        if self.disaggregated:           # its two pools and the KV transfer (twin/pd_timeline.py)
            if slowdown != 1.0:
                raise TwinError("--slowdown: not emulated for a disaggregated plan; leave it at 1")
            self.config = disagg_config_from_plan(plan, duration_s, qps, failure=failure, seed=seed)
        else:
            self.config = config_from_plan(plan, duration_s, qps, failure=failure, seed=seed)
        self.slowdown = slowdown
        self.clock = Clock(scale)
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._exporters: Exporters | None = None
        self._servers: Servers | None = None

    @property
    def prometheus_url(self) -> str:
        return self._servers.prometheus_url

    @property
    def alertmanager_url(self) -> str:
        return self._servers.alertmanager_url

    def start(self) -> None:
        self.timeline = (build_disaggregated(self.config) if self.disaggregated
                         else build(self.config, self.slowdown))
        self._tmp = tempfile.TemporaryDirectory(prefix="llmserve-twin-")
        self._exporters = Exporters(self.timeline, self.clock, self.namespace, self.plan.request.model).__enter__()
        groups = rule_groups(self.plan, self.namespace, self.policy)
        self._servers = Servers(Path(self._tmp.name), groups, self._exporters.targets, self.scale).__enter__()
        if not self._exporters.wait_scraped(FIRST_SCRAPE_TIMEOUT_S, give_up=self._servers.gone):
            self._servers.check(WHILE_STARTING)
            raise TwinError(f"Prometheus did not scrape every target within {FIRST_SCRAPE_TIMEOUT_S:g} s")
        self._servers.wait_alertmanager_discovered()
        # The reload makes Prometheus rediscover Alertmanager (about 5 s); an alert firing in
        # that gap is dropped and sent again a resend delay later, with its own startsAt.
        self._servers.load_rules()
        self.clock.start()      # simulated time 0: every target is being scraped

    def close(self) -> None:
        for part in (self._servers, self._exporters):
            if part is not None:
                part.close()
        self._servers = self._exporters = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def wait_until(self, sim_s: float) -> None:
        """Sleep until the twin's clock reads sim_s (bounded: at most that long in wall time),
        checking the servers all along (ServerLost the moment one is not fine) and at the end."""
        deadline = time.monotonic() + max(0.0, sim_s - self.clock.now()) / self.scale + 1.0
        next_probe = 0.0
        while self.clock.now() < sim_s and time.monotonic() < deadline:
            probe = time.monotonic() >= next_probe
            self.check_servers(probe)
            if probe:
                next_probe = time.monotonic() + PROBE_INTERVAL_S
            time.sleep(min(POLL_WALL_S, max(0.0, (sim_s - self.clock.now()) / self.scale)))
        self.check_servers()

    def check_servers(self, probe: bool = True) -> None:
        """ServerLost if Prometheus or Alertmanager died, stopped, stopped answering or restarted."""
        now = self.clock.now()
        self._servers.check(f"at {now:,.0f} simulated s" if self.clock.wall_start is not None else WHILE_STARTING,
                            probe)

    def diagnostics(self) -> dict:
        """Prometheus' own counters at the end (printed when the alerts did not behave as expected)."""
        import urllib.request
        wanted = ("prometheus_notifications_sent_total", "prometheus_notifications_dropped_total",
                  "prometheus_notifications_errors_total", "prometheus_notifications_alertmanagers_discovered",
                  "prometheus_rule_evaluation_failures_total", "prometheus_target_scrapes_exceeded_sample_limit_total",
                  "prometheus_rule_group_iterations_missed_total")
        out: dict = {"clock_s": round(self.clock.now(), 1),
                     "webhook_notifications": len(self._servers.webhook.notifications)}
        try:
            with urllib.request.urlopen(f"{self.prometheus_url}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError as exc:
            return {**out, "error": str(exc)}
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in wanted:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def alert_events(self) -> list[AlertEvent]:
        """Each alert instance Alertmanager notified: when it fired and when (if) it resolved."""
        by_key: dict[str, AlertEvent] = {}
        for a in self._servers.webhook.alerts():
            key = a.get("fingerprint") or repr(sorted(a["labels"].items()))
            fired = self.clock.sim_time(_unix(a["startsAt"]))
            event = by_key.setdefault(key, AlertEvent(a["labels"]["alertname"], a["labels"], fired, None))
            event.fired_s = min(event.fired_s, fired)
            if a.get("status") == "resolved":
                event.resolved_s = self.clock.sim_time(_unix(a["endsAt"]))
        return sorted(by_key.values(), key=lambda e: (e.fired_s, e.name))


def _unix(rfc3339: str) -> float:
    text = rfc3339.replace("Z", "+00:00")
    if "." in text:       # Go writes nanoseconds; Python parses up to microseconds
        head, rest = text.split(".", 1)
        frac, tz = rest[:-6], rest[-6:]
        text = f"{head}.{frac[:6]}{tz}"
    return datetime.fromisoformat(text).timestamp()


# -- expectations -------------------------------------------------------------------------------
def expectations(plan: Plan, qps: float, duration_s: float, failure: ZoneFailure | None,
                 policy: AlertPolicy, namespace: str) -> tuple[list[Expectation], set[str]]:
    """(what must fire, names that must not) for this scenario, from what each alert of the plan
    says it does under the planned load, a zone loss and an overload (`Alert.expected`)."""
    alerts = plan_alerts(plan, policy)
    # The planned load: below every threshold an overload is judged against.
    within = all(a.expected.overload_above_qps is None or qps <= a.expected.overload_above_qps for a in alerts)
    required: list[Expectation] = []
    forbidden: set[str] = set()
    for a in alerts:
        if within and (a.expected.zone_loss if failure is not None else a.expected.planned_load) is Behaviour.SILENT:
            forbidden.add(a.name)
        if _overload_fires(a, qps, duration_s):
            required.append(Expectation(a.name, reason=f"{qps:g} QPS is past the {a.expected.overload_above_qps:g} "
                                                       "QPS beyond which the plan says it fires"))
    if failure is not None and _empties_its_zone(plan, failure):
        required += _zone_expectations(alerts, failure, duration_s)
    return required, forbidden - {e.name for e in required}


def _empties_its_zone(plan: Plan, failure: ZoneFailure) -> bool:
    """A zone's loss empties it; a node's, when every replica of its zone runs on it (a group
    spanning nodes is lost whole, so one node of a zone's only group empties the zone). A node
    whose loss leaves its zone serving is a smaller loss than the plan's zone alerts judge: the
    twin then requires none of them."""
    in_zone = [spec for spec in replica_specs(plan) if spec.zone == failure.zone]
    return all(failure.hits(spec) for spec in in_zone)


def _overload_fires(a: Alert, qps: float, duration_s: float) -> bool:
    e = a.expected
    return (e.overload is Behaviour.FIRES and e.overload_above_qps is not None
            and qps > e.overload_margin * e.overload_above_qps
            and duration_s >= seconds(a.for_) + 2 * DETECTION_LAG_S)


def _zone_expectations(alerts: list[Alert], failure: ZoneFailure, duration_s: float) -> list[Expectation]:
    out = []
    back = min(failure.end_s if failure.end_s is not None else duration_s, duration_s)
    outage = back - failure.start_s
    resolve_by = failure.end_s if failure.end_s is not None and failure.end_s + DETECTION_LAG_S <= duration_s else None
    for a in alerts:
        need = seconds(a.for_) + DETECTION_LAG_S
        if a.expected.zone_loss is not Behaviour.FIRES or outage < need:
            continue
        out.append(Expectation(a.name, failure.zone if a.expected.per_zone else None, resolve_by,
                               f"{failure.domain} is down {outage:g} s, longer than the alert's for + "
                               f"{DETECTION_LAG_S:g} s lag ({need:g} s)"))
    return out


def judge(events: list[AlertEvent], required: list[Expectation], forbidden: set[str]) -> Verdict:
    v = Verdict()
    claimed: set[int] = set()
    for exp in required:
        match = [e for e in events if e.name == exp.name and (exp.zone is None or e.labels.get("zone") == exp.zone)]
        claimed |= {id(e) for e in match}
        problem = ""
        if not match:
            problem = "did not fire"
        elif exp.resolve_after_s is not None and not any(
                e.resolved_s is not None and e.resolved_s >= exp.resolve_after_s for e in match):
            problem = "did not resolve after the zone came back"
        v.required.append((exp, problem))
    for e in events:
        if id(e) in claimed:
            continue
        (v.forbidden_fired if e.name in forbidden else v.not_judged).append(e)
    return v


@dataclass
class TwinReport:
    plan: Plan
    qps: float
    duration_s: float
    failure: ZoneFailure | None
    scale: float
    slowdown: float
    scrape_interval_sim_s: float
    events: list[AlertEvent]
    verdict: Verdict
    prometheus_version: str = ""
    alertmanager_version: str = ""
    wall_s: float = 0.0
    urls: tuple[str, str] = ("", "")      # Prometheus, Alertmanager (stopped by the time of the report)
    diagnostics: dict = field(default_factory=dict)


@contextmanager
def _terminate_as_exit():
    """SIGTERM raises SystemExit while the twin runs, so its servers are stopped and its work
    folder removed on the way out. (SIGKILL leaves no way out: the kernel then kills the servers,
    `lifecycle.spawn`, and the folder stays in the temporary directory.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(plan: Plan, namespace: str, *, qps: float | None = None, duration_s: float = 1200.0,
        failure: ZoneFailure | None = None, scale: float = 60.0, slowdown: float = 1.0, seed: int = 0,
        policy: AlertPolicy = AlertPolicy(), on_start=None) -> TwinReport:
    """Play the scenario to its end (plus SETTLE_S) and judge the alerts."""
    from .servers import scrape_interval_s, versions
    started = time.monotonic()
    rate = qps if qps is not None else plan.request.workload.qps
    required, forbidden = expectations(plan, rate, duration_s, failure, policy, namespace)
    with _terminate_as_exit(), Twin(plan, namespace, qps=rate, duration_s=duration_s, failure=failure, scale=scale,
                                    slowdown=slowdown, seed=seed, policy=policy) as twin:
        if on_start is not None:
            on_start(twin)
        twin.wait_until(duration_s + SETTLE_S)
        events = twin.alert_events()
        urls = (twin.prometheus_url, twin.alertmanager_url)
        diagnostics = twin.diagnostics()
        twin.check_servers()       # the last word: had a server gone while it was read, no verdict
    prom, am = versions()
    return TwinReport(plan, rate, duration_s, failure, scale, slowdown, scrape_interval_s(scale) * scale,
                      events, judge(events, required, forbidden), prom, am, time.monotonic() - started, urls,
                      diagnostics)
