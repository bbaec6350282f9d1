"""The plan's serving roles, speculative decoding and autoscaling, as plain data.

These are the types the planner fills and every consumer reads (deployment, components,
policies, simulator, twin, report): one definition, so that each layer reads the same figure by
the same name. The planner (`sizing.disagg`, `sizing.speculative`, `sizing.autoscale`) builds
them; nothing here computes.

- `ServingPool`: one pool of identical replicas with one role. An aggregated plan has one pool of
  role "aggregated" (the plan's own replicas); a disaggregated plan has a "prefill" pool (chunked
  prefill only) and a "decode" pool (decode steps only), each placed N+1 by zone on its own.
- `KvTransfer`: the prefill -> decode hand-off of one request's KV cache.
- `SpeculativePlan`: the speculation the decode replicas run, and where it stops paying.
- `ColdStart`, `AutoscalePolicy`: how long a replica takes to serve from nothing, and the policy
  derived from the plan (floor N+1 by zone at the trough, ceiling at the peak).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .modes import ROLES, SERVING_MODES, SPECULATIVE_METHODS  # noqa: F401 (the names, re-exported)


@dataclass(frozen=True)
class ServingPool:
    role: str                            # aggregated | prefill | decode
    replicas: int                        # fleet total of this role
    tp: int                              # GPUs per replica on one node (vLLM tensor_parallel_size under tp)
    replicas_by_zone: dict[str, int]
    capacity_per_replica_qps: float      # requests/s one replica carries at the SLO statistic
    capacity_qps: float                  # all replicas
    capacity_after_zone_loss_qps: float  # after losing `lost_domain`
    lost_domain: str
    survives_failure: bool
    binding_constraint: str              # why one replica carries no more (words)
    replica_model: Any = None            # sizing.model.ReplicaModel (the role's own step model)
    layout: str = "tp"
    nodes_per_replica: int = 1
    max_num_batched_tokens: int | None = None   # the role's engine budget (prefill: its chunk)
    max_num_seqs: int | None = None

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.nodes_per_replica

    @property
    def gpus_used(self) -> int:
        return self.replicas * self.gpus_per_replica


# The levers' types live in their own modules and are handed out here on first use: an aggregated plan
# at one load (most plans) builds none of them, and a dataclass costs its import ~0.7 ms.
_LAZY = {"KvTransfer": "lever_types", "PoolLayout": "lever_types", "SpeculativeRequest": "lever_types",
         "SpeculativePlan": "lever_types", "ColdStartTerm": "autoscale_policy", "ColdStart": "autoscale_policy",
         "AutoscalePolicy": "autoscale_policy"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def aggregated_pool(plan) -> ServingPool:
    """An aggregated plan's one pool: the plan's own replicas, capacity and placement."""
    return ServingPool(
        role="aggregated", replicas=plan.replicas, tp=plan.tp, replicas_by_zone=dict(plan.replicas_by_zone),
        capacity_per_replica_qps=plan.capacity_per_replica.qps, capacity_qps=plan.capacity_qps,
        capacity_after_zone_loss_qps=plan.capacity_after_zone_loss_qps, lost_domain=plan.lost_domain,
        survives_failure=plan.survives_failure, binding_constraint=plan.binding_constraint,
        replica_model=plan.replica_model, layout=plan.layout, nodes_per_replica=plan.nodes_per_replica)
