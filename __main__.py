"""The llm-serving Pulumi program: stack config -> settings -> sizing plan -> components -> outputs.

Only wiring lives here; every number a component needs comes from the plan.
"""
import pulumi

from components.cluster import Cluster, ClusterArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.network import Network, NetworkArgs, network_zones
from settings import SettingsError
from settings.pulumi_config import settings_from_pulumi
from sizing.model import SizingError
from sizing.planner import plan as make_plan
from sizing.report import plan_to_dict

try:
    settings = settings_from_pulumi()
    plan = make_plan(settings.plan_request())
except SettingsError as exc:       # one line per problem, each naming the key; no traceback
    raise pulumi.RunError(f"invalid stack config:\n{exc}") from None
except SizingError as exc:
    raise pulumi.RunError(f"no plan for this stack config: {exc}") from None
plan_data = plan_to_dict(plan)

# -- AWS: network -> cluster -> one GPU node pool per (zone, pool) ---------------------------------
network = Network("llm", NetworkArgs(
    vpc_cidr=settings.network.vpcCidr,
    region=settings.region,
    zones=network_zones(settings.zones, settings.region),
    nat_per_zone=settings.nat_per_zone,
    tags=settings.tags,
))
cluster = Cluster("llm", ClusterArgs(settings=settings, network=network))
gpu_pools = [
    GpuNodePool(f"gpu-{pool.label}", GpuNodePoolArgs(
        settings=settings, plan=plan, pool=pool, pool_settings=pool_settings, cluster=cluster, network=network))
    for pool, pool_settings in zip(plan.request.pools, settings.gpuPools)
]

# -- outputs --------------------------------------------------------------------------------------
pulumi.export("clusterName", cluster.cluster_name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("plan", {
    "replicas": plan.replicas,
    "replicasByZone": plan.replicas_by_zone,
    "tensorParallel": plan.tp,
    "capacityQps": plan_data["total_capacity_qps"],
    "capacityPerReplicaQps": plan_data["capacity_qps"]["real"],
    "capacityAfterZoneLossQps": plan_data["capacity_after_zone_loss_qps"],
    "survivesZoneLoss": plan.survives_failure and plan.redundancy == "zone",
    "costPerHour": plan_data["cost_per_hour"],
    "nodeCostPerHour": plan_data["node_cost_per_hour"],
    "costPerMillionOutputTokens": plan_data["cost_per_million_output_tokens"],
    "bindingConstraint": plan.binding_constraint,
})
