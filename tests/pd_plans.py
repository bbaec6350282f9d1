"""Disaggregated and speculative plans for the simulator, twin and alert tests, built on an
aggregated plan as the contract (sizing.roles) describes them: two pools, prefill and decode,
each with its replica model, replicas by zone and engine arguments, a KV transfer, and a
speculative plan. Both pools reuse the aggregated plan's replica model: these tests check the
simulator's queueing, not the sizing's figures."""
from __future__ import annotations

from dataclasses import replace

from sizing.roles import KvTransfer, ServingPool, SpeculativePlan


def pool(plan, role: str, per_zone: int, **changes) -> ServingPool:
    zones = sorted(plan.replicas_by_zone)
    base = ServingPool(role=role, replicas=per_zone * len(zones), tp=plan.tp,
                       replicas_by_zone={z: per_zone for z in zones},
                       capacity_per_replica_qps=plan.capacity_per_replica.qps,
                       capacity_qps=per_zone * len(zones) * plan.capacity_per_replica.qps,
                       capacity_after_zone_loss_qps=per_zone * (len(zones) - 1) * plan.capacity_per_replica.qps,
                       lost_domain=zones[0], survives_failure=True, binding_constraint="test pool",
                       replica_model=plan.replica_model)
    return replace(base, **changes)


def kv_transfer(plan, fixed_ms: float = 2.0, bandwidth_gbps: float = 3200.0, efficiency: float = 0.5,
                kv_lease_s: float = 60.0) -> KvTransfer:
    """The mean prompt's KV over the link: fixed + bytes / (bandwidth x efficiency)."""
    nbytes = plan.request.workload.input_tokens * plan.memory.kv_bytes_per_token
    ms = fixed_ms + 1e3 * nbytes / (bandwidth_gbps * 1e9 / 8 * efficiency)
    return KvTransfer(link="efa", bytes_per_request=nbytes, bandwidth_gbps=bandwidth_gbps, efficiency=efficiency,
                      fixed_ms=fixed_ms, transfer_ms=ms, transfer_ms_at_statistic=ms, kv_lease_s=kv_lease_s)


def disaggregated(plan, prefill_per_zone: int = 1, decode_per_zone: int = 1, transfer: KvTransfer | None = None,
                  **decode_changes):
    return replace(plan, serving_mode="disaggregated",
                   serving_pools=(pool(plan, "prefill", prefill_per_zone),
                                  pool(plan, "decode", decode_per_zone, **decode_changes)),
                   kv_transfer=transfer or kv_transfer(plan))


def speculative(k: int = 3, a: float = 0.7, enabled: bool = True) -> SpeculativePlan:
    e = (1 - a ** (k + 1)) / (1 - a)
    return SpeculativePlan(method="ngram", draft_tokens=k if enabled else 0, acceptance_rate=a,
                           mean_acceptance_length=e if enabled else 1.0, stops_paying_batch=None, expected_batch=4.0,
                           enabled=enabled, tpot_gain=1.5 if enabled else 1.0, draft_memory_gb=0.0, reason="test")
