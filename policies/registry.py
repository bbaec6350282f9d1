"""Every policy of the pack, with its name, description, severity and remediation, and the
enforcement levels per stack (`config/<stack>.json`, the `--policy-pack-config` format).

Importing this module builds the policy objects only; the pack itself (which starts a server and
blocks) is constructed in `__main__.py`.
"""
from __future__ import annotations

import json
from pathlib import Path

from pulumi_policy import EnforcementLevel, Policy, ResourceValidationPolicy, StackValidationPolicy

from . import controllers, cost, failure_domains, security
from .rules import Rule

PACK_NAME = "llm-serving-guards"
CONFIG_DIR = Path(__file__).resolve().parent / "config"
# Without a config file for the stack every policy blocks: a new stack is treated like prod.
DEFAULT_LEVEL = EnforcementLevel.MANDATORY

RULES: tuple[Rule, ...] = tuple(failure_domains.RULES + security.RULES + cost.RULES + controllers.RULES)


def to_policy(rule: Rule) -> Policy:
    common = dict(description=rule.description, severity=rule.severity, remediation_steps=rule.remediation,
                  tags=list(rule.tags))
    if rule.scope == "resource":
        return ResourceValidationPolicy(name=rule.name, validate=rule.validate, **common)
    return StackValidationPolicy(name=rule.name, validate=rule.validate, **common)


POLICIES: list[Policy] = [to_policy(r) for r in RULES]


def config_file(stack: str) -> Path:
    return CONFIG_DIR / f"{stack}.json"


def levels(stack: str) -> dict[str, EnforcementLevel]:
    """Each policy's level for a stack: its entry in config/<stack>.json, else the file's "all",
    else mandatory. Same precedence as the Pulumi CLI's --policy-pack-config."""
    path = config_file(stack)
    config = json.loads(path.read_text()) if path.exists() else {}
    unknown = sorted(set(config) - {"all"} - {r.name for r in RULES})
    if unknown:
        raise ValueError(f"{path}: no policy named {', '.join(unknown)}")

    def level(entry) -> EnforcementLevel | None:
        if isinstance(entry, dict):
            entry = entry.get("enforcementLevel")
        return EnforcementLevel(entry) if entry is not None else None

    default = level(config.get("all")) or DEFAULT_LEVEL
    return {r.name: level(config.get(r.name)) or default for r in RULES}
