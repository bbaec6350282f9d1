"""Read the stack's settings from the running Pulumi program's config (imports pulumi)."""
from __future__ import annotations

import json

import pulumi

from conventions import PROJECT

from .load import REGION_KEY, settings_from_config
from .schema import ALL_SECRET_KEYS, StackSettings


def settings_from_pulumi() -> StackSettings:
    """The same validation as `llmserve size --stack`, fed from `pulumi.Config`.

    Secret keys are checked for presence only; their values are read where they are used,
    with `require_secret`, so they never leave Pulumi's secret wrapping.
    """
    cfg = pulumi.Config(PROJECT)
    raw: dict = {}
    region = pulumi.Config("aws").get("region")
    if region is not None:
        raw[REGION_KEY] = region
    for name in StackSettings.model_fields:
        if name in ("stack", "region"):
            continue
        text = cfg.get(name)
        if text is None:
            continue
        try:   # objects, lists and numbers arrive as JSON text; plain strings as they are
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if name in ("environment", "kubernetesVersion"):
            value = text
        raw[f"{PROJECT}:{name}"] = value
    for name in ALL_SECRET_KEYS:
        if cfg.get(name) is not None:
            raw[f"{PROJECT}:{name}"] = {"secure": "(from pulumi config)"}
    return settings_from_config(pulumi.get_stack(), raw)


def missing_secrets_message(stack: str, missing: list[str]) -> str:
    """One line: which secrets are not set and the command that sets each."""
    keys = ", ".join(f"{PROJECT}:{k}" for k in missing)
    return (f"secret config not set: {keys}; set each with `pulumi config set --secret <key> <value> "
            f"--stack {stack}` (e.g. `pulumi config set --secret {missing[0]} ... --stack {stack}`)")


def require_secrets(settings: StackSettings) -> None:
    """Fail before anything is registered when a secret the program reads is not set, with one
    line naming the command, instead of Pulumi's multi-line error at the first use."""
    cfg = pulumi.Config(PROJECT)
    missing = [k for k in settings.required_secrets if cfg.get_secret(k) is None]
    if missing:
        raise pulumi.RunError(missing_secrets_message(settings.stack, missing))


def secret(name: str) -> pulumi.Output[str]:
    return pulumi.Config(PROJECT).require_secret(name)
