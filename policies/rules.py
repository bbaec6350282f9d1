"""A rule: one validation function with its name, description, severity and remediation.

Each policy module keeps a `RULES` list filled by the `resource_rule` / `stack_rule` decorators,
so a rule's metadata sits next to its code; `registry` turns the rules into pulumi_policy
policies. Resource rules see one resource's inputs; stack rules see every resource's outputs
with parents, dependencies and property dependencies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from pulumi_policy import Severity

Scope = Literal["resource", "stack"]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    severity: Severity
    remediation: str
    scope: Scope
    validate: Callable
    tags: tuple[str, ...] = ()


def _decorator(rules: list[Rule], scope: Scope, name: str, description: str, severity: Severity,
               remediation: str, tags: tuple[str, ...]):
    def register(fn: Callable) -> Callable:
        if any(r.name == name for r in rules):
            raise ValueError(f"two rules named {name}")
        rules.append(Rule(name, description, severity, remediation, scope, fn, tags))
        return fn
    return register


def resource_rule(rules: list[Rule], name: str, *, description: str, severity: Severity,
                  remediation: str, tags: tuple[str, ...] = ()):
    return _decorator(rules, "resource", name, description, severity, remediation, tags)


def stack_rule(rules: list[Rule], name: str, *, description: str, severity: Severity,
               remediation: str, tags: tuple[str, ...] = ()):
    return _decorator(rules, "stack", name, description, severity, remediation, tags)
