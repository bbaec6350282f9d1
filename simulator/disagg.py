"""Disaggregated prefill/decode: a two-stage queue with the KV transfer between the stages.

A request is sent to a P/D pair in one zone (the pair never spans zones, as the plan places it):
the decode replica with the fewest outstanding requests among the zones that hold a healthy
replica of each pool, then that zone's least loaded prefill replica. Then, as vLLM 0.29.0 with
the NixlConnector runs it:

1. **Prefill** on the prefill replica (a `Replica` with chunked prefill, its own pool's step
   cost and engine arguments; the stage is a one-token request, as the P/D proxy sends the
   prefill with `max_tokens` 1). Its KV stays on the prefill replica (`Replica.kv_held`) until the
   decode has pulled it, or until the lease (`KvTransfer.kv_lease_s`, the connector's
   `kv_lease_duration`) runs out.
2. **Decode admission**: the request waits, first come first served, until its decode replica
   has free KV for the whole prompt and fewer than max_num_seqs requests running or loading; the
   blocks are then allocated there (held on both sides from now on) and the pull starts.
3. **Transfer**: `fixed + prompt tokens x seconds per token` (the plan's `KvTransfer`: its fixed
   cost and its bytes / (bandwidth x efficiency) at the mean prompt, per token).
4. **Decode** on the decode replica: the request enters with its prompt's KV resident
   (`Request.pf_remote`) and computes its last prompt token, whose step samples the first output
   token. vLLM's scheduler does the same: when every prompt block arrived from the remote
   prefill it recomputes the last token (`_update_waiting_for_remote_kv`, "num_computed_tokens
   -= 1" when all tokens are loaded, vllm/v1/core/sched/scheduler.py, stored copy): the token the
   prefill sampled is not the one the client sees. So TTFT = prefill queue + prefill + admission
   wait + transfer + the decode's first step; TPOT is the decode replica's alone.

Failures:
- a prefill replica lost (`PrefillLoss`, or its zone): the requests it still held are sent
  again from scratch (once, as a zone loss does); every request whose KV it held, in transfer
  or waiting for decode admission, fails its KV load and vLLM's `kv_load_failure_policy` decides
  (`recompute`, vLLM's default: the decode replica recomputes the whole prompt itself; `fail`:
  the request fails with an error). A lease that runs out before the decode admitted the
  request is treated as the same failed load.
- a zone lost per pool (`failure_pools`): the zone's replicas of each named pool go down; a lost
  decode replica's requests (running, waiting, loading or waiting for it) are sent again from
  scratch, their KV on the prefill side released.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any

from .cost import StepCost
from .loop import ReplicaSpec, ZoneFailure
from .replica import Replica, Speculation
from .workload import Request, WorkloadSpec, generate

KV_LOAD_FAILURE_POLICIES = ("recompute", "fail")   # vLLM's KVTransferConfig.kv_load_failure_policy
POOLS = ("prefill", "decode")
ARRIVE, XFER, LEASE = 0, 1, 2


@dataclass(frozen=True)
class PoolSpec:
    role: str                       # prefill | decode
    replicas: tuple[ReplicaSpec, ...]
    cost: StepCost
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_capacity_tokens: int


@dataclass(frozen=True)
class PrefillLoss:
    """A prefill replica lost at `start_s` (not back): `replica` by name, or None for the one
    holding the most KV transfers in flight then (the mid-transfer case)."""
    start_s: float
    replica: str | None = None


@dataclass(frozen=True)
class DisaggConfig:
    workload: WorkloadSpec
    prefill: PoolSpec
    decode: PoolSpec
    transfer_fixed_s: float
    transfer_s_per_token: float
    kv_lease_s: float
    ttft_slo_s: float
    tpot_slo_s: float
    planned_transfer_ms: float = 0.0            # the plan's, at the mean prompt (the report compares)
    kv_bytes_per_token: float = 0.0             # what one prompt token's KV weighs (NIXL's bytes histogram)
    router: str = "least-outstanding"
    failure: ZoneFailure | None = None
    failure_pools: tuple[str, ...] = POOLS      # the pools the zone (or node) loss takes down
    prefill_loss: PrefillLoss | None = None
    kv_load_failure_policy: str = "recompute"
    spec_draft_tokens: int = 0                  # speculative decoding on the decode pool (0: off)
    spec_acceptance_rate: float = 0.0
    spec_verify: Any = None


@dataclass
class DisaggResult:
    config: DisaggConfig
    requests: list[Request]
    prefill: list[Replica]
    decode: list[Replica]
    end_s: float = 0.0
    retried: int = 0
    lost: list[Request] = field(default_factory=list)       # no pair to go to, or lost twice
    failed: list[Request] = field(default_factory=list)     # failed by kv_load_failure_policy "fail"
    # each completed transfer: (when it ended, its decode replica, seconds, prompt tokens)
    transfers: list[tuple[float, str, float, int]] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)   # each failed KV load: (when, decode replica)
    recomputed_prefills: int = 0
    kv_expired: int = 0
    prefill_lost: str | None = None

    @property
    def replicas(self) -> list[Replica]:
        return self.prefill + self.decode

    @property
    def transfer_s(self) -> list[float]:
        return [x[2] for x in self.transfers]

    @property
    def failed_transfers(self) -> int:
        return len(self.failures)


def check(config: DisaggConfig) -> None:
    for pool in (config.prefill, config.decode):
        if not pool.replicas:
            raise ValueError(f"the {pool.role} pool has no replicas to simulate")
    if config.kv_load_failure_policy not in KV_LOAD_FAILURE_POLICIES:
        raise ValueError(f"kv_load_failure_policy '{config.kv_load_failure_policy}': choose one of "
                         f"{', '.join(KV_LOAD_FAILURE_POLICIES)}")
    if config.workload.max_model_len > min(config.prefill.kv_capacity_tokens, config.decode.kv_capacity_tokens):
        raise ValueError(f"max_model_len {config.workload.max_model_len} exceeds a pool's KV cache: one sequence "
                         "would not fit")
    zones_p = {r.zone for r in config.prefill.replicas}
    zones_d = {r.zone for r in config.decode.replicas}
    if not zones_p & zones_d:
        raise ValueError("no zone holds a replica of both pools: a P/D pair never spans zones")
    fail = config.failure
    if fail is not None and not any(fail.hits(r) for p in _pools(config, config.failure_pools) for r in p.replicas):
        raise ValueError(f"{fail.domain} holds no replica of the {' or '.join(config.failure_pools)} pool")
    loss = config.prefill_loss
    if loss is not None and loss.replica is not None and loss.replica not in {r.name for r in config.prefill.replicas}:
        raise ValueError(f"no prefill replica {loss.replica} (prefill replicas: "
                         f"{', '.join(r.name for r in config.prefill.replicas)})")


def _pools(config: DisaggConfig, roles) -> list[PoolSpec]:
    return [p for p in (config.prefill, config.decode) if p.role in roles]


def simulate_disaggregated(config: DisaggConfig, on_arrival=None) -> DisaggResult:
    """Run it. `on_arrival(t, prefill replicas, decode replicas)`, if given, sees the replicas at
    every arrival, brought up to that instant (the twin samples its gauges there)."""
    check(config)
    return _Run(config, on_arrival).run()


class _Run:
    def __init__(self, config: DisaggConfig, on_arrival=None):
        self.config, self.on_arrival = config, on_arrival
        w = config.workload
        self.requests = generate(w)
        self.by_id = {r.id: r for r in self.requests}
        spec = None
        self.pre = [self._replica(config.prefill, s, self._prefilled(i), None)
                    for i, s in enumerate(config.prefill.replicas)]
        self.dec = []
        for s in config.decode.replicas:
            if config.spec_draft_tokens > 0:
                spec = Speculation(config.spec_draft_tokens, config.spec_acceptance_rate, config.spec_verify,
                                   f"{w.seed}-spec-{s.name}")
            self.dec.append(self._replica(config.decode, s, self._decoded, spec))
        self.result = DisaggResult(config, self.requests, self.pre, self.dec)
        self.done: list[Request] = []
        self.ready: list[tuple[int, Request]] = []          # prefill stages done at the current step end
        self.stage: dict[int, Request] = {}                  # request id -> its current prefill stage
        self.pair: dict[int, tuple[int, int]] = {}          # request id -> (prefill, decode) indices
        self.entered: set[int] = set()                       # in its decode replica's engine (or past it)
        self.pending: list[deque[int]] = [deque() for _ in self.dec]   # awaiting decode admission
        self.loading: list[int] = [0] * len(self.dec)
        self.inflight: dict[int, float] = {}                 # request id -> transfer start
        self.heap: list[tuple[float, int, int, int, int]] = []   # (t, seq, kind, request id, epoch)
        self.seq = 0
        self.turn = 0
        for r in self.requests:
            self.push(r.arrival, ARRIVE, r)

    @staticmethod
    def _replica(pool: PoolSpec, spec: ReplicaSpec, on_done, speculation) -> Replica:
        return Replica(spec.name, spec.zone, pool.cost, pool.max_num_batched_tokens, pool.max_num_seqs,
                       pool.kv_capacity_tokens, on_done, 0, speculation)

    def push(self, t: float, kind: int, r: Request) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, r.id, r.epoch))

    # -- callbacks from the replicas (inside their steps: record only) ---------------------------
    def _prefilled(self, i: int):
        def done(stage: Request) -> None:
            self.pre[i].kv_held += stage.prompt       # its KV stays until the decode pulls it
            self.ready.append((i, stage))
        return done

    def _decoded(self, r: Request) -> None:
        self.done.append(r)

    # -- routing --------------------------------------------------------------------------------
    def _least(self, reps: list[int], pool: list[Replica], t: float) -> int:
        """The least loaded of `reps` (indices into `pool`), ties in turn (the router's policy)."""
        self.turn += 1
        best, best_load = -1, None
        for j in range(len(reps)):
            i = reps[(self.turn + j) % len(reps)]
            rep = pool[i]
            if self.config.router == "least-pending-tokens":
                load = rep.pending_tokens(t)
            elif self.config.router == "round-robin":
                return i
            else:
                load = len(rep.waiting) + len(rep.running) + rep.admitting
            if best_load is None or load < best_load:
                best, best_load = i, load
        return best

    def route(self, r: Request, t: float) -> None:
        """A P/D pair in one zone for r, and its prefill stage onto the prefill replica."""
        r.attempts += 1
        zones = {p.zone for p in self.pre if p.up}
        decodes = [i for i, d in enumerate(self.dec) if d.up and d.zone in zones]
        if not decodes:
            self._lose(r)
            return
        d = self._least(decodes, self.dec, t)
        p = self._least([i for i, q in enumerate(self.pre) if q.up and q.zone == self.dec[d].zone], self.pre, t)
        self.dec[d].admitting += 1
        self.pair[r.id] = (p, d)
        self.entered.discard(r.id)
        stage = Request(r.id, r.arrival, r.prompt, 1)
        self.stage[r.id] = stage
        self.pre[p].enqueue(stage, t)

    def _lose(self, r: Request) -> None:
        r.lost = True
        self.result.lost.append(r)

    def _unassign(self, r: Request) -> None:
        """r leaves its decode replica's count of requests routed to it (not yet in its engine)."""
        if r.id in self.pair and r.id not in self.entered:
            d = self.dec[self.pair[r.id][1]]
            if d.up and d.admitting > 0:
                d.admitting -= 1
        self.pair.pop(r.id, None)
        self.stage.pop(r.id, None)

    def reroute(self, r: Request, t: float) -> None:
        """From scratch on a new pair, once; lost the second time (the gateway answers 503)."""
        self._unassign(r)
        self.inflight.pop(r.id, None)
        r.restart()
        if r.attempts >= 2:
            self._lose(r)
            return
        self.result.retried += 1
        self.route(r, t)

    # -- the stages -----------------------------------------------------------------------------
    def after_steps(self, t: float) -> None:
        """Prefills finished at t: each waits for its decode replica's admission."""
        ready, self.ready = self.ready, []
        for i, stage in ready:
            r = self.by_id[stage.id]
            if self.stage.get(r.id) is not stage:            # sent elsewhere since
                self.pre[i].release(stage.prompt, t)
                continue
            r.t_sched = stage.t_sched
            _, d = self.pair[r.id]
            if not self.dec[d].up:                            # its decode replica was lost meanwhile
                self.pre[i].release(stage.prompt, t)
                self.reroute(r, t)
                continue
            self.pending[d].append(r.id)
            self.push(t + self.config.kv_lease_s, LEASE, r)
        for d in range(len(self.dec)):
            if self.pending[d]:
                self.admit(d, t)

    def admit(self, d: int, t: float) -> None:
        """Decode admission, first come first served: blocks for the whole prompt and a sequence slot."""
        rep, queue, cfg = self.dec[d], self.pending[d], self.config
        while queue:
            r = self.by_id[queue[0]]
            if rep.kv_free() < r.prompt or len(rep.running) + self.loading[d] >= rep.max_seqs:
                return
            queue.popleft()
            rep.hold(r.prompt, t)
            self.loading[d] += 1
            self.inflight[r.id] = t
            self.push(t + cfg.transfer_fixed_s + cfg.transfer_s_per_token * r.prompt, XFER, r)

    def transferred(self, r: Request, t: float) -> None:
        p, d = self.pair[r.id]
        start = self.inflight.pop(r.id)
        self.loading[d] -= 1
        self.pre[p].release(r.prompt, t)
        self.dec[d].release(r.prompt, t)
        self.result.transfers.append((t, self.dec[d].name, t - start, r.prompt))
        self._enter(r, d, r.prompt - 1, t)

    def _enter(self, r: Request, d: int, remote: int, t: float) -> None:
        """Into the decode replica's engine: `remote` prompt tokens' KV already there."""
        rep = self.dec[d]
        if rep.admitting > 0:
            rep.admitting -= 1
        self.entered.add(r.id)
        self.stage.pop(r.id, None)
        r.pf_total, r.pf_remote = r.prompt, remote
        rep.enqueue(r, t)

    def load_failed(self, r: Request, d: int, t: float) -> None:
        """Its KV could not be pulled: vLLM's kv_load_failure_policy."""
        res = self.result
        res.failures.append((t, self.dec[d].name))
        if self.config.kv_load_failure_policy == "recompute":
            res.recomputed_prefills += 1
            self._enter(r, d, 0, t)
            return
        self._unassign(r)
        r.lost = True
        res.failed.append(r)

    def lease_expired(self, r: Request, t: float) -> None:
        p, d = self.pair[r.id]
        if r.id not in self.pending[d]:
            return
        self.pending[d].remove(r.id)
        self.pre[p].release(r.prompt, t)
        self.result.kv_expired += 1
        self.load_failed(r, d, t)

    # -- failures -------------------------------------------------------------------------------
    def lose_prefill(self, i: int, t: float) -> None:
        rep = self.pre[i]
        if not rep.up:
            return
        stages = rep.fail(t)
        for stage in sorted(stages, key=lambda q: q.arrival):
            r = self.by_id[stage.id]
            if self.stage.get(r.id) is stage:
                self.reroute(r, t)
        for rid, (p, d) in list(self.pair.items()):
            if p != i or rid in self.entered:
                continue
            r = self.by_id[rid]
            if rid in self.inflight:                          # mid-transfer: the pull fails
                del self.inflight[rid]
                self.loading[d] -= 1
                self.dec[d].release(r.prompt, t)
                self.load_failed(r, d, t)
            elif rid in self.pending[d]:                      # its KV is gone before the pull
                self.pending[d].remove(rid)
                self.load_failed(r, d, t)
        for d in range(len(self.dec)):
            if self.pending[d]:
                self.admit(d, t)

    def lose_decode(self, d: int, t: float) -> None:
        rep = self.dec[d]
        if not rep.up:
            return
        held = rep.fail(t)
        rep.admitting = 0
        self.loading[d] = 0
        again: list[Request] = list(held)
        for rid, (p, dd) in list(self.pair.items()):
            if dd != d or rid in self.entered:
                continue
            r = self.by_id[rid]
            if rid in self.inflight or rid in self.pending[d]:
                self.pre[p].release(r.prompt, t)
                again.append(r)
        self.pending[d].clear()
        for r in sorted(again, key=lambda q: q.arrival):
            self.entered.discard(r.id)
            self.reroute(r, t)

    def failure_events(self) -> list[tuple[float, str, list[int], list[int]]]:
        """(t, fail | recover, prefill indices, decode indices), in time order."""
        cfg, events = self.config, []
        fail = cfg.failure
        if fail is not None:
            pre = [i for i, s in enumerate(cfg.prefill.replicas) if "prefill" in cfg.failure_pools and fail.hits(s)]
            dec = [i for i, s in enumerate(cfg.decode.replicas) if "decode" in cfg.failure_pools and fail.hits(s)]
            events.append((fail.start_s, "fail", pre, dec))
            if fail.end_s is not None:
                events.append((fail.end_s, "recover", pre, dec))
        if cfg.prefill_loss is not None:
            events.append((cfg.prefill_loss.start_s, "kill", [], []))
        return sorted(events, key=lambda e: e[0])

    def failure(self, t: float, kind: str, pre: list[int], dec: list[int]) -> None:
        if kind == "recover":
            for i in pre:
                self.pre[i].recover(t)
            for d in dec:
                self.dec[d].recover(t)
            return
        if kind == "kill":
            pre = [self._victim()]
            self.result.prefill_lost = self.pre[pre[0]].name
        for d in dec:
            self.lose_decode(d, t)
        for i in pre:
            self.lose_prefill(i, t)

    def _victim(self) -> int:
        """The named prefill replica, or the one with the most transfers in flight (then held KV)."""
        loss = self.config.prefill_loss
        if loss is not None and loss.replica is not None:
            return next(i for i, r in enumerate(self.pre) if r.name == loss.replica)
        counts = [0] * len(self.pre)
        for rid in self.inflight:
            counts[self.pair[rid][0]] += 1
        return max(range(len(self.pre)), key=lambda i: (counts[i], self.pre[i].kv_held, -i))

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> DisaggResult:
        events, ei = self.failure_events(), 0
        heap, reps = self.heap, self.pre + self.dec
        inf = math.inf
        while True:
            t_event = heap[0][0] if heap else inf
            t_fail = events[ei][0] if ei < len(events) else inf
            t = t_event if t_event < t_fail else t_fail
            t_step = min(rep.next_end for rep in reps)
            if t_step <= t and t_step < inf:
                for rep in reps:
                    if rep.next_end <= t_step:
                        rep.run_until(t_step)
                self.after_steps(t_step)
                continue
            if t == inf:
                break
            if t_fail <= t_event:
                _, kind, pre, dec = events[ei]
                ei += 1
                self.failure(t, kind, pre, dec)
                continue
            _, _, kind, rid, epoch = heappop(heap)
            r = self.by_id[rid]
            if kind == ARRIVE:
                if self.on_arrival is not None:
                    self.on_arrival(t, self.pre, self.dec)
                self.route(r, t)
            elif epoch != r.epoch or r.lost:
                continue
            elif kind == XFER and rid in self.inflight:
                self.transferred(r, t)
            elif kind == LEASE:
                self.lease_expired(r, t)
            self._admit_all(t)
        return self._finish()

    def _admit_all(self, t: float) -> None:
        for d in range(len(self.dec)):
            if self.pending[d] and self.dec[d].up:
                self.admit(d, t)

    def _finish(self) -> DisaggResult:
        res, w = self.result, self.config.workload
        res.end_s = max([w.duration_s] + [r.t_done for r in self.done if r.t_done is not None])
        for rep in res.replicas:
            rep.finish_accounting(res.end_s)
        return res
