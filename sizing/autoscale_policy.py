"""The autoscaling policy and the cold start it leads by, as plain data (part of the contract in
sizing.roles, which hands them out on first use; sizing.autoscale and sizing.coldstart fill them)."""
from __future__ import annotations

from dataclasses import dataclass, field


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
