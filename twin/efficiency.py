"""The sizing profile's two efficiencies, read and set in one place.

Prefill efficiency: the share of the dense peak prefill reaches (field `mfu`). Decode: how many
times the roofline step a real decode step takes, the "decode step factor" here. A profile with
the additive step model stores it as `real_factor`; one with the mixed step model stores its
inverse as `decode_bw_fraction` (the share of HBM bandwidth a decode step reaches). This adapter
is the only place in `twin/` that knows the field names.
"""
from __future__ import annotations

from dataclasses import replace

from sizing.profiles import Profile

PREFILL_FIELD = "mfu"


def _mixed(profile: Profile) -> bool:
    return getattr(profile, "step_model", "additive") == "mixed"


def _ops(profile: Profile) -> bool:
    return getattr(profile, "step_model", "additive") == "ops"


def prefill_field(profile: Profile) -> str:
    return "ops_prefill_factor" if _ops(profile) else PREFILL_FIELD


def decode_field(profile: Profile) -> str:
    if _ops(profile):
        return "ops_decode_factor"
    return "decode_bw_fraction" if _mixed(profile) else "real_factor"


def prefill_efficiency(profile: Profile) -> float:
    """Higher: faster prefill (an ops profile stores its inverse, the prompt-token time factor)."""
    value = getattr(profile, prefill_field(profile))
    return 1.0 / value if _ops(profile) else value


def decode_factor(profile: Profile) -> float:
    """Real decode step over the roofline step (larger: slower)."""
    value = getattr(profile, decode_field(profile))
    return 1.0 / value if _mixed(profile) else value


def with_efficiencies(profile: Profile, prefill: float, decode: float, name: str | None = None,
                      description: str | None = None) -> Profile:
    """The profile with this prefill efficiency and decode step factor, in its own fields."""
    stored = round(1.0 / decode, 4) if _mixed(profile) else decode
    changes = {prefill_field(profile): round(1.0 / prefill, 4) if _ops(profile) else prefill,
               decode_field(profile): stored}
    if name is not None:
        changes["name"] = name
    if description is not None:
        changes["description"] = description
    return replace(profile, **changes)


def profile_fields(profile: Profile) -> dict:
    """The profile as its YAML entry (every field but the name)."""
    return {k: getattr(profile, k) for k in Profile.__dataclass_fields__ if k != "name"}
