"""Preview the stack offline, as `pulumi preview` would show it: no Pulumi CLI, no AWS account.
Runs the program under mocks and prints the resource tree with key inputs, the sizing plan and
the policy results. Exit 0 fine, 1 a mandatory policy violation, 2 invalid configuration.
Secrets appear only as [secret]."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from . import options
from .errors import fail

# The inputs worth a glance, per resource type (dotted paths into the camelCase inputs).
KEY_INPUTS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("availabilityZone", "cidrBlock"),
    "aws:ec2/natGateway:NatGateway": ("subnetId",),
    "aws:ec2/routeTable:RouteTable": ("routes",),
    "aws:eks/cluster:Cluster": ("name", "version", "vpcConfig.publicAccessCidrs", "accessConfig.authenticationMode",
                                "encryptionConfig.resources"),
    "aws:eks/addon:Addon": ("addonName", "addonVersion", "configurationValues"),
    "aws:eks/nodeGroup:NodeGroup": ("amiType", "instanceTypes", "capacityType", "subnetIds",
                                    "scalingConfig.desiredSize", "updateConfig", "labels", "taints"),
    "aws:ec2/launchTemplate:LaunchTemplate": ("metadataOptions.httpTokens", "metadataOptions.httpPutResponseHopLimit",
                                              "blockDeviceMappings",
                                              "capacityReservationSpecification", "instanceMarketOptions"),
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation": ("capacityBlockOfferingId",),
    "aws:eks/accessEntry:AccessEntry": ("principalArn",),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": ("policyArn",),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("policyArn",),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("namespace", "serviceAccount"),
    "aws:cloudwatch/logGroup:LogGroup": ("name", "retentionInDays"),
    "kubernetes:helm.sh/v3:Release": ("chart", "version", "namespace"),
}
K8S_KEY_INPUTS = ("metadata.namespace", "spec.replicas")
MAX_VALUE_CHARS = 90


def preview(
    stack: str = options.STACK,
    config: Optional[Path] = options.CONFIG,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: stack, plan, resources, "
                                                       "violations, outputs, placeholderSecrets, exampleValues; each resource lists its "
                                                       "dependencies (URNs)."),
) -> None:
    from offline.collector import paused_gc

    with paused_gc():    # the whole command, the SDKs' imports and the output included: see paused_gc
        result = _previewed(stack, config)
        if as_json:
            print(json.dumps(result.as_dict(), indent=2, default=str))
        else:
            _print_text(result)
            for line in example_note(result.example_values):
                print(line)
            print(placeholder_note(result.placeholder_secrets))
    if result.mandatory_violations:
        raise typer.Exit(1)


def _previewed(stack: str, config: Optional[Path]):
    from offline.preview import preview_stack
    from offline.stack import StackError

    try:
        return preview_stack(stack, config)
    except StackError as exc:
        fail(str(exc))


def placeholder_note(keys: list[str]) -> str:
    """What the preview stood in for: no secret is decrypted offline."""
    names = ", ".join(k.partition(":")[2] for k in keys)
    return (f"Secrets: offline placeholders for {names} (a real `pulumi up` needs each set with "
            "`pulumi config set --secret <key> <value>`).")


def example_note(lines: list[str]) -> list[str]:
    """The example values a real deploy refuses (`pulumi up` and `llmserve preflight`), one per line."""
    if not lines:
        return []
    return [f"Example values: {len(lines)} found; `pulumi up` and `llmserve preflight` refuse them:"] + [
        f"  {line}" for line in lines]


# -- text output -------------------------------------------------------------------------------
def _lookup(inputs: dict, path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


def _show(value: Any, names: dict[str, str]) -> str:
    """Compact text for one input; ids of recorded resources shown as their names."""
    from pulumi.runtime.rpc import UNKNOWN

    from offline.values import SECRET_TEXT, walk

    def leaf(v: Any) -> str:
        if isinstance(v, str):
            return _clip("(known after apply)" if v == UNKNOWN else names.get(v, v))
        if isinstance(v, float) and v.is_integer():
            return _clip(str(int(v)))
        return _clip(json.dumps(v))

    return walk(value, secret=lambda _: SECRET_TEXT, leaf=leaf,
                mapping=lambda d: _clip("{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"),
                sequence=lambda items: _clip("[" + ", ".join(items) + "]"))


def key_inputs(res: dict, names: dict[str, str]) -> list[str]:
    paths = KEY_INPUTS.get(res["type"]) or (K8S_KEY_INPUTS if res["type"].startswith("kubernetes:") else ())
    out = []
    for path in paths:
        value = _lookup(res["inputs"], path)
        if value is not None:
            out.append(f"{path.rsplit('.', 1)[-1]}={_show(value, names)}")
    return out


def resource_tree(result):
    """The resources as one rich Text, a line each under their parents, with tree guides: rich's
    Tree lays out each of ~125 nodes as its own renderable (40 ms of a preview); one Text prints
    in a third of that. Lines are not wrapped: the key inputs stay on their resource's line."""
    from rich.text import Text

    resources = result.resources
    names = {r["id"]: r["name"] for r in resources if r["id"]}
    urns = {r["urn"] for r in resources}
    by_parent: dict[str, list[dict]] = {}
    for r in resources:
        by_parent.setdefault(r["parent"] if r["parent"] in urns else "", []).append(r)

    tree = Text(f"pulumi:pulumi:Stack llm-serving-{result.stack}  "
                f"({len(resources)} resources, {result.settings.region}, {result.settings.environment})", style="bold")

    def grow(parent_urn: str, indent: str) -> None:
        children = by_parent.get(parent_urn, [])
        for i, r in enumerate(children):
            last = i == len(children) - 1
            tree.append(f"\n{indent}{'└── ' if last else '├── '}")
            tree.append(r["type"], style="cyan")
            tree.append(f" {r['name']}", style="bold")
            details = key_inputs(r, names)
            if details:
                tree.append("  " + "  ".join(details), style="dim")
            grow(r["urn"], indent + ("    " if last else "│   "))

    grow("", "")
    return tree


def _print_text(result) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from sizing.report import layout_label, table_rows

    plan_data, violations, outputs = result.plan, result.violations, result.outputs
    console = Console(width=160)
    console.print(resource_tree(result), no_wrap=True, overflow="ignore", crop=False)

    table = Table(title=f"Sizing plan: {plan_data['model']} {plan_data['weights']} on {plan_data['instance_type']}, "
                        f"{layout_label(plan_data)}", title_justify="left")
    for col, justify in (("figure", "left"), ("ideal", "right"), ("real", "right")):
        table.add_column(col, justify=justify)
    for row in table_rows(plan_data):
        table.add_row(*row)
    console.print(table)
    console.print(Text(f"Binding constraint: {plan_data['binding_constraint']}."))
    console.print(Text(f"Replicas by zone: {plan_data['replicas_by_zone']}."))
    for note in plan_data["notes"]:
        console.print(Text(f"Note: {note}."))

    if violations:
        vt = Table(title="Policy violations", title_justify="left")
        for col in ("level", "policy", "resource", "message"):
            vt.add_column(col)
        for v in violations:
            vt.add_row(v.get("level", ""), v.get("policy", ""), (v.get("urn") or "stack").rsplit("::", 1)[-1],
                       v.get("message", ""))
        console.print(vt)
    mandatory = result.mandatory_violations
    console.print(Text(f"Policies: {mandatory} mandatory, {len(violations) - mandatory} advisory violation(s)."))

    console.print(Text("Outputs:", style="bold"))
    for key, value in outputs.items():
        console.print(Text(f"  {key}: {json.dumps(value, default=str)}"))


def register(app: typer.Typer) -> None:
    app.command("preview", help=__doc__)(preview)
