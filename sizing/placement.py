"""Placement: node pools, the replicas each zone holds, and N+1 by zone over them.

Pure integer geometry shared by every pool the planner places (the aggregated fleet, and the
prefill and decode pools of a disaggregated plan): how many replicas a zone's nodes hold, the
even spread of a count over zones, the fewest replicas that survive losing any one zone, and
which node each replica lands on (a TP group never splits across nodes; a multi-node replica
takes consecutive nodes of one pool).
"""
from __future__ import annotations

from dataclasses import dataclass

from .workload import SizingError


@dataclass(frozen=True)
class Pool:
    zone: str
    instance_type: str
    nodes: int
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or f"{self.zone}-{self.instance_type.split('.')[0]}"


@dataclass(frozen=True)
class NodeSlot:
    pool: str
    zone: str
    node: int            # index of the node within its pool
    replicas: int        # replicas this node serves (in part, when a replica spans nodes)
    gpus_used: int
    gpus_idle: int
    group: int | None = None   # a multi-node replica: its index within the pool (nodes group*N .. group*N+N-1)



class PlanError(SizingError):
    """No layout satisfies the request; the message says which constraint fails."""


def zone_slots(pools: tuple[Pool, ...], slots_per_node: int, nodes_per_replica: int = 1) -> dict[str, int]:
    """Replicas each zone can hold: TP groups per node, or (spanning nodes) whole groups per pool."""
    out: dict[str, int] = {}
    for p in pools:
        held = p.nodes * slots_per_node if nodes_per_replica == 1 else p.nodes // nodes_per_replica
        out[p.zone] = out.get(p.zone, 0) + held
    return out


def spread(total: int, slots: dict[str, int]) -> dict[str, int]:
    """Water-fill `total` replicas over zones: as even as their free slots allow."""
    counts = {z: 0 for z in slots}
    for _ in range(total):
        free = [z for z in slots if counts[z] < slots[z]]
        if not free:
            raise PlanError("more replicas than GPU slots")
        z = min(free, key=lambda z: (counts[z], -slots[z], z))
        counts[z] += 1
    return counts


def replicas_for_n_plus_one(survivors: int, slots: dict[str, int]) -> dict[str, int] | None:
    """Fewest replicas, spread over zones, that leave `survivors` after losing any one zone."""
    if len(slots) < 2:
        return None
    for total in range(survivors, sum(slots.values()) + 1):
        counts = spread(total, slots)
        if total - max(counts.values()) >= survivors:
            return counts
    return None


def place_groups(counts: dict[str, int], pools: tuple[Pool, ...], tp: int, gpus_per_node: int,
                 nodes_per_replica: int) -> tuple[NodeSlot, ...]:
    """Replicas that span nodes: each takes `nodes_per_replica` consecutive nodes of one pool;
    a zone's replicas round-robin over its pools; nodes left over hold no group and stay idle."""
    n = nodes_per_replica
    groups = {p: 0 for p in pools}
    for zone, count in counts.items():
        in_zone = [p for p in pools if p.zone == zone]
        for _ in range(count):
            free = [p for p in in_zone if (groups[p] + 1) * n <= p.nodes]
            if not free:
                raise PlanError(f"zone {zone} has no room for another {n}-node replica")
            groups[min(free, key=lambda p: groups[p])] += 1
    return tuple(
        NodeSlot(pool=p.label, zone=p.zone, node=i, replicas=1, gpus_used=tp, gpus_idle=gpus_per_node - tp, group=i // n)
        if i // n < groups[p] else
        NodeSlot(pool=p.label, zone=p.zone, node=i, replicas=0, gpus_used=0, gpus_idle=gpus_per_node)
        for p in pools for i in range(p.nodes))


def place_on_nodes(counts: dict[str, int], pools: tuple[Pool, ...], tp: int, gpus_per_node: int) -> tuple[NodeSlot, ...]:
    """Within each zone, round-robin its replicas over its nodes; a TP group stays on one node."""
    nodes = [[p, i, 0] for p in pools for i in range(p.nodes)]    # [pool, node, replicas on it]
    for zone, count in counts.items():
        in_zone = [n for n in nodes if n[0].zone == zone]
        for k in range(count):
            target = min(in_zone, key=lambda n: n[2])
            if (target[2] + 1) * tp > gpus_per_node:
                raise PlanError(f"zone {zone} has no room for another TP={tp} replica")
            target[2] += 1
    return tuple(NodeSlot(pool=p.label, zone=p.zone, node=i, replicas=r, gpus_used=r * tp,
                          gpus_idle=gpus_per_node - r * tp) for p, i, r in nodes)


