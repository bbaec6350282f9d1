"""The GPU node pools as deployment data: one per (zone, pool) of the plan, with what each node
group needs from the plan (its GPUs per node, EFA, the kubelet's shutdown grace).

Pure Python (no Pulumi): components/gpu_node_pool.py builds each group.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from settings import StackSettings
from settings.schema import GpuPoolSettings
from sizing.planner import Plan, Pool

from .disagg import kv_over_efa
from .drain import drain_timing, longest_request_s, node_shutdown_grace_s


def efa_enabled(plan: Plan, pool_settings: GpuPoolSettings) -> bool:
    """EFA on when the pool asks for it, and always when a replica spans nodes: its pipeline
    stages talk over the network (the plan's inter-node cost is the instance's EFA bandwidth), and when a
    disaggregated plan moves KV between nodes over EFA (deployment.disagg)."""
    return pool_settings.efa or plan.nodes_per_replica > 1 or kv_over_efa(plan)


@dataclass(frozen=True)
class NodePoolSpec:
    pool: Pool                       # the plan's pool (zone, instance type, nodes, label)
    settings: GpuPoolSettings        # capacity reservation / block, EFA
    gpus_per_node: int
    efa: bool
    shutdown_grace_s: int            # the kubelet's shutdownGracePeriod (deployment.drain)
    ami_release_version: str | None  # nodeAmiReleaseVersion: None leaves the AMI where it is
    bounds: Any = None               # deployment.autoscaling.NodeBounds: the cluster autoscaler's range (None: fixed)
    mig: Any = None                  # sizing.mig.MigProfile: every GPU of the node sliced so (None: whole GPUs)

    @property
    def upgrades_in_place(self) -> bool:
        """Not a Capacity Block pool: EKS upgrades one of those only at desired size 0."""
        return self.settings.capacityBlock is None


def node_pool_specs(plan: Plan, settings: StackSettings) -> tuple[NodePoolSpec, ...]:
    """One per pool, in the plan's order (each node group updates after the one before)."""
    from sizing.mig import split_slice_id
    from .autoscaling import node_bounds
    grace = node_shutdown_grace_s(drain_timing(longest_request_s(plan)))
    sliced = split_slice_id(plan.instance.gpu.id)
    return tuple(NodePoolSpec(pool, ps, plan.instance.gpus, efa_enabled(plan, ps), grace,
                              settings.nodeAmiReleaseVersion, bounds, sliced[1] if sliced else None)
                 for (pool, ps), bounds in zip(zip(plan.request.pools, settings.gpuPools), node_bounds(plan, settings)))
