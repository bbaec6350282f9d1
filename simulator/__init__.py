"""A discrete-event simulator of the serving layout: what the tail does, and what a zone loss does.

Pure Python (no Pulumi, no plotting): the step cost comes from the analytic engine
(`sizing.model.ReplicaModel`), the engine arguments and placement from the plan. Its hot modules
run compiled (mypyc) where `scripts/setup` could build them from the same sources (`native`).
"""
from . import native

native.enable(__path__)      # before the submodules below are imported
from .cost import StepCost, kv_capacity_tokens, step_cost  # noqa: F401
from .loop import ReplicaSpec, SimConfig, SimResult, ZoneFailure, simulate  # noqa: F401
from .plan import (config_from_plan, parse_fail_node, parse_fail_zone, replica_model, replica_specs,  # noqa: F401
                   simulated_capacity_qps)
from .report import summarize, to_dict  # noqa: F401
from .router import ROUTERS  # noqa: F401
from .workload import ARRIVALS, LENGTHS, Request, WorkloadSpec  # noqa: F401
