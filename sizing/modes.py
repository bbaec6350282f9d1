"""The names of the serving levers, as plain tuples: what a stack key may say (settings validates
against these without building the plan's types in sizing.roles)."""
from __future__ import annotations

SERVING_MODES = ("aggregated", "disaggregated", "auto")
ROLES = ("aggregated", "prefill", "decode")
SPECULATIVE_METHODS = ("eagle3", "mtp", "ngram", "draft")
