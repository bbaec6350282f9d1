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


def on_real_engine() -> bool:
    """False under Pulumi's mocks (the offline preview, render and the tests run the program through
    `offline/engine.py`, which calls `pulumi.runtime.set_mocks`; that installs a `MockEngine`, pulumi
    3.272.0 `sdk/python/lib/pulumi/runtime/mocks.py`), True under `pulumi preview`/`pulumi up`."""
    from pulumi.runtime.mocks import MockEngine
    from pulumi.runtime.settings import get_engine

    return not isinstance(get_engine(), MockEngine)


def refuse_example_values(settings: StackSettings) -> None:
    """On a real engine, stop before anything is registered when the stack still holds the committed
    example values (settings/examples.py), one line per key; offline they are listed, not refused."""
    from .examples import example_values

    found = example_values(settings)
    if found and on_real_engine():
        raise pulumi.RunError("example values in the stack config; replace each before a real deploy:\n"
                              + "\n".join(v.line for v in found))


def secret(name: str) -> pulumi.Output[str]:
    return pulumi.Config(PROJECT).require_secret(name)
