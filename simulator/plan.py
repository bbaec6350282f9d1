"""A simulation of a sizing plan: the same replica model, engine arguments and placement."""
from __future__ import annotations

import math
import re

from deployment.serving import replica_placements
from sizing.model import ReplicaModel
from sizing.planner import Plan

from .cost import kv_capacity_tokens, step_cost, verify_cost
from .disagg import POOLS, DisaggConfig, PoolSpec, PrefillLoss
from .loop import ReplicaSpec, SimConfig, ZoneFailure, simulate
from .report import summarize
from .workload import WorkloadSpec

FAIL_ZONE = re.compile(r"^(?P<zone>[a-z0-9-]+)@(?P<start>\d+(\.\d+)?)(:(?P<end>\d+(\.\d+)?))?$", re.ASCII)
FAIL_NODE = re.compile(r"^(?P<zone>[a-z0-9-]+/node-\d+)@(?P<start>\d+(\.\d+)?)(:(?P<end>\d+(\.\d+)?))?$", re.ASCII)


def replica_model(plan: Plan) -> ReplicaModel:
    """The plan's real replica model (the one its figures come from)."""
    return plan.replica_model


def replica_specs(plan: Plan) -> tuple[ReplicaSpec, ...]:
    """One per planned replica, as the deployment places it (deployment.serving.replica_placements):
    `<pool>/node-<i>/<j>`, or `<pool>/group-<g>` holding all its nodes for a replica that spans nodes."""
    return tuple(ReplicaSpec(p.name, p.zone, p.nodes) for p in replica_placements(plan))


def parse_fail_zone(text: str, duration_s: float) -> ZoneFailure:
    """`ZONE@T[:T2]`: the zone is lost at T seconds (and back at T2)."""
    m = FAIL_ZONE.match(text.strip())
    if not m:
        raise ValueError(f"'{text}': expected ZONE@T or ZONE@T:T2 in seconds, e.g. us-east-1b@600:1200")
    start, end = _failure_window(text, m["start"], m["end"], duration_s, "zone")
    return ZoneFailure(m["zone"], start, end)


def _failure_window(text: str, start_text: str, end_text: str | None, duration_s: float,
                    what: str) -> tuple[float, float | None]:
    start = float(start_text)
    end = float(end_text) if end_text is not None else None
    if start >= duration_s:
        raise ValueError(f"'{text}': the failure starts at {start:g} s, after the {duration_s:g} s run")
    if end is not None and end <= start:
        raise ValueError(f"'{text}': the {what} comes back at {end:g} s, not after it fails at {start:g} s")
    return start, end


def parse_fail_node(text: str, duration_s: float, plan: Plan) -> ZoneFailure:
    """`POOL/node-I@T[:T2]`: that node is lost at T seconds (and back at T2); with it, every
    replica it serves (a multi-node group entirely)."""
    m = FAIL_NODE.match(text.strip())
    if not m:
        raise ValueError(f"'{text}': expected POOL/node-I@T or POOL/node-I@T:T2 in seconds, "
                         "e.g. us-east-1a-p5/node-1@600")
    names = {f"{n.pool}/node-{n.node}": n for n in plan.nodes}
    node = m["zone"]
    if node not in names:
        raise ValueError(f"'{text}': no node {node} in the plan (nodes: {', '.join(names)})")
    start, end = _failure_window(text, m["start"], m["end"], duration_s, "node")
    return ZoneFailure(names[node].zone, start, end, node=node)


def config_from_plan(plan: Plan, duration_s: float, qps: float | None = None, *, router: str = "least-outstanding",
                     arrivals: str = "poisson", burstiness_cv: float = 2.0, lengths: str = "fixed",
                     length_cv: float = 0.5, seed: int = 0, failure: ZoneFailure | None = None,
                     max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                     replicas: int | None = None, concurrency: int | None = None,
                     burst: int | None = None) -> SimConfig:
    """The plan's replicas, engine arguments and workload; `replicas` keeps only the first N.

    Open loop at `qps` (default: the workload's rate); `concurrency` N: a closed loop of N clients
    (default, for a closed-loop workload with no `qps`: its own clients); `burst` N: N prompts at
    t = 0. The replicas' API-server cost is the profile's `request_overhead_ms`."""
    w = plan.request.workload
    given = [name for name, value in (("qps", qps), ("concurrency", concurrency), ("burst", burst))
             if value is not None]
    if len(given) > 1:
        raise ValueError(f"give one of qps, concurrency or burst, not {' and '.join(given)}")
    clients = concurrency if concurrency is not None else burst
    if clients is None and qps is None and w.qps is None:
        clients = w.concurrency         # a closed-loop workload: its clients
    if clients is not None:
        arrivals = "burst" if burst is not None else "closed-loop"
        rate = 0.0
    else:
        rate = qps if qps is not None else w.qps
    model = replica_model(plan)
    args = plan.engine_args
    specs = replica_specs(plan)
    if replicas is not None:
        specs = specs[:replicas]
    return SimConfig(
        workload=WorkloadSpec(qps=rate, duration_s=duration_s, input_tokens=w.input_tokens,
                              output_tokens=w.output_tokens, max_model_len=args.max_model_len,
                              arrivals=arrivals, burstiness_cv=burstiness_cv,
                              # the plan's own lengths when it has a distribution (one everywhere)
                              lengths="distribution" if w.lengths is not None and lengths == "fixed" else lengths,
                              length_cv=length_cv, seed=seed, distribution=w.lengths, clients=clients or 0),
        replicas=specs, cost=step_cost(model),
        max_num_batched_tokens=max_num_batched_tokens or args.max_num_batched_tokens,
        max_num_seqs=max_num_seqs or args.max_num_seqs,
        kv_capacity_tokens=kv_capacity_tokens(model),
        ttft_slo_s=w.ttft_slo_s, tpot_slo_s=w.tpot_slo_s, router=router, failure=failure,
        request_overhead_s=model.profile.request_overhead_ms / 1e3,
        **speculation_args(plan, model),
    )


def speculation_args(plan: Plan, model: ReplicaModel) -> dict:
    """The simulator's speculative decoding from the plan's (none when it is off or absent)."""
    sp = plan.speculative
    if sp is None or not sp.enabled or sp.draft_tokens <= 0:
        return {}
    return {"spec_draft_tokens": sp.draft_tokens, "spec_acceptance_rate": sp.acceptance_rate,
            "spec_verify": verify_cost(model, sp.draft_tokens)}


def is_disaggregated(plan: Plan) -> bool:
    return plan.serving_mode == "disaggregated" and {"prefill", "decode"} <= set(plan.pools_by_role)


def pool_specs(pool) -> tuple[ReplicaSpec, ...]:
    """A pool's replicas by zone, named `<role>-<zone>-<j>` (the pools' nodes are the deployment's)."""
    return tuple(ReplicaSpec(f"{pool.role}-{zone}-{j}", zone) for zone, count in sorted(pool.replicas_by_zone.items())
                 for j in range(count))


def _pool(plan: Plan, pool) -> PoolSpec:
    model = pool.replica_model if pool.replica_model is not None else plan.replica_model
    args = plan.engine_args
    return PoolSpec(pool.role, pool_specs(pool), step_cost(model), pool.max_num_batched_tokens or args.max_num_batched_tokens,
                    pool.max_num_seqs or args.max_num_seqs, kv_capacity_tokens(model))


def transfer_terms(plan: Plan) -> tuple[float, float]:
    """(fixed seconds, seconds per prompt token) of the plan's KV transfer: its fixed cost, and
    its bytes / (bandwidth x efficiency) at the mean prompt spread over that prompt's tokens, so
    the mean prompt's transfer is exactly the plan's `transfer_ms`."""
    kv = plan.kv_transfer
    if kv is None:
        raise ValueError("the disaggregated plan has no KV transfer (plan.kv_transfer)")
    pre = plan.pools_by_role["prefill"]
    model = pre.replica_model if pre.replica_model is not None else plan.replica_model
    per_token_bytes = model.memory.kv_bytes_per_token
    tokens = kv.bytes_per_request / per_token_bytes if per_token_bytes else plan.request.workload.input_tokens
    variable_s = max(0.0, kv.transfer_ms - kv.fixed_ms) / 1e3
    return kv.fixed_ms / 1e3, variable_s / tokens if tokens > 0 else 0.0


def _kv_bytes_per_token(plan: Plan) -> float:
    pre = plan.pools_by_role["prefill"]
    model = pre.replica_model if pre.replica_model is not None else plan.replica_model
    return model.memory.kv_bytes_per_token


def disagg_config_from_plan(plan: Plan, duration_s: float, qps: float | None = None, *,
                            router: str = "least-outstanding", arrivals: str = "poisson", burstiness_cv: float = 2.0,
                            lengths: str = "fixed", length_cv: float = 0.5, seed: int = 0,
                            failure: ZoneFailure | None = None, failure_pools: tuple[str, ...] = POOLS,
                            prefill_loss: PrefillLoss | None = None,
                            kv_load_failure_policy: str = "recompute") -> DisaggConfig:
    """The disaggregated plan's two pools, its KV transfer and workload (an open loop at `qps`,
    default the workload's rate); speculative decoding, when the plan runs it, on the decode pool."""
    w = plan.request.workload
    pools = plan.pools_by_role
    pre, dec = _pool(plan, pools["prefill"]), _pool(plan, pools["decode"])
    fixed_s, per_token_s = transfer_terms(plan)
    dec_model = pools["decode"].replica_model if pools["decode"].replica_model is not None else plan.replica_model
    rate = qps if qps is not None else w.qps
    if rate is None:
        raise ValueError("--qps: a disaggregated plan is simulated as an open loop; give --qps")
    return DisaggConfig(
        workload=WorkloadSpec(qps=rate, duration_s=duration_s, input_tokens=w.input_tokens,
                              output_tokens=w.output_tokens, max_model_len=plan.engine_args.max_model_len,
                              arrivals=arrivals, burstiness_cv=burstiness_cv,
                              lengths="distribution" if w.lengths is not None and lengths == "fixed" else lengths,
                              length_cv=length_cv, seed=seed, distribution=w.lengths),
        prefill=pre, decode=dec, transfer_fixed_s=fixed_s, transfer_s_per_token=per_token_s,
        kv_lease_s=plan.kv_transfer.kv_lease_s, ttft_slo_s=w.ttft_slo_s, tpot_slo_s=w.tpot_slo_s,
        planned_transfer_ms=plan.kv_transfer.transfer_ms, kv_bytes_per_token=float(_kv_bytes_per_token(plan)),
        router=router, failure=failure,
        failure_pools=failure_pools, prefill_loss=prefill_loss, kv_load_failure_policy=kv_load_failure_policy,
        **speculation_args(plan, dec_model))


def meets_slos(plan: Plan, qps: float, duration_s: float, seed: int = 0) -> tuple[bool, dict]:
    """One replica at `qps` (Poisson): TTFT and TPOT within the SLOs at the plan's statistic."""
    stat = plan.request.workload.slo_statistic
    cfg = config_from_plan(plan, duration_s, qps, seed=seed, replicas=1)
    stats = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
    ttft, tpot = stats["ttft_ms"][stat], stats["tpot_ms"][stat]
    ok = (ttft is not None and ttft <= 1e3 * cfg.ttft_slo_s and tpot is not None and tpot <= 1e3 * cfg.tpot_slo_s)
    return ok, stats


def simulated_capacity_qps(plan: Plan, duration_s: float = 300.0, seed: int = 0, rel_tol: float = 0.02) -> float:
    """The most QPS one replica carries with TTFT and TPOT within the SLOs at the plan's statistic
    (bisection).

    The same definition as the analytic capacity (the workload's statistic, Poisson arrivals); it
    brackets the analytic figure first, so a handful of short runs suffice.
    """
    guess = plan.capacity_per_replica.qps
    if not math.isfinite(guess) or guess <= 0:
        raise ValueError("the plan has no finite per-replica capacity to start from")
    lo, hi = 0.8 * guess, 1.25 * guess
    while not meets_slos(plan, lo, duration_s, seed)[0]:
        lo, hi = lo / 1.5, lo
        if lo < 1e-3 * guess:
            return 0.0
    while meets_slos(plan, hi, duration_s, seed)[0]:
        lo, hi = hi, hi * 1.5
    while hi - lo > rel_tol * lo:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets_slos(plan, mid, duration_s, seed)[0] else (lo, mid)
    return lo
