"""The discrete-event loop: arrivals through the router onto replicas, and zone failures.

Replicas only meet at the router, so between two events each replica runs on its own; at each
event every replica is brought up to that time (only the step in progress stays pending), the
router looks at them, and the request joins its replica's next step.

Two drivers. Open-loop arrivals (and a burst, all at t = 0) are known up front: they are routed in
time order, each replica brought up to each one (`_simulate`, the fast path). A closed loop's
next request exists only once a request completes, and a request's API-server time
(`request_overhead_s`) delays its entry to the engine: these run one event at a time from a
heap (`_EventRun`): a step's end, a send, an entry to an engine, a failure, whichever is first.

Each replica's API server (`request_overhead_s` per request: tokenize, admit, detokenize and
stream) is a FIFO single server in front of its engine: a request routed to the replica at t
enters the engine's waiting queue at max(t, when the server is free) + overhead, so one replica
serves at most 1 / overhead requests per second. The router counts the requests still in a
replica's server with those in its engine.

A lost zone (or node) takes its replicas out at `start` (and back, empty and ready, at `end`);
a replica that spans nodes is lost with any one of them (its engine needs every rank). Every
request they held, waiting or running, is sent through the router once more at that instant,
from scratch (its latencies still count from its first arrival). A request with no healthy
replica to go to, or lost a second time, is lost: the gateway answers 503.
"""
from __future__ import annotations

import gc
import math
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

from .cost import StepCost
from .replica import Replica, Speculation
from .router import Router
from .workload import MAX_REQUESTS, Request, WorkLimitError, WorkloadSpec, client_requests, generate


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
    request_overhead_s: float = 0.0     # each replica's API server, per request (a FIFO single server)
    long_prefill_token_threshold: int = 0   # vLLM's per-request chunk cap (0: none, vLLM's default)
    # speculative decoding on every replica (0 drafts: off): k, per-token acceptance, the verify step
    spec_draft_tokens: int = 0
    spec_acceptance_rate: float = 0.0
    spec_verify: Any = None


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


def speculation(config: SimConfig, name: str) -> Speculation | None:
    """A replica's speculative decoding (its own seeded draws), or None when the config has none."""
    if config.spec_draft_tokens <= 0:
        return None
    return Speculation(config.spec_draft_tokens, config.spec_acceptance_rate, config.spec_verify,
                       f"{config.workload.seed}-spec-{name}")


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
        if config.workload.arrivals == "closed-loop" or config.request_overhead_s > 0:
            return _EventRun(config, on_route).run()
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
                        config.kv_capacity_tokens, done.append, config.long_prefill_token_threshold,
                        speculation(config, r.name))
                for r in config.replicas]
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
    _finish(result, done)
    return result


def _finish(result: SimResult, done: list[Request]) -> None:
    """The run ends with its last completion, and not before its arrivals' window (a burst has none)."""
    w = result.config.workload
    floor = 0.0 if w.arrivals == "burst" else w.duration_s
    result.end_s = max([floor] + [r.t_done for r in done if r.t_done is not None])
    for rep in result.replicas:
        rep.finish_accounting(result.end_s)


ARRIVE, ENTER = 0, 1     # event kinds: a request is sent (routed); it leaves its replica's API server


class _EventRun:
    """One run, one event at a time: a closed loop, or any run whose replicas have an API server
    cost. A closed loop's clients all send at t = 0; a completion at t sends that client's next
    request at t (no think time) while t is inside the run's duration; a client whose request is
    lost (no healthy replica: a 503) stops."""

    def __init__(self, config: SimConfig, on_route):
        _check(config)
        self.config, self.on_route = config, on_route
        w = config.workload
        self.closed = w.arrivals == "closed-loop"
        if self.closed:
            requests, self.draw = client_requests(w)
        else:
            requests, self.draw = generate(w), None
        self.done: list[Request] = []
        self.replicas = [Replica(r.name, r.zone, config.cost, config.max_num_batched_tokens, config.max_num_seqs,
                                 config.kv_capacity_tokens, self.completed, config.long_prefill_token_threshold,
                                 speculation(config, r.name))
                         for r in config.replicas]
        self.index = {id(rep): i for i, rep in enumerate(self.replicas)}
        self.router = Router(config.router, self.replicas)
        self.result = SimResult(config, requests, self.replicas, 0.0)
        self.overhead = config.request_overhead_s
        self.free = [0.0] * len(self.replicas)                  # when each API server is next free
        self.queued: list[deque[Request]] = [deque() for _ in self.replicas]   # in each API server, FIFO
        self.heap: list[tuple[float, int, int, Request, int, int]] = []   # (t, seq, kind, request, replica, epoch)
        self.seq = 0
        for r in requests:
            self.push(r.arrival, ARRIVE, r, -1)

    def push(self, t: float, kind: int, r: Request, replica: int) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, r, replica, r.epoch))

    def completed(self, r: Request) -> None:
        """A replica's callback: the request's last token; a closed loop's client sends again."""
        self.done.append(r)
        t = r.t_done
        if not self.closed or t is None or t >= self.config.workload.duration_s or self.draw is None:
            return
        requests = self.result.requests
        if len(requests) >= MAX_REQUESTS:
            raise WorkLimitError("--duration", f"the closed loop sent {MAX_REQUESTS:,} requests before "
                                               f"{t:g} s, the limit; lower --duration")
        nxt = Request(len(requests), t, *self.draw())
        requests.append(nxt)
        self.push(t, ARRIVE, nxt, -1)

    def route(self, r: Request, t: float) -> None:
        r.attempts += 1
        target = self.router.pick(t)
        if self.on_route is not None:
            self.on_route(t, self.replicas, target)
        if target is None:
            r.lost = True
            self.result.lost.append(r)
            return
        if self.overhead <= 0:
            target.enqueue(r, t)
            return
        i = self.index[id(target)]
        start = self.free[i] if self.free[i] > t else t
        self.free[i] = end = start + self.overhead
        target.admitting += 1
        target.admitting_tokens += r.pf_total + r.out - r.gen
        r.replica = target.name
        self.queued[i].append(r)
        self.push(end, ENTER, r, i)

    def enter(self, r: Request, i: int, t: float) -> None:
        """The request leaves replica i's API server for its engine's waiting queue."""
        rep = self.replicas[i]
        self.queued[i].popleft()
        rep.admitting -= 1
        rep.admitting_tokens -= r.pf_total + r.out - r.gen
        rep.enqueue(r, t)

    def zone_event(self, kind: str, t: float, lost: set[str]) -> None:
        """As `_zone_event`, and the requests in the lost replicas' API servers are retried too."""
        zone = [i for i, spec in enumerate(self.config.replicas) if spec.name in lost]
        if kind == "recover":
            for i in zone:
                self.replicas[i].recover(t)
                self.free[i] = t
            self.router.refresh()
            return
        held: list[Request] = []
        for i in zone:
            rep = self.replicas[i]
            if rep.up:
                held += rep.fail(t)
            for r in self.queued[i]:
                r.restart()              # its entry event is stale from now on
                held.append(r)
            self.queued[i].clear()
            rep.admitting = rep.admitting_tokens = 0
            self.free[i] = t
        self.router.refresh()
        result = self.result
        for r in sorted(held, key=lambda q: q.arrival):
            if r.attempts >= 2:
                r.lost = True
                result.lost.append(r)
                continue
            result.retried += 1
            self.route(r, t)

    def run(self) -> SimResult:
        fail = self.config.failure
        events = _failure_events(fail)
        lost = {spec.name for spec in self.config.replicas if fail is not None and fail.hits(spec)}
        ei = 0
        heap, replicas = self.heap, self.replicas
        inf = math.inf
        while True:
            t_event = heap[0][0] if heap else inf
            t_fail = events[ei][0] if ei < len(events) else inf
            t = t_event if t_event < t_fail else t_fail
            t_step = inf
            for rep in replicas:
                if rep.next_end < t_step:
                    t_step = rep.next_end
            if t_step <= t and t_step < inf:     # the steps that end by the next event come first
                for rep in replicas:
                    if rep.next_end <= t_step:
                        rep.run_until(t_step)
                continue
            if t == inf:
                break
            if t_fail <= t_event:
                self.zone_event(events[ei][1], t_fail, lost)
                ei += 1
                continue
            _, _, kind, r, i, epoch = heappop(heap)
            if kind == ARRIVE:
                self.route(r, t)
            elif epoch == r.epoch:               # not retried elsewhere since it was routed
                self.enter(r, i, t)
        _finish(self.result, self.done)
        return self.result
