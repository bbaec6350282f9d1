"""Run the pack's policies (`policies/`) on a recorded resource graph, without the Pulumi CLI.

`evaluate(recording, environment)` hands the very policy functions of the pack the arguments the
CLI's analyzer would: resource policies get each resource's inputs (`ResourceValidationArgs`),
stack policies get every resource's outputs as `PolicyResource`s linked by parent, dependencies
and property dependencies (`StackValidationArgs`). Props go through the same steps as in the
analyzer: secrets unwrapped, unknown values behind `unknown_checking_proxy`. Levels come from
the same files as `--policy-pack-config` (config/<environment>.json).
"""
from __future__ import annotations

from inspect import isawaitable
from typing import Any

from pulumi_policy import (
    EnforcementLevel, PolicyCustomTimeouts, PolicyProviderResource, PolicyResource, PolicyResourceOptions,
    ResourceValidationArgs, StackValidationArgs,
)
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from policies.registry import RULES, levels

from .values import unwrap


def _props(value: dict) -> Any:
    return unknown_checking_proxy(unwrap(dict(value or {})))


def _options(reg) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[],
        parent=reg.parent or None)


def _providers(recording) -> dict[str, PolicyProviderResource]:
    """Provider references ("<urn>::<id>") of the recording, as the analyzer describes them."""
    out = {}
    for reg in recording.resources:
        if reg.type.startswith("pulumi:providers:"):
            provider = PolicyProviderResource(reg.type, _props(reg.inputs), reg.urn, reg.name)
            out[f"{reg.urn}::{reg.id}"] = provider
    return out


def stack_resources(recording, providers: dict[str, PolicyProviderResource] | None = None) -> list[PolicyResource]:
    """The recorded graph as the stack policies see it (outputs, parents, dependencies)."""
    providers = _providers(recording) if providers is None else providers
    by_urn: dict[str, PolicyResource] = {}
    for reg in recording.resources:
        by_urn[reg.urn] = PolicyResource(
            reg.type, _props(reg.outputs or reg.inputs), reg.urn, reg.name, _options(reg),
            providers.get(reg.provider), None, [], {})
    for reg in recording.resources:
        res = by_urn[reg.urn]
        res.parent = by_urn.get(reg.parent)
        res.dependencies = [by_urn[u] for u in reg.dependencies if u in by_urn]
        res.property_dependencies = {k: [by_urn[u] for u in urns if u in by_urn]
                                     for k, urns in reg.property_dependencies.items()}
    return list(by_urn.values())


def _run(validate, args) -> list[tuple[str | None, str]]:
    """Call one policy's validate; the (urn, message) pairs it reported. Raises UnknownValueError."""
    from pulumi_policy.policy import _NotApplicableError

    found: list[tuple[str | None, str]] = []
    try:
        result = validate(args, lambda message, urn=None: found.append((urn, message)))
        if isawaitable(result):
            import asyncio
            asyncio.run(result)
    except _NotApplicableError:
        pass
    return found


def evaluate(recording, environment: str) -> list[dict]:
    """Every violation, in pack order: {"policy", "level" ('mandatory'|'advisory'), "urn", "message"}.

    A policy that meets an unknown value reports, as the CLI does, an advisory line saying it
    cannot run during preview.
    """
    level_of = levels(environment)
    providers = _providers(recording)
    stack: list[PolicyResource] | None = None
    # Each resource's props unwrapped and proxied once for every resource policy (the analyzer
    # deserializes them again per policy; the policies only read them). Most of a policy run.
    inputs: dict[str, Any] = {}
    out: list[dict] = []
    for rule in RULES:
        level = level_of[rule.name]
        if level == EnforcementLevel.DISABLED:
            continue
        shown = "advisory" if level == EnforcementLevel.ADVISORY else "mandatory"

        def unknown(exc: UnknownValueError, urn: str) -> dict:
            return {"policy": rule.name, "level": "advisory", "urn": urn,
                    "message": f"can't run during preview: {exc.message}"}

        if rule.scope == "resource":
            for reg in recording.resources:
                props = inputs.get(reg.urn)
                if props is None:
                    props = inputs[reg.urn] = _props(reg.inputs)
                args = ResourceValidationArgs(reg.type, props, reg.urn, reg.name, _options(reg),
                                              providers.get(reg.provider))
                try:
                    found = _run(rule.validate, args)
                except UnknownValueError as exc:
                    out.append(unknown(exc, reg.urn))
                    continue
                # A resource policy's violations are about the resource it judged.
                out.extend({"policy": rule.name, "level": shown, "urn": reg.urn, "message": m} for _, m in found)
        else:
            stack = stack if stack is not None else stack_resources(recording, providers)
            try:
                found = _run(rule.validate, StackValidationArgs(stack))
            except UnknownValueError as exc:
                out.append(unknown(exc, ""))
                continue
            out.extend({"policy": rule.name, "level": shown, "urn": urn or "", "message": m} for urn, m in found)
    return out
