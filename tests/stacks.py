"""Helpers the tests share (plain functions, not fixtures): the committed stacks' config, with
overrides, and the plan the settings give."""
from __future__ import annotations

import copy
import functools


def stack_config(stack: str) -> dict:
    """A fresh copy of stacks/Pulumi.STACK.yaml's `config:` map."""
    from settings import read_stack_config, stack_file
    path = stack_file(stack)
    try:
        stat = path.stat()
    except OSError:
        return read_stack_config(path)      # its error, as before
    return copy.deepcopy(_read(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=None)
def _read(path, mtime_ns: int, size: int) -> dict:
    """Each stack file read once per process (per version of it): the tests ask for the committed
    stacks hundreds of times, and the safe YAML loader costs far more than a copy. Callers get
    copies; the cached map is never changed."""
    from settings import read_stack_config
    return read_stack_config(path)


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


def vllm_args_of(plan, shutdown_timeout: int = 30, checkpoint: str | None = None) -> list[str]:
    """The serving container's arguments for a plan, as the deployment launches it."""
    from deployment.engine import VllmLaunch, vllm_args
    return vllm_args(VllmLaunch(plan.engine_args, model=checkpoint or plan.checkpoint,
                                served_model_name=plan.request.model, shutdown_timeout=shutdown_timeout))
