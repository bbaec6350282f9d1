"""Cost rules: nothing that cannot be refunded is bought without an explicit opt-in."""
from __future__ import annotations

from pulumi_policy import Severity

from conventions import TAG_PURCHASE_APPROVED
from .resources import CAPACITY_BLOCK, as_dict, get, truthy
from .rules import Rule, resource_rule

RULES: list[Rule] = []


@resource_rule(
    RULES, "capacity-block-opt-in",
    description="An EC2 Capacity Block purchase (non-refundable) carries an explicit opt-in tag, "
                f"{TAG_PURCHASE_APPROVED}: 'true'.",
    severity=Severity.CRITICAL,
    remediation="Check the offering's price and dates, then set capacityBlock.allowPurchase: true on the GPU "
                "pool (the program then tags the reservation as approved); or use an existing reservation "
                "with capacityBlock.id.",
    tags=("cost",))
def capacity_block_opt_in(args, report_violation):
    if args.resource_type != CAPACITY_BLOCK:
        return
    tags = as_dict(get(args.props, "tags", default={}))
    if not truthy(tags.get(TAG_PURCHASE_APPROVED)):
        offering = get(args.props, "capacityBlockOfferingId", default="?")
        report_violation(f"capacity block {args.name} would buy offering {offering}, which cannot be refunded, "
                         f"without the {TAG_PURCHASE_APPROVED}: 'true' tag")
