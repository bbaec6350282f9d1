"""Helpers the tests share (plain functions, not fixtures): the committed stacks' config, with
overrides, and the plan the settings give."""
from __future__ import annotations

import copy


def stack_config(stack: str) -> dict:
    """A fresh copy of stacks/Pulumi.STACK.yaml's `config:` map."""
    from settings import read_stack_config, stack_file
    return copy.deepcopy(read_stack_config(stack_file(stack)))


def with_overrides(raw: dict, overrides: dict | None) -> dict:
    """`raw` with whole `llm-serving:` keys (or namespaced keys such as `aws:region`) replaced;
    None removes a key."""
    for key, value in (overrides or {}).items():
        full = key if ":" in key else f"llm-serving:{key}"
        if value is None:
            raw.pop(full, None)
        else:
            raw[full] = value
    return raw


def plan_for(stack: str, overrides: dict | None = None):
    """(settings, plan) of a committed stack with overrides, as the program builds them."""
    from settings import settings_from_config
    from sizing.planner import plan

    settings = settings_from_config(stack, with_overrides(stack_config(stack), overrides))
    return settings, plan(settings.plan_request())
