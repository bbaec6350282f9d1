"""The plan's figures a stack exports: one selection of the plan's JSON (`size --json`), camelCase
derived from its keys, never retyped. `pulumi stack output plan` and `llmserve size --json` so
always agree."""
from __future__ import annotations

from sizing.planner import Plan
from sizing.report import plan_to_dict

# (key in the plan's JSON, path into it): the exported figures, in the order they are exported.
EXPORTED = (
    ("replicas", ("replicas",)),
    ("replicas_by_zone", ("replicas_by_zone",)),
    ("gpus_per_replica", ("gpus_per_replica",)),
    ("tensor_parallel_size", ("engine_args", "tensor_parallel_size")),
    ("layout", ("layout",)),
    ("nodes_per_replica", ("nodes_per_replica",)),
    ("capacity_qps", ("capacity_qps",)),                                   # the fleet: all replicas
    ("capacity_per_replica_qps", ("capacity_per_replica_qps", "real")),
    ("capacity_after_zone_loss_qps", ("capacity_after_zone_loss_qps",)),
    ("slo_statistic", ("workload", "slo_statistic")),
    ("cost_per_hour", ("cost_per_hour",)),
    ("node_cost_per_hour", ("node_cost_per_hour",)),
    ("cost_per_million_output_tokens", ("cost_per_million_output_tokens",)),
    ("binding_constraint", ("binding_constraint",)),
)


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def plan_exports(plan: Plan) -> dict:
    """The stack's `plan` output: the exported figures of the plan's JSON under camelCase keys."""
    data = plan_to_dict(plan)
    out = {}
    for key, path in EXPORTED:
        value = data
        for part in path:
            value = value[part]
        out[camel(key)] = value
    out["survivesZoneLoss"] = bool(data["survives_failure"] and data["redundancy"] == "zone")
    return out
