"""The llm-serving Pulumi program: stack config -> settings -> sizing plan -> components -> outputs.

Only wiring lives here; every number a component needs comes from the plan.
"""
import pulumi

from settings.pulumi_config import settings_from_pulumi
from sizing.planner import plan as make_plan
from sizing.report import plan_to_dict

settings = settings_from_pulumi()
plan = make_plan(settings.plan_request())
plan_data = plan_to_dict(plan)

# -- outputs --------------------------------------------------------------------------------------
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
