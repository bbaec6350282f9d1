"""The plan as deployment data: everything the Pulumi components build, derived once from the
sizing plan and the stack's settings, as plain typed values (no Pulumi).

Layering: above `settings/` and `sizing/`, below `components/`, `observability/`, `simulator/` and
`twin/`. `deployment_spec(plan, settings)` (deployment/spec.py) builds one `DeploymentSpec`; each
component takes its slice of it. docs/architecture.md draws the layer; docs/contracts.md has the
one table from engine field to vLLM flag (deployment/engine.py).
"""
