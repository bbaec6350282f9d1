"""What the commands share about their stack: reading it through the one loader
(`offline.stack.load_stack`), and `--fail-zone` (simulate, twin)."""
from __future__ import annotations

from pathlib import Path

from .errors import fail


def load(stack: str | None, config: Path | None = None, plan: bool = False):
    """The `offline.stack.LoadedStack` (with its plan made when `plan`), or one `error:` line."""
    from offline.stack import StackError, load_stack

    try:
        loaded = load_stack(stack, config)
        if plan:
            loaded.plan
        return loaded
    except StackError as exc:
        fail(str(exc))


def zone_failure(value: str | None, duration_s: float, plan):
    """`--fail-zone ZONE@T[:T2]` as a `simulator.ZoneFailure` of a zone holding replicas of the
    plan (None when not given)."""
    if value is None:
        return None
    from simulator import parse_fail_zone

    try:
        failure = parse_fail_zone(value, duration_s)
    except ValueError as exc:
        fail(f"--fail-zone: {exc}")
    if not plan.replicas_by_zone.get(failure.zone):
        zones = ", ".join(z for z, n in plan.replicas_by_zone.items() if n)
        fail(f"--fail-zone: zone {failure.zone} holds no replica of this plan (zones: {zones})")
    return failure


def node_failure(fail_zone: str | None, fail_node: str, duration_s: float, plan):
    """`--fail-node POOL/node-I@T[:T2]` as the failure of one node of the plan, and with it every
    replica it serves (a replica that spans nodes whole); never with --fail-zone (one failure a run)."""
    from simulator import parse_fail_node

    if fail_zone is not None:
        fail("--fail-node: give --fail-zone or --fail-node, not both (one failure a run)")
    try:
        return parse_fail_node(fail_node, duration_s, plan)
    except ValueError as exc:
        fail(f"--fail-node: {exc}")


def requested_failure(fail_zone: str | None, fail_node: str | None, duration_s: float, plan):
    """The one failure `--fail-zone` or `--fail-node` asks for (None when neither): the zone's
    checks first, so the same error wins whichever flags are given."""
    failure = zone_failure(fail_zone, duration_s, plan)
    return failure if fail_node is None else node_failure(fail_zone, fail_node, duration_s, plan)
