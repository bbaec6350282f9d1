"""Disaggregated and speculative plans built from an aggregated one, for the deployment, component and
policy tests (plain functions; `tests/conftest.py` wraps them as fixtures).

The contract is sizing/roles.py; the planner that fills it (sizing/disagg.py, sizing/speculative.py)
is not needed here: these plans have the shape the planner promises, with figures chosen by the
test (each pool sized to carry the target after losing its worst zone, by a stated margin), so
that what is tested is the deployment of a plan, never the sizing.
"""
from __future__ import annotations

import dataclasses

from sizing.roles import KvTransfer, ServingPool, SpeculativePlan

SURVIVAL_MARGIN = 1.25        # each pool carries 25% more than the target after its worst zone's loss


def pool(plan, role: str, by_zone: dict[str, int], margin: float = SURVIVAL_MARGIN) -> ServingPool:
    from deployment.serving import target_qps
    target = target_qps(plan)
    replicas = sum(by_zone.values())
    worst = max(by_zone, key=lambda z: by_zone[z])
    left = replicas - by_zone[worst]
    per_replica = margin * target / max(1, left)
    return ServingPool(
        role=role, replicas=replicas, tp=plan.tp, replicas_by_zone=dict(by_zone),
        capacity_per_replica_qps=per_replica, capacity_qps=per_replica * replicas,
        capacity_after_zone_loss_qps=per_replica * left, lost_domain=worst, survives_failure=margin >= 1,
        binding_constraint="test plan", replica_model=plan.replica_model, layout=plan.layout,
        max_num_batched_tokens=plan.engine_args.max_num_batched_tokens if role == "prefill" else None,
        max_num_seqs=plan.engine_args.max_num_seqs)


def kv_transfer(link: str) -> KvTransfer:
    return KvTransfer(link=link, bytes_per_request=3.3e8, bandwidth_gbps=3200.0, efficiency=0.5, fixed_ms=2.0,
                      transfer_ms=3.6, transfer_ms_at_statistic=5.0, kv_lease_s=30.0)


def disaggregated(plan, link: str = "nvlink", prefill: dict[str, int] | None = None,
                  decode: dict[str, int] | None = None, margin: float = SURVIVAL_MARGIN):
    """`plan` as a disaggregated plan: by default one prefill and one decode replica per zone."""
    zones = list(plan.replicas_by_zone)
    prefill = prefill if prefill is not None else {z: 1 for z in zones}
    decode = decode if decode is not None else {z: 1 for z in zones}
    return dataclasses.replace(plan, serving_mode="disaggregated", kv_transfer=kv_transfer(link),
                               serving_pools=(pool(plan, "prefill", prefill, margin), pool(plan, "decode", decode, margin)))


def speculative(plan, method: str = "eagle3", k: int = 3, acceptance: float = 0.7, enabled: bool = True,
                draft_model: str | None = None):
    """`plan` with speculation on its decode steps."""
    mean_length = sum(acceptance ** i for i in range(k + 1))
    return dataclasses.replace(plan, speculative=SpeculativePlan(
        method=method, draft_tokens=k if enabled else 0, acceptance_rate=acceptance,
        mean_acceptance_length=mean_length, stops_paying_batch=64.0, expected_batch=8.0, enabled=enabled,
        tpot_gain=1.5 if enabled else 1.0, draft_memory_gb=2.0, reason="test plan", draft_model=draft_model))
