"""The plan's replicas stepping in real time: the simulator's own engine, driven by the wall clock.

Each replica is the simulator's `Replica` (continuous batching; chunked prefill within
`max_num_batched_tokens`; `max_num_seqs`; the plan's KV cache, admission and preemption) behind
the simulator's `Router`, with the step cost `simulator.config_from_plan` gives it (the plan's
`sizing.step.StepModel`, times `--slowdown` through `twin.timeline.slowed`). Nothing here
models the engine again: the Replica is event-driven over virtual time, and here virtual time is
the event loop's clock (seconds since `start`).

Each replica has one timer on the event loop, set for its next step boundary: the end of a
prefill step, or the next step of a pure-decode run (the Replica runs those as one event of
`s_count` steps of `s_dur`). When it fires, the replica is brought up to now (`run_until`, which
applies the steps that have ended and schedules the next), every running sequence's tokens so far
are read off the engine's step counter (a decoding sequence has `gen + k - k0`), and the jobs
whose count grew are woken to send them. An arrival does what the simulator's loop does at one:
bring the replicas up to now, ask the router, `enqueue` (which cuts a decode run at the step in
progress), and re-arm that replica's timer.

A lost zone or node (`--fail-zone`, `--fail-node`, as `simulate` reads them) takes its replicas
out at its time from the start (`Replica.fail`) and back at the end of its window. As in the
simulator, each request they held goes through the router once more, from scratch, unless it was
already retried; and since a stream's tokens cannot be taken back, a stream that has sent any
fails instead (503 in the stream), as would a client's connection to a pod that is gone.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from simulator.loop import SimConfig
from simulator.replica import Replica
from simulator.router import Router
from simulator.workload import Request
from twin.timeline import slowed

from .metrics import EngineMetrics
from .openai import ApiError

EPS_STEPS = 1e-9        # a timer fires at a step's end: count that step done despite rounding


class Job:
    """One request through the fleet: how many tokens it has so far, and how it ended."""
    __slots__ = ("request", "stream", "tokens", "done", "error", "changed")

    def __init__(self, request: Request, stream: bool):
        self.request, self.stream = request, stream
        self.tokens = 0
        self.done = False
        self.error: ApiError | None = None
        self.changed = asyncio.Event()


class Fleet:
    def __init__(self, config: SimConfig, slowdown: float = 1.0):
        if config.workload.max_model_len > config.kv_capacity_tokens:
            raise ValueError(f"max_model_len {config.workload.max_model_len} exceeds the KV cache "
                             f"({config.kv_capacity_tokens} tokens): one sequence would not fit")
        if slowdown != 1.0:
            config = replace(config, cost=slowed(config.cost, slowdown))
        self.config = config
        self.replicas = [Replica(s.name, s.zone, config.cost, config.max_num_batched_tokens, config.max_num_seqs,
                                 config.kv_capacity_tokens, self._finished) for s in config.replicas]
        self.router = Router(config.router, self.replicas)
        self._index = {rep.name: i for i, rep in enumerate(self.replicas)}
        fail = config.failure
        self._lost = [i for i, s in enumerate(config.replicas) if fail is not None and fail.hits(s)]
        self._timers: list[asyncio.TimerHandle | None] = [None] * len(self.replicas)
        self._events: list[asyncio.TimerHandle] = []
        self.metrics: list[EngineMetrics | None] = [EngineMetrics(time.time()) for _ in self.replicas]
        self._preempt_base = [0] * len(self.replicas)
        self.jobs: dict[int, Job] = {}
        self._ids = 0
        self.retried = self.failed = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.t0 = 0.0

    # -- the clock ---------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Virtual time 0 is now; the failure's events are set on the loop."""
        self.loop, self.t0 = loop, loop.time()
        fail = self.config.failure
        if fail is not None:
            self._events.append(loop.call_at(self.t0 + fail.start_s, self._down))
            if fail.end_s is not None:
                self._events.append(loop.call_at(self.t0 + fail.end_s, self._up))

    def now(self) -> float:
        return self.loop.time() - self.t0

    def _steps_done(self, rep: Replica, now: float) -> int:
        """Steps completed by `now`, those of the pending pure-decode run included but its last,
        which `run_until` applies (with the sequences it finishes)."""
        if rep.busy and rep.s_chunks is None and now > rep.s_start:
            return rep.k + min(rep.s_count - 1, int((now - rep.s_start) / rep.s_dur + EPS_STEPS))
        return rep.k

    # -- requests ----------------------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, stream: bool) -> Job:
        """A request arrives now; its job is woken as its tokens come (or it fails at once: 503)."""
        self._ids += 1
        t = self.now()
        job = Job(Request(self._ids, t, prompt_tokens, max_tokens), stream)
        self.jobs[job.request.id] = job
        self._advance(t)
        self._route(job, t)
        return job

    def _route(self, job: Job, t: float) -> None:
        r = job.request
        r.attempts += 1
        target = self.router.pick(t)
        if target is None:
            self._fail(job, ApiError(503, "no healthy replica to serve the request (every one is lost)"))
            return
        target.enqueue(r, t)
        self._schedule(self._index[target.name], t)

    def _advance(self, t: float) -> None:
        """Every replica brought up to t, as the simulator's loop does before each event."""
        for i, rep in enumerate(self.replicas):
            if rep.next_end <= t:
                rep.run_until(t)
                self._emit(i, t)
                self._schedule(i, t)

    def _fail(self, job: Job, error: ApiError) -> None:
        job.error = error
        self.failed += 1
        self.jobs.pop(job.request.id, None)
        job.changed.set()

    # -- stepping --------------------------------------------------------------------------------
    def _tick(self, i: int, when: float) -> None:
        self._timers[i] = None
        t = max(self.now(), when)       # the loop may run a timer a clock tick early: it is the boundary's
        rep = self.replicas[i]
        rep.run_until(t)
        self._emit(i, t)
        self._schedule(i, t)

    def _schedule(self, i: int, t: float) -> None:
        """The replica's timer at its next step boundary (none while it is idle)."""
        rep = self.replicas[i]
        timer = self._timers[i]
        if timer is not None:
            timer.cancel()
            self._timers[i] = None
        if not rep.busy or not rep.up:
            return
        when = rep.next_end
        if rep.s_chunks is None and rep.s_count > 1:
            done = int((t - rep.s_start) / rep.s_dur + EPS_STEPS) if t > rep.s_start else 0
            when = min(when, rep.s_start + (done + 1) * rep.s_dur)
        self._timers[i] = self.loop.call_at(self.t0 + when, self._tick, i, when)

    def _emit(self, i: int, t: float) -> None:
        """Each running sequence's tokens so far, read off the engine; the jobs that grew woken."""
        rep, jobs, metrics = self.replicas[i], self.jobs, self.metrics[i]
        k = self._steps_done(rep, t)
        for r in rep.running.values():
            produced = r.gen + (k - r.k0) if r.decoding else r.gen
            job = jobs.get(r.id)
            if job is not None and produced > job.tokens:
                if job.tokens == 0 and metrics is not None:
                    metrics.first_token(r)
                if metrics is not None:
                    metrics.generation_tokens += produced - job.tokens
                job.tokens = produced
                job.changed.set()

    def _finished(self, r: Request) -> None:
        """The Replica's on_done: the request's last token is out."""
        job = self.jobs.pop(r.id, None)
        metrics = self.metrics[self._index[r.replica]]
        if job is None:
            return
        if metrics is not None:
            if job.tokens == 0:
                metrics.first_token(r)
            metrics.generation_tokens += r.out - job.tokens
            metrics.finished(r)
        job.tokens, job.done = r.out, True
        job.changed.set()

    # -- failure -------------------------------------------------------------------------------------
    def _down(self) -> None:
        """The failed zone's (or node's) replicas are lost now; what they held is retried or fails."""
        t = self.now()
        self._advance(t)
        held: list[tuple[Request, str]] = []
        for i in self._lost:
            rep = self.replicas[i]
            if rep.up:
                self._emit(i, t)                # every token made so far is out before the loss
                held += [(r, rep.name) for r in rep.fail(t)]
                self._schedule(i, t)            # down: no timer
                self.metrics[i] = None
        self.router.refresh()
        domain = self.config.failure.domain
        for r, name in sorted(held, key=lambda pair: pair[0].arrival):
            job = self.jobs.get(r.id)
            if job is None:
                continue
            if (job.stream and job.tokens) or r.attempts >= 2:
                self._fail(job, ApiError(503, f"replica {name} was lost with {domain} while serving the request"))
                continue
            self.retried += 1
            job.tokens = 0                      # nothing was sent: it starts again elsewhere
            self._route(job, t)

    def _up(self) -> None:
        t = self.now()
        for i in self._lost:
            self.replicas[i].recover(t)
            self.metrics[i] = EngineMetrics(time.time())        # a new pod: its counters from zero
            self._preempt_base[i] = self.replicas[i].preemptions
        self.router.refresh()

    # -- reading and stopping ------------------------------------------------------------------------
    def engine_values(self) -> list[tuple[str, dict, float]]:
        """Every replica that is up, as (engine label, /metrics values, created time)."""
        t = self.now()
        out = []
        for i, (rep, metrics) in enumerate(zip(self.replicas, self.metrics)):
            if metrics is None or not rep.up:
                continue
            kv = rep.kv_pf + rep.kv_dec + rep.n * self._steps_done(rep, t)
            out.append((str(i), metrics.values(len(rep.running), len(rep.waiting), kv / rep.kv_cap,
                                               rep.preemptions - self._preempt_base[i]), metrics.created_s))
        return out

    def close(self, error: ApiError) -> int:
        """Stop every timer and fail every request still in flight with `error`; how many there were."""
        for handle in self._events + [h for h in self._timers if h is not None]:
            handle.cancel()
        self._events.clear()
        self._timers = [None] * len(self.replicas)
        pending = list(self.jobs.values())
        for job in pending:
            self._fail(job, error)
        return len(pending)
