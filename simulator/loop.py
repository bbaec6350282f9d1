"""The discrete-event loop: arrivals through the router onto replicas, and zone failures.

Replicas only meet at the router, so between two events each replica runs on its own; at each
event every replica is brought up to that time (only the step in progress stays pending), the
router looks at them, and the request joins its replica's next step.

A lost zone (or node) takes its replicas out at `start` (and back, empty and ready, at `end`);
a replica that spans nodes is lost with any one of them (its engine needs every rank). Every
request they held, waiting or running, is sent through the router once more at that instant,
from scratch (its latencies still count from its first arrival). A request with no healthy
replica to go to, or lost a second time, is lost: the gateway answers 503.
"""
from __future__ import annotations

import gc
import math
from dataclasses import dataclass, field

from .cost import StepCost
from .replica import Replica
from .router import Router
from .workload import Request, WorkloadSpec, generate


@dataclass(frozen=True)
class ZoneFailure:
    zone: str
    start_s: float
    end_s: float | None = None      # None: the zone stays down
    node: str | None = None         # a node (`<pool>/node-<i>`, in `zone`) rather than the whole zone

    def hits(self, spec: "ReplicaSpec") -> bool:
        """Whether the failure takes this replica down: its zone, or one of its nodes."""
        return self.node in spec.nodes if self.node is not None else spec.zone == self.zone

    @property
    def domain(self) -> str:
        return self.node or self.zone


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    zone: str
    nodes: tuple[str, ...] = ()     # the nodes it runs on: one, or a multi-node group's


@dataclass(frozen=True)
class SimConfig:
    workload: WorkloadSpec
    replicas: tuple[ReplicaSpec, ...]
    cost: StepCost
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_capacity_tokens: int
    ttft_slo_s: float
    tpot_slo_s: float
    router: str = "least-outstanding"
    failure: ZoneFailure | None = None


@dataclass
class SimResult:
    config: SimConfig
    requests: list[Request]
    replicas: list[Replica]
    end_s: float
    retried: int = 0
    lost: list[Request] = field(default_factory=list)


def _check(config: SimConfig) -> None:
    if not config.replicas:
        raise ValueError("no replicas to simulate")
    if config.workload.max_model_len > config.kv_capacity_tokens:
        raise ValueError(f"max_model_len {config.workload.max_model_len} exceeds the KV cache "
                         f"({config.kv_capacity_tokens} tokens): one sequence would not fit")
    fail = config.failure
    if fail is not None and fail.node is not None and not any(fail.hits(r) for r in config.replicas):
        nodes = ", ".join(sorted({n for r in config.replicas for n in r.nodes}))
        raise ValueError(f"node {fail.node} holds no replica (nodes: {nodes})")
    if fail is not None and fail.zone not in {r.zone for r in config.replicas}:
        zones = ", ".join(sorted({r.zone for r in config.replicas}))
        raise ValueError(f"zone {fail.zone} holds no replica (zones: {zones})")


def _failure_events(fail) -> list[tuple[float, str]]:
    """The zone's failure (and recovery) as (time, kind), to merge with the arrivals in time order."""
    events: list[tuple[float, str]] = []
    if fail is not None:
        events.append((fail.start_s, "fail"))
        if fail.end_s is not None:
            events.append((fail.end_s, "recover"))
    return events


def _zone_event(kind: str, t: float, zone: list[Replica], replicas: list[Replica], router: Router,
                result: SimResult, route) -> None:
    """The failed zone goes down (its held requests retried once elsewhere) or comes back."""
    for rep in replicas:
        rep.run_until(t)
    if kind == "recover":
        for rep in zone:
            rep.recover(t)
        router.refresh()
        return
    held: list[Request] = []
    for rep in zone:
        if rep.up:
            held += rep.fail(t)
    router.refresh()
    for r in sorted(held, key=lambda q: q.arrival):
        if r.attempts >= 2:              # retried once already
            r.lost = True
            result.lost.append(r)
            continue
        result.retried += 1
        route(r, t)


def simulate(config: SimConfig, on_route=None) -> SimResult:
    """Run it. `on_route(t, replicas, chosen)`, if given, sees every routing decision (tests).

    The cyclic garbage collector is off while it runs: a run builds no cycles, and its full
    collections would walk every request record again and again (a tenth of a million-request
    run); it is back on (if it was) when the run ends."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _simulate(config, on_route)
    finally:
        if collecting:
            gc.enable()


def _simulate(config: SimConfig, on_route) -> SimResult:
    _check(config)
    fail = config.failure
    requests = generate(config.workload)
    done: list[Request] = []
    replicas = [Replica(r.name, r.zone, config.cost, config.max_num_batched_tokens, config.max_num_seqs,
                        config.kv_capacity_tokens, done.append) for r in config.replicas]
    router = Router(config.router, replicas)
    result = SimResult(config, requests, replicas, 0.0)
    events = _failure_events(fail)
    ei = 0

    def route(r: Request, t: float) -> None:
        r.attempts += 1
        target = router.pick(t)
        if on_route is not None:
            on_route(t, replicas, target)
        if target is None:
            r.lost = True
            result.lost.append(r)
            return
        target.enqueue(r, t)

    lost = {spec.name for spec in config.replicas if fail is not None and fail.hits(spec)}

    def handle(kind: str, t: float) -> None:
        _zone_event(kind, t, [rep for rep in replicas if rep.name in lost], replicas, router, result, route)

    next_event = events[0][0] if events else math.inf
    pick = router.pick
    for r in requests:
        t = r.arrival
        if next_event <= t:
            while ei < len(events) and events[ei][0] <= t:
                handle(events[ei][1], events[ei][0])
                ei += 1
            next_event = events[ei][0] if ei < len(events) else math.inf
        for rep in replicas:
            if rep.next_end <= t:        # a step ends by t (run_until would do nothing otherwise)
                rep.run_until(t)
        if on_route is None:             # route(r, t), inline: once per request
            r.attempts += 1
            target = pick(t)
            if target is None:
                r.lost = True
                result.lost.append(r)
            else:
                target.enqueue(r, t)
        else:
            route(r, t)
    # Drain: later failure events still happen, then everything left runs to completion.
    while ei < len(events):
        handle(events[ei][1], events[ei][0])
        ei += 1
    for rep in replicas:
        rep.run_until(math.inf)
    result.end_s = max([config.workload.duration_s] + [r.t_done for r in done if r.t_done is not None])
    for rep in replicas:
        rep.finish_accounting(result.end_s)
    return result
