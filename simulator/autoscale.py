"""A load curve through the plan's fleet, with the autoscaling policy in the loop.

Arrivals are a Poisson process whose rate follows the curve (`sizing.load_curve`, drawn by
thinning: candidates at the peak rate, each kept with probability rate(t) / peak). Every
`polling_interval_s` the policy does what KEDA's two triggers and the HPA do with the plan's
`AutoscalePolicy` (sizing/autoscale.py):

- it measures the fleet's served requests per second over the last 2 min (the `rate()` of
  vllm:request_success_total) and, from those samples every 30 s over the last 10 min, the same
  rate `lead_s` ahead (Prometheus' `predict_linear`: least squares, extrapolated);
- each zone's proposal is ceil(rate / zone_threshold), the larger of the two, held within the zone's
  floor and ceiling; the HPA's 10% tolerance leaves a zone as it is when the ratio is near 1;
- a zone scales up at once, and down only to the highest proposal of the last
  `scale_down_stabilization_s` (the HPA's stabilization window);
- a new replica holds its GPUs from the decision and serves only after its cold start: on a
  node that is up with free GPUs, `replica_on_warm_node_s`; else a new node of the zone's pools
  (at most the pools' nodes), `replica_on_new_node_s`;
- a replica scaled down leaves the router at once and holds its GPUs until its last request is
  done (the drain); a node left empty for `node_scale_down_s` is removed, never below the nodes the
  floor needs.

A zone lost at T (`--fail-zone ZONE@T[:T2]`) takes every replica there down, starting or serving
(their requests retried once elsewhere, as in `simulator.loop`); its Deployment's pods stay pending
until the zone is back, then start on new nodes. Each request goes through its replica's API
server (`request_overhead_s`) as a fixed delay before the engine: at a few requests per second per
replica the server's queue is negligible.

Static (`autoscale=False`): the plan's fleet for the peak, all the time: `gpu_hours_static`.
"""
from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush

from sizing.autoscale import HPA_TOLERANCE, nodes_for
from sizing.load_curve import LoadCurve

from .loop import ReplicaSpec, SimConfig, ZoneFailure
from .replica import Replica
from .report import summarize
from .router import Router
from .workload import MAX_REQUESTS, Request, WorkLimitError, length_draw

RATE_WINDOW_S = 120.0        # the policy's rate(...[2m])
PREDICT_WINDOW_S, PREDICT_STEP_S = 600.0, 30.0   # predict_linear((...)[10m:30s], lead)


@dataclass(frozen=True)
class Scaling:
    """What the run scales by: the plan's policy (or the static fleet) and its geometry."""
    floor_by_zone: dict[str, int]
    ceiling_by_zone: dict[str, int]
    zone_threshold: float
    lead_s: float
    stabilization_s: float
    warm_start_s: float
    new_node_start_s: float
    polling_interval_s: float
    node_scale_down_s: float
    tp: int
    gpus_per_node: int
    nodes_per_replica: int
    max_nodes_by_zone: dict[str, int]
    autoscale: bool = True

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.nodes_per_replica

    def nodes(self, replicas: int) -> int:
        return nodes_for(replicas, self.tp, self.gpus_per_node, self.nodes_per_replica)


def scaling_from_plan(plan, autoscale: bool) -> Scaling:
    """The plan's policy, or (autoscale False) its static fleet for the peak at floor and ceiling."""
    a = plan.autoscale
    if a is None:
        raise ValueError("the plan has no autoscaling policy: give it a load over time (workload.traffic or --traffic)")
    max_nodes: dict[str, int] = {}
    for pool in plan.request.pools:
        max_nodes[pool.zone] = max_nodes.get(pool.zone, 0) + pool.nodes
    static = dict(plan.replicas_by_zone)
    cold = a.cold_start
    return Scaling(
        floor_by_zone=dict(a.floor_by_zone) if autoscale else static,
        ceiling_by_zone=dict(a.ceiling_by_zone) if autoscale else static,
        zone_threshold=a.zone_threshold, lead_s=a.lead_s, stabilization_s=a.scale_down_stabilization_s,
        warm_start_s=cold.replica_on_warm_node_s, new_node_start_s=cold.replica_on_new_node_s,
        polling_interval_s=a.polling_interval_s, node_scale_down_s=a.node_scale_down_s, tp=plan.tp,
        gpus_per_node=plan.instance.gpus, nodes_per_replica=plan.nodes_per_replica, max_nodes_by_zone=max_nodes,
        autoscale=autoscale)


def curve_arrivals(curve: LoadCurve, seed: int) -> list[float]:
    """Arrival times of a Poisson process at the curve's rate over its span: on each straight
    piece, candidates at the piece's higher rate, each kept with probability rate(t) / that rate."""
    expected = curve.mean_qps * curve.span_s
    if expected > MAX_REQUESTS:
        raise WorkLimitError("--traffic", f"the curve brings {expected:.3g} requests, above the limit of "
                                          f"{MAX_REQUESTS:,}; shorten it or lower its rates")
    rnd = random.Random(f"{seed}-arrivals").random
    log = math.log
    times: list[float] = []
    ts, qs = curve.times_s, curve.qps
    for i in range(len(ts) - 1):
        t0, t1, q0, q1 = ts[i], ts[i + 1], qs[i], qs[i + 1]
        top, slope = max(q0, q1), (q1 - q0) / (t1 - t0)
        t = t0
        while True:
            t -= log(1.0 - rnd()) / top
            if t >= t1:
                break
            if rnd() * top < q0 + slope * (t - t0):
                times.append(t)
    return times


@dataclass
class _Slot:
    """One replica of the run: its engine, its zone and when it held and served."""
    rep: Replica
    zone: str
    state: str                # starting | serving | draining | gone
    alloc_s: float
    ready_s: float
    new_node: bool
    release_s: float | None = None


@dataclass
class AutoscaleResult:
    requests: list[Request]
    slots: list[_Slot]
    span_s: float
    retried: int = 0
    cold_starts: int = 0
    cold_starts_on_new_nodes: int = 0
    node_seconds: float = 0.0
    floor_breaches: list[dict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    failure: ZoneFailure | None = None
    config: SimConfig | None = None
    scaling: Scaling | None = None


class _Run:
    """One run: arrivals, policy ticks, replicas becoming ready, a zone failure, in time order."""

    def __init__(self, config: SimConfig, curve: LoadCurve, scaling: Scaling, failure: ZoneFailure | None):
        self.cfg, self.curve, self.sc, self.failure = config, curve, scaling, failure
        self.zones = sorted(scaling.ceiling_by_zone)
        if failure is not None and failure.zone not in self.zones:
            raise ValueError(f"zone {failure.zone} holds no replica (zones: {', '.join(self.zones)})")
        w = config.workload
        draw = length_draw(w)
        self.requests = [Request(i, t, *draw()) for i, t in enumerate(curve_arrivals(curve, w.seed))]
        self.done_per_s = [0] * (int(curve.span_s) + 2)
        self.result = AutoscaleResult(self.requests, [], curve.span_s, failure=failure, config=config, scaling=scaling)
        self.serving: list[Replica] = []
        self.router = Router(config.router, self.serving)
        self.slots: list[_Slot] = self.result.slots
        self.nodes_up = {z: 0 for z in self.zones}
        # per zone, when each node's first replica serves (0: up at the start), oldest first
        self.node_ready: dict[str, list[float]] = {z: [] for z in self.zones}
        self.empty_since: dict[str, float | None] = {z: None for z in self.zones}
        self.lost = False
        self.back_s: float | None = None
        self.samples: deque[tuple[float, float]] = deque()
        self.proposals = {z: deque() for z in self.zones}
        self.heap: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.last_node_t = 0.0

    # -- replicas ------------------------------------------------------------------------------
    def _completed(self, r: Request) -> None:
        if r.t_done is not None and r.t_done < len(self.done_per_s):
            self.done_per_s[int(r.t_done)] += 1

    def _new_slot(self, zone: str, t: float, ready_s: float, new_node: bool) -> _Slot:
        c = self.cfg
        i = len(self.slots)
        rep = Replica(f"{zone}/{i}", zone, c.cost, c.max_num_batched_tokens, c.max_num_seqs,
                      c.kv_capacity_tokens, self._completed, c.long_prefill_token_threshold)
        slot = _Slot(rep, zone, "starting", t, ready_s, new_node)
        self.slots.append(slot)
        return slot

    def _push(self, t: float, kind: str, index: int = -1) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, index))

    def _in_zone(self, zone: str, *states: str) -> list[_Slot]:
        return [s for s in self.slots if s.zone == zone and s.state in states]

    def _start(self, zone: str, t: float) -> bool:
        """One more replica in `zone`: on a node with free GPUs, else on a new node (within the pools)."""
        sc = self.sc
        held = len(self._in_zone(zone, "starting", "serving", "draining"))
        need = sc.nodes(held + 1)
        if need > self.nodes_up[zone]:
            if need > sc.max_nodes_by_zone.get(zone, 0):
                return False
            self._account_nodes(t)
            self.node_ready[zone] += [t + sc.new_node_start_s] * (need - self.nodes_up[zone])
            self.nodes_up[zone] = need
        # on the node it lands on: a node still coming up serves its first replica then, no sooner
        node_ready = self.node_ready[zone][need - 1]
        new_node = node_ready > t
        slot = self._new_slot(zone, t, max(node_ready, t + sc.warm_start_s), new_node)
        self.result.cold_starts += 1
        self.result.cold_starts_on_new_nodes += int(new_node)
        self._push(slot.ready_s, "ready", len(self.slots) - 1)
        return True

    def _stop(self, zone: str, t: float) -> None:
        """One fewer: a replica still starting first (the newest), else the newest serving one drains."""
        for state in ("starting", "serving"):
            found = self._in_zone(zone, state)
            if found:
                slot = max(found, key=lambda s: s.alloc_s)
                if state == "starting":
                    slot.state, slot.release_s = "gone", t
                else:
                    slot.state = "draining"
                    self.serving.remove(slot.rep)
                    self.router.refresh()
                return

    def _ready(self, index: int, t: float) -> None:
        slot = self.slots[index]
        if slot.state != "starting":
            return
        slot.state = "serving"
        slot.rep.recover(t)                   # empty and ready from t (its accounting starts here)
        self.serving.append(slot.rep)
        self.router.refresh()

    def _run_all(self, t: float) -> None:
        for s in self.slots:
            if s.state in ("serving", "draining") and s.rep.next_end <= t:
                s.rep.run_until(t)

    def _account_nodes(self, t: float) -> None:
        self.result.node_seconds += sum(self.nodes_up.values()) * (t - self.last_node_t)
        self.last_node_t = t

    # -- the policy ----------------------------------------------------------------------------
    def _rates(self, t: float) -> tuple[float, float]:
        """(the served rate over the last 2 min, that rate lead_s ahead by least squares)."""
        lo = max(0, int(t - RATE_WINDOW_S))
        rate = sum(self.done_per_s[lo:int(t)]) / RATE_WINDOW_S
        self.samples.append((t, rate))
        while self.samples and self.samples[0][0] <= t - PREDICT_WINDOW_S:
            self.samples.popleft()
        n = len(self.samples)
        if n < 2:
            return rate, rate
        mx = sum(s[0] for s in self.samples) / n
        my = sum(s[1] for s in self.samples) / n
        sxx = sum((s[0] - mx) ** 2 for s in self.samples)
        slope = sum((s[0] - mx) * (s[1] - my) for s in self.samples) / sxx if sxx > 0 else 0.0
        return rate, my + slope * (t + self.sc.lead_s - mx)

    def _target(self, zone: str, t: float, metric: float, current: int) -> int:
        sc = self.sc
        lo, hi = sc.floor_by_zone.get(zone, 0), sc.ceiling_by_zone.get(zone, 0)
        if not sc.autoscale:
            return hi
        ratio = metric / (sc.zone_threshold * current) if current else math.inf
        proposal = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(metric / sc.zone_threshold - 1e-9)
        proposal = max(lo, min(hi, proposal))
        window = self.proposals[zone]
        window.append((t, proposal))
        while window and window[0][0] < t - sc.stabilization_s:
            window.popleft()
        return proposal if proposal >= current else max(p for _, p in window)

    def _tick(self, t: float) -> None:
        rate, ahead = self._rates(t)
        metric = max(rate, ahead)
        for zone in self.zones:
            if self.lost and zone == self.failure.zone:
                continue
            current = len(self._in_zone(zone, "starting", "serving"))
            target = self._target(zone, t, metric, current)
            while current < target and self._start(zone, t):
                current += 1
            while current > target:
                self._stop(zone, t)
                current -= 1
        self._drained_and_nodes(t)
        self._check_floor(t)
        self.result.timeline.append({
            "t_s": round(t, 1), "curve_qps": round(self.curve.at(t), 3), "served_qps": round(rate, 3),
            "predicted_qps": round(ahead, 3),
            "replicas": {z: len(self._in_zone(z, "starting", "serving")) for z in self.zones},
            "serving": {z: len(self._in_zone(z, "serving")) for z in self.zones},
            "nodes": dict(self.nodes_up)})

    def _drained_and_nodes(self, t: float) -> None:
        for s in self.slots:
            if s.state == "draining" and s.rep.outstanding() == 0:
                s.state, s.release_s = "gone", t
        for zone in self.zones:
            held = len(self._in_zone(zone, "starting", "serving", "draining"))
            need = self.sc.nodes(max(held, self.sc.floor_by_zone.get(zone, 0)))
            if self.nodes_up[zone] <= need or (self.lost and zone == self.failure.zone):
                self.empty_since[zone] = None
            elif self.empty_since[zone] is None:
                self.empty_since[zone] = t
            elif t - self.empty_since[zone] >= self.sc.node_scale_down_s:
                self._account_nodes(t)
                self.nodes_up[zone] = need
                del self.node_ready[zone][need:]
                self.empty_since[zone] = None

    def _check_floor(self, t: float) -> None:
        """Serving replicas under the floor in a zone that is up (a zone back from a loss gets the
        new-node cold start and one poll to refill)."""
        grace = self.sc.new_node_start_s + 2 * self.sc.polling_interval_s
        for zone in self.zones:
            f = self.failure
            if f is not None and zone == f.zone and (self.lost or (self.back_s is not None and t < self.back_s + grace)):
                continue
            serving = len(self._in_zone(zone, "serving"))
            if serving < self.sc.floor_by_zone.get(zone, 0) and len(self.result.floor_breaches) < 20:
                self.result.floor_breaches.append({"t_s": round(t, 1), "zone": zone, "serving": serving,
                                                   "floor": self.sc.floor_by_zone[zone]})

    # -- failure -------------------------------------------------------------------------------
    def _fail(self, t: float) -> None:
        zone = self.failure.zone
        self.lost = True
        held: list[Request] = []
        for s in self.slots:
            if s.zone != zone or s.state == "gone":
                continue
            if s.state in ("serving", "draining"):
                held += s.rep.fail(t)
                if s.rep in self.serving:
                    self.serving.remove(s.rep)
            s.state, s.release_s = "gone", t
        self.router.refresh()
        self._account_nodes(t)
        self.nodes_up[zone] = 0
        self.node_ready[zone] = []
        for r in sorted(held, key=lambda q: q.arrival):
            if r.attempts >= 2:
                r.lost = True
                continue
            self.result.retried += 1
            self._route(r, t)

    def _route(self, r: Request, t: float) -> None:
        r.attempts += 1
        target = self.router.pick(t)
        if target is None:
            r.lost = True
        else:
            target.enqueue(r, t)

    # -- the run -------------------------------------------------------------------------------
    def _initial(self) -> None:
        """The fleet up and serving at t = 0 for the curve's start (and, scaling, its rate lead_s on)."""
        sc = self.sc
        rate = self.curve.max_between(0.0, sc.lead_s)
        for zone in self.zones:
            lo, hi = sc.floor_by_zone.get(zone, 0), sc.ceiling_by_zone.get(zone, 0)
            n = hi if not sc.autoscale else max(lo, min(hi, math.ceil(rate / sc.zone_threshold - 1e-9)))
            self.nodes_up[zone] = sc.nodes(n)
            self.node_ready[zone] = [0.0] * sc.nodes(n)
            for _ in range(n):
                slot = self._new_slot(zone, 0.0, 0.0, False)
                slot.state = "serving"
                self.serving.append(slot.rep)
        self.router.refresh()

    def _event(self, kind: str, index: int, t: float) -> None:
        self._run_all(t)
        if kind == "tick":
            self._tick(t)
            if t + self.sc.polling_interval_s < self.curve.span_s:
                self._push(t + self.sc.polling_interval_s, "tick")
        elif kind == "ready":
            self._ready(index, t)
        elif kind == "fail":
            self._fail(t)
        elif kind == "recover":
            self.lost, self.back_s = False, t

    def run(self) -> AutoscaleResult:
        self._initial()
        self._push(self.sc.polling_interval_s, "tick")
        if self.failure is not None:
            self._push(self.failure.start_s, "fail")
            if self.failure.end_s is not None:
                self._push(self.failure.end_s, "recover")
        overhead = self.cfg.request_overhead_s
        heap = self.heap
        for r in self.requests:
            t = r.arrival + overhead          # through the replica's API server, then the engine
            while heap and heap[0][0] <= t:
                te, _, kind, index = heappop(heap)
                self._event(kind, index, te)
            for rep in self.serving:
                if rep.next_end <= t:
                    rep.run_until(t)
            self._route(r, t)
        while heap:
            te, _, kind, index = heappop(heap)
            self._event(kind, index, te)
        self._finish()
        return self.result

    def _finish(self) -> None:
        span = self.curve.span_s
        for s in self.slots:
            if s.state in ("serving", "draining"):
                s.rep.run_until(math.inf)
            if s.release_s is None:
                s.release_s = span
        self._account_nodes(span)


def simulate_autoscaled(config: SimConfig, curve: LoadCurve, scaling: Scaling,
                        failure: ZoneFailure | None = None) -> AutoscaleResult:
    """Run the curve through the fleet (`config.replicas` is unused: the scaling places them)."""
    if failure is not None and failure.node is not None:
        raise ValueError("a node failure is not simulated with a load curve; lose a zone (--fail-zone)")
    return _Run(config, curve, scaling, failure).run()


def gpu_hours(result: AutoscaleResult) -> float:
    """GPUs held by replicas (from the scale-up decision to the end of the drain), in GPU-hours."""
    g = result.scaling.gpus_per_replica
    span = result.span_s
    return sum(g * (min(s.release_s, span) - min(s.alloc_s, span)) for s in result.slots) / 3600


def to_dict(result: AutoscaleResult, plan) -> dict:
    """The run's JSON: goodput and latencies as `simulate` reports them, and the fleet's hours."""
    cfg, sc, curve_span = result.config, result.scaling, result.span_s
    stats = summarize(result.requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
    out = {
        "autoscale": sc.autoscale, "span_s": curve_span, "seed": cfg.workload.seed, "router": cfg.router,
        "slo": {"ttft_ms": 1e3 * cfg.ttft_slo_s, "tpot_ms": 1e3 * cfg.tpot_slo_s},
        **stats, "requests_retried": result.retried,
        "gpu_hours": round(gpu_hours(result), 3),
        "gpu_hours_static": round(plan.gpus_used * curve_span / 3600, 3),
        "node_hours": round(result.node_seconds / 3600, 3),
        "node_hours_static": round(len(plan.nodes) * curve_span / 3600, 3),   # one NodeSlot per node
        "cold_starts": result.cold_starts, "cold_starts_on_new_nodes": result.cold_starts_on_new_nodes,
        "cold_start_s": {"warm_node": sc.warm_start_s, "new_node": sc.new_node_start_s},
        "floor_by_zone": sc.floor_by_zone, "ceiling_by_zone": sc.ceiling_by_zone,
        "floor_held": not result.floor_breaches, "floor_breaches": result.floor_breaches,
        "min_serving_by_zone": {z: min((row["serving"][z] for row in result.timeline), default=None)
                                for z in sorted(sc.ceiling_by_zone)},
    }
    f = result.failure
    if f is not None:
        end = f.end_s if f.end_s is not None else curve_span
        during = [r for r in result.requests if f.start_s <= r.arrival < end]
        out["failure"] = {"zone": f.zone, "start_s": f.start_s, "end_s": f.end_s,
                          "during": summarize(during, cfg.ttft_slo_s, cfg.tpot_slo_s)}
    out["timeline"] = result.timeline
    return out


__all__ = ["AutoscaleResult", "ReplicaSpec", "Scaling", "curve_arrivals", "gpu_hours", "scaling_from_plan",
           "simulate_autoscaled", "to_dict"]
