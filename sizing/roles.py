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

SERVING_MODES = ("aggregated", "disaggregated", "auto")
ROLES = ("aggregated", "prefill", "decode")
SPECULATIVE_METHODS = ("eagle3", "mtp", "ngram", "draft")


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


@dataclass(frozen=True)
class KvTransfer:
    """One request's KV from its prefill replica to its decode replica (vLLM NixlConnector)."""
    link: str                    # nvlink (same node) | efa (across nodes, same zone)
    bytes_per_request: float     # prompt tokens x KV bytes per token (the mean prompt)
    bandwidth_gbps: float        # the link's nominal bandwidth, Gbit/s
    efficiency: float            # at this message size (sizing.kv_transfer's cited curve)
    fixed_ms: float              # per-request cost: handshake, metadata, notification
    transfer_ms: float           # fixed_ms + bytes / (bandwidth x efficiency), at the mean prompt
    transfer_ms_at_statistic: float   # at the prompt quantile of the SLO statistic
    kv_lease_s: float            # KV held on the prefill side until the decode pulls it


@dataclass(frozen=True)
class PoolLayout:
    """An explicit disaggregated layout to evaluate (fleet totals), as `size --prefill-replicas ...`."""
    prefill_replicas: int
    prefill_tp: int
    decode_replicas: int
    decode_tp: int


@dataclass(frozen=True)
class SpeculativeRequest:
    """What the user states: the method, k and the measured per-token acceptance."""
    method: str                  # eagle3 | mtp | ngram | draft
    draft_tokens: int | None     # k; None: the plan chooses it per expected batch
    acceptance_rate: float | None   # per-token acceptance a in (0, 1); None is refused
    draft_model: str | None = None  # method draft / eagle3: the drafter's checkpoint or catalog id


@dataclass(frozen=True)
class SpeculativePlan:
    method: str
    draft_tokens: int                    # k chosen for the expected batch (0: speculation off)
    acceptance_rate: float
    mean_acceptance_length: float        # tokens emitted per verify step, bonus token included
    stops_paying_batch: float | None     # decode batch above which speculation slows TPOT (None: never in range)
    expected_batch: float                # decode batch the plan expects per replica
    enabled: bool                        # False: the plan runs without it (the batch is past stops_paying_batch)
    tpot_gain: float                     # TPOT without / with, at the expected batch (1.0: off)
    draft_memory_gb: float               # drafter weights + its KV, per replica
    reason: str                          # words: why this k, or why off
    draft_model: str | None = None       # vLLM's speculative `model` (the drafter's checkpoint); None: ngram or the target's own MTP layers


@dataclass(frozen=True)
class ColdStartTerm:
    name: str                    # node_provision | image_pull | model_download | compile | model_load | engine_start
    seconds: float
    source: str                  # the citation or the figure it comes from


@dataclass(frozen=True)
class ColdStart:
    terms: tuple[ColdStartTerm, ...]

    @property
    def replica_on_new_node_s(self) -> float:
        return sum(t.seconds for t in self.terms)

    @property
    def replica_on_warm_node_s(self) -> float:
        """A node already up (and its image pulled): model load and engine start only."""
        return sum(t.seconds for t in self.terms if t.name in ("model_load", "engine_start"))


@dataclass(frozen=True)
class AutoscalePolicy:
    metric: str                          # the figure KEDA scales on (a PromQL expression's meaning)
    query: str                           # the PromQL KEDA runs
    target_per_replica: float            # the metric's value one replica carries at the SLO statistic
    floor_by_zone: dict[str, int]        # N+1 by zone at the trough: never fewer
    ceiling_by_zone: dict[str, int]      # the peak's N+1 fleet: never more
    lead_s: float                        # scale-up leads the curve by the cold start
    scale_down_stabilization_s: float    # the drain story: no scale-down within this window
    cold_start: ColdStart | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Added by sizing.autoscale (issue 34); defaults keep the fields above the whole contract.
    lead_query: str = ""                 # the second trigger: the rate lead_s ahead (predict_linear)
    zone_threshold: float = 0.0          # each zone's ScaledObject AverageValue on the fleet-wide metric
    peak_qps: float = 0.0                # the traffic's peak and trough, and when (s from the curve's start)
    peak_at_s: float = 0.0
    trough_qps: float = 0.0
    trough_at_s: float = 0.0
    trough_replicas: int = 0             # the fleet the trough's N+1 plan needs (sum of floor_by_zone)
    floor_redundancy: str = "zone"       # the trough plan's: zone (N+1 by zone) | node (one zone) | none
    nodes_floor_by_zone: dict[str, int] = field(default_factory=dict)    # GPU nodes the floor keeps up
    nodes_ceiling_by_zone: dict[str, int] = field(default_factory=dict)  # GPU nodes the ceiling needs
    scales: str = "replicas"             # replicas (Deployments) | groups (LeaderWorkerSet groups, whole)
    polling_interval_s: float = 30.0     # KEDA's pollingInterval
    node_scale_down_s: float = 600.0     # an empty node is removed after this (cluster-autoscaler default)
    floor_qps: float | None = None       # the trough's load: what the floor carries after losing a zone


def aggregated_pool(plan) -> ServingPool:
    """An aggregated plan's one pool: the plan's own replicas, capacity and placement."""
    return ServingPool(
        role="aggregated", replicas=plan.replicas, tp=plan.tp, replicas_by_zone=dict(plan.replicas_by_zone),
        capacity_per_replica_qps=plan.capacity_per_replica.qps, capacity_qps=plan.capacity_qps,
        capacity_after_zone_loss_qps=plan.capacity_after_zone_loss_qps, lost_domain=plan.lost_domain,
        survives_failure=plan.survives_failure, binding_constraint=plan.binding_constraint,
        replica_model=plan.replica_model, layout=plan.layout, nodes_per_replica=plan.nodes_per_replica)
