"""One `DeploymentSpec` per stack: the plan and the stack's settings turned into what the Pulumi
program builds, once. `__main__.py` builds it and hands each component its slice."""
from __future__ import annotations

from dataclasses import dataclass

from conventions import PROJECT
from settings import SettingsError, StackSettings
from sizing.planner import Plan

from .disagg import disaggregation_problems, is_disaggregated
from .autoscaling import autoscaling_problems
from .exports import plan_exports
from .gateway import GatewaySpec, gateway_spec
from .jobs import GateSpec, LoadTestSpec, gate_job_spec, load_test_spec
from .node_pools import NodePoolSpec, node_pool_specs
from .serving import ServingSpec, serving_spec, zone_node_slots


@dataclass(frozen=True)
class DeploymentSpec:
    serving: ServingSpec
    gateway: GatewaySpec
    node_pools: tuple[NodePoolSpec, ...]
    load_test: LoadTestSpec | None            # loadTest.enabled
    accuracy_gate: GateSpec | None            # the gate is on (staging and prod by default)
    exports: dict                             # the stack's `plan` output (camelCase of `size --json`)

    @property
    def efa(self) -> bool:
        """EFA anywhere: its security group and device plugin are installed."""
        return any(p.efa for p in self.node_pools)

    @property
    def kv_over_efa(self) -> bool:
        """A disaggregated plan's KV moves over EFA: its serving pods request EFA devices."""
        return any(p.kv_over_efa for p in self.serving.pools)

    @property
    def spans_nodes(self) -> bool:
        """Replicas span nodes: the LeaderWorkerSet controller is installed."""
        return self.serving.nodes_per_replica > 1


def layout_problems(plan: Plan, settings: StackSettings) -> list[str]:
    """Settings the plan's layout would leave unused, refused with the reason rather than dropped
    (what the program builds for the layout: components/serving.py, deployment/node_pools.py)."""
    problems, n = [], plan.nodes_per_replica
    if settings.serving.burstScaling and n > 1:
        problems.append(f"{PROJECT}:serving.burstScaling: the plan's replicas are groups of {n} nodes (one "
                        "LeaderWorkerSet each); burst scaling adds one-node replicas into a node's idle GPUs, which "
                        "no group has, so the program would install nothing for it; set burstScaling: false")
    elif settings.serving.burstScaling and not any(
            zone_node_slots(plan, zone)[1] > count for zone, count in plan.replicas_by_zone.items() if count):
        problems.append(f"{PROJECT}:serving.burstScaling: the plan's replicas leave no node with {plan.tp} idle GPUs "
                        f"(TP={plan.tp} on {plan.instance.gpus}-GPU nodes), so KEDA could add no replica and the "
                        "program would scale nothing; set burstScaling: false")
    if n > 1:
        problems += [f"{PROJECT}:gpuPools[{i}].efa: the plan's replicas span {n} nodes, whose pipeline stages talk over "
                     "EFA, so EFA is on regardless (docs/multi-node.md); drop efa: false"
                     for i, pool in enumerate(settings.gpuPools) if "efa" in pool.model_fields_set and not pool.efa]
    return problems


def deployment_spec(plan: Plan, settings: StackSettings) -> DeploymentSpec:
    """The spec every component builds from; a setting the plan's layout would ignore is a
    SettingsError (`layout_problems`), as the settings' own problems are."""
    # A disaggregated plan deploys its pools, not the aggregated layout: only its own problems apply.
    problems = disaggregation_problems(plan, settings) if is_disaggregated(plan) else layout_problems(plan, settings)
    problems += autoscaling_problems(plan, settings)
    if problems:
        raise SettingsError(problems)
    return DeploymentSpec(
        serving=serving_spec(plan, settings),
        gateway=gateway_spec(plan, settings),
        node_pools=node_pool_specs(plan, settings),
        load_test=load_test_spec(plan, settings) if settings.loadTest.enabled else None,
        accuracy_gate=gate_job_spec(plan, settings) if settings.accuracy_gate_enabled else None,
        exports=plan_exports(plan),
    )
