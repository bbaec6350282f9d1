"""Capacity a GPU pool can be backed by, and the id formats the stack accepts for it.

EC2 ids are a prefix and 17 lower-case hex digits: On-Demand Capacity Reservations and Capacity
Blocks are both capacity reservations (`cr-0123456789abcdef0`; EC2 API `CapacityReservation`,
whose `ReservationType` is `default` or `capacity-block`), and a Capacity Block offering, which
`pulumi up` may buy, is `cb-` and 17 hex digits (`DescribeCapacityBlockOfferings`'
`CapacityBlockOfferingId`). A malformed id is refused here, naming the key, before EC2 is asked.
So is a block length EC2 never offers (`duration_hours`).
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


# Amazon EC2 API Reference, DescribeCapacityBlockOfferings, `CapacityDurationHours`: "You must
# specify the duration in 1-day increments up 14 days, and in 7-day increments up to 182 days"
# (EC2 User Guide, "Capacity Blocks for ML": blocks of 1 to 14 days, or 7-day multiples to 182).
DAY_HOURS, WEEK_HOURS = 24, 7 * 24
MAX_DAILY_HOURS = 14 * DAY_HOURS          # 336
MAX_BLOCK_HOURS = 182 * DAY_HOURS         # 4,368 (26 weeks)
BLOCK_HOURS = tuple(range(DAY_HOURS, MAX_DAILY_HOURS + 1, DAY_HOURS)) + tuple(
    range(MAX_DAILY_HOURS + WEEK_HOURS, MAX_BLOCK_HOURS + 1, WEEK_HOURS))


def duration_hours(value: int | None) -> int | None:
    """A Capacity Block's length as EC2 offers them: 24 to 336 hours in whole days, then up to
    4,368 in whole weeks (BLOCK_HOURS)."""
    if value is None or value in BLOCK_HOURS:
        return value
    below = [h for h in BLOCK_HOURS if h < value]
    above = [h for h in BLOCK_HOURS if h > value]
    near = " or ".join(str(h) for h in (below[-1:] + above[:1]))
    raise ValueError(f"{value} is not a Capacity Block length: EC2 offers 1 to 14 days in whole days (24 to "
                     f"{MAX_DAILY_HOURS} hours, multiples of 24) and 14 to 182 days in whole weeks ({MAX_DAILY_HOURS} "
                     f"to {MAX_BLOCK_HOURS:,} hours, multiples of 168); use {near}, the nearest")
