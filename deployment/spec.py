"""One `DeploymentSpec` per stack: the plan and the stack's settings turned into what the Pulumi
program builds, once. `__main__.py` builds it and hands each component its slice."""
from __future__ import annotations

from dataclasses import dataclass

from settings import StackSettings
from sizing.planner import Plan

from .exports import plan_exports
from .gateway import GatewaySpec, gateway_spec
from .jobs import GateSpec, LoadTestSpec, gate_job_spec, load_test_spec
from .node_pools import NodePoolSpec, node_pool_specs
from .serving import ServingSpec, serving_spec


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
    def spans_nodes(self) -> bool:
        """Replicas span nodes: the LeaderWorkerSet controller is installed."""
        return self.serving.nodes_per_replica > 1


def deployment_spec(plan: Plan, settings: StackSettings) -> DeploymentSpec:
    return DeploymentSpec(
        serving=serving_spec(plan, settings),
        gateway=gateway_spec(plan, settings),
        node_pools=node_pool_specs(plan, settings),
        load_test=load_test_spec(plan, settings) if settings.loadTest.enabled else None,
        accuracy_gate=gate_job_spec(plan, settings) if settings.accuracy_gate_enabled else None,
        exports=plan_exports(plan),
    )
