"""`--fail-node` for `llmserve simulate` and `llmserve twin`: one node of the plan lost (and with
it every replica it serves; a replica that spans nodes is lost whole)."""
from __future__ import annotations

from .errors import fail


def node_failure(fail_zone: str | None, fail_node: str, duration: float, plan):
    """--fail-node as the failure of one node of the plan (never with --fail-zone: one failure a run)."""
    from simulator import parse_fail_node

    if fail_zone is not None:
        fail("--fail-node: give --fail-zone or --fail-node, not both (one failure a run)")
    try:
        return parse_fail_node(fail_node, duration, plan)
    except ValueError as exc:
        fail(f"--fail-node: {exc}")
