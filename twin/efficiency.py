"""The sizing profile's two efficiencies, read and set in one place.

Prefill efficiency: the share of the dense peak prefill reaches (today's field `mfu`). Decode
efficiency: how much longer a real decode step is than the roofline step (today's field
`real_factor`). The sizing package is splitting these into separately named parameters; this
adapter is the only place in `twin/` that knows the field names.
"""
from __future__ import annotations

from dataclasses import replace

from sizing.profiles import Profile

PREFILL_FIELD = "mfu"
DECODE_FIELD = "real_factor"


def prefill_efficiency(profile: Profile) -> float:
    return getattr(profile, PREFILL_FIELD)


def decode_factor(profile: Profile) -> float:
    return getattr(profile, DECODE_FIELD)


def with_efficiencies(profile: Profile, prefill: float, decode: float, name: str | None = None,
                      description: str | None = None) -> Profile:
    changes = {PREFILL_FIELD: prefill, DECODE_FIELD: decode}
    if name is not None:
        changes["name"] = name
    if description is not None:
        changes["description"] = description
    return replace(profile, **changes)


def profile_fields(profile: Profile) -> dict:
    """The profile as its YAML entry (every field but the name)."""
    return {k: getattr(profile, k) for k in Profile.__dataclass_fields__ if k != "name"}
