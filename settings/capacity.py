"""Capacity a GPU pool can be backed by, and the id formats the stack accepts for it.

EC2 ids are a prefix and 17 lower-case hex digits: On-Demand Capacity Reservations and Capacity
Blocks are both capacity reservations (`cr-0123456789abcdef0`; EC2 API `CapacityReservation`,
whose `ReservationType` is `default` or `capacity-block`), and a Capacity Block offering, which
`pulumi up` may buy, is `cb-` and 17 hex digits (`DescribeCapacityBlockOfferings`'
`CapacityBlockOfferingId`). A malformed id is refused here, naming the key, before EC2 is asked.
"""
from __future__ import annotations

import re

RESERVATION_ID = re.compile(r"cr-[0-9a-f]{17}")
OFFERING_ID = re.compile(r"cb-[0-9a-f]{17}")


def reservation_id(value: str | None) -> str | None:
    if value is not None and not RESERVATION_ID.fullmatch(value):
        raise ValueError(f"'{value[:40]}' is not a capacity reservation id: cr- and 17 hex digits, as "
                         "`aws ec2 describe-capacity-reservations` lists them")
    return value


def offering_id(value: str | None) -> str | None:
    if value is not None and not OFFERING_ID.fullmatch(value):
        raise ValueError(f"'{value[:40]}' is not a capacity block offering id: cb- and 17 hex digits, as "
                         "`aws ec2 describe-capacity-block-offerings` lists them")
    return value
