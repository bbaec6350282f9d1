"""Every policy of the pack, with its name, description, severity and remediation, and the
enforcement levels per environment (`config/<environment>.json`, the `--policy-pack-config`
format). Levels are keyed by the stack's `llm-serving:environment`, never its name, both in the
pack (`pack_environment`) and offline (`offline.policy_run.evaluate`): a stack named `mine` with
`environment: prod` gets prod's levels either way.

Importing this module builds the policy objects only; the pack itself (which starts a server and
blocks) is constructed in `__main__.py`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pulumi_policy import EnforcementLevel, Policy, ResourceValidationPolicy, StackValidationPolicy

from conventions import ENVIRONMENT_CONFIG_KEY

from . import autoscaling, controllers, cost, disaggregation, failure_domains, security
from .rules import Rule

PACK_NAME = "llm-serving-guards"
CONFIG_DIR = Path(__file__).resolve().parent / "config"
# Without a config file for the environment every policy blocks: an unknown one is treated like prod.
DEFAULT_LEVEL = EnforcementLevel.MANDATORY

RULES: tuple[Rule, ...] = tuple(failure_domains.RULES + security.RULES + cost.RULES + controllers.RULES
                                + disaggregation.RULES + autoscaling.RULES)


def to_policy(rule: Rule) -> Policy:
    common = dict(description=rule.description, severity=rule.severity, remediation_steps=rule.remediation,
                  tags=list(rule.tags))
    if rule.scope == "resource":
        return ResourceValidationPolicy(name=rule.name, validate=rule.validate, **common)
    return StackValidationPolicy(name=rule.name, validate=rule.validate, **common)


POLICIES: list[Policy] = [to_policy(r) for r in RULES]


def config_file(environment: str) -> Path:
    return CONFIG_DIR / f"{environment}.json"


def pack_environment(environ: Mapping[str, str] = os.environ) -> str | None:
    """The environment of the stack the pack judges: its `llm-serving:environment` config, which
    the Pulumi CLI hands a policy pack as JSON in PULUMI_CONFIG (pulumi/pulumi
    sdk/go/common/resource/plugin/analyzer_plugin.go, constructEnv). None when it is not set."""
    try:
        config = json.loads(environ.get("PULUMI_CONFIG") or "{}")
    except json.JSONDecodeError:
        return None
    value = config.get(ENVIRONMENT_CONFIG_KEY) if isinstance(config, dict) else None
    return value if isinstance(value, str) and value else None


def levels(environment: str) -> dict[str, EnforcementLevel]:
    """Each policy's level in an environment: its entry in config/<environment>.json, else the
    file's "all", else mandatory. Same precedence as the Pulumi CLI's --policy-pack-config."""
    path = config_file(environment)
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
