"""One walk over recorded values: how a secret is recognised, and what each reader makes of it.

A recorded value is plain JSON-like data (dicts, lists, strings, numbers) in which a secret is a
wrapped dict. Every reader of recordings (the preview's JSON, the manifests, the policy run, the
tests) needs the same walk and differs only in what it does with a secret and with a leaf, so
each is one call of `walk`.
"""
from __future__ import annotations

from typing import Any, Callable

SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"     # Pulumi's secret signature key
SIG_KEY = "4dabf18193072939515e22adb298388d"        # the key that carries it in deserialized inputs
SECRET_TEXT = "[secret]"


def _same(value: Any) -> Any:
    return value


def is_secret(value: Any) -> bool:
    """A secret as recorded: `rpc.deserialize_properties` wraps one as {SIG_KEY: SECRET_SIG, "value": ...}
    (resource inputs); the engine wraps a secret stack output as {SECRET_SIG: SECRET_SIG, "value": ...}."""
    return isinstance(value, dict) and SECRET_SIG in (value.get(SIG_KEY), value.get(SECRET_SIG))


def wrap_secret(value: Any) -> dict:
    """A value marked secret the way the engine records a secret output."""
    return {SECRET_SIG: SECRET_SIG, "value": value}


def walk(value: Any, *, secret: Callable[[Any], Any] | None = None, leaf: Callable[[Any], Any] = _same,
         mapping: Callable[[dict], Any] = _same, sequence: Callable[[list], Any] = _same,
         sort_keys: bool = False) -> Any:
    """Rebuild `value` bottom-up: dicts through `mapping`, lists and tuples (as lists) through
    `sequence`, other values through `leaf`, and a secret through `secret(its plain value)`.

    `secret=None` unwraps a secret and walks on into its value (never print such a result).
    `sort_keys` orders dict keys, so the same program gives byte-identical files.
    """
    def go(v: Any) -> Any:
        if is_secret(v):
            return go(v.get("value")) if secret is None else secret(unwrap(v.get("value")))
        if isinstance(v, dict):
            return mapping({k: go(v[k]) for k in (sorted(v) if sort_keys else v)})
        if isinstance(v, (list, tuple)):
            return sequence([go(x) for x in v])
        return leaf(v)
    return go(value)


def redacted(value: Any) -> Any:
    """A copy with every secret replaced by '[secret]'."""
    return walk(value, secret=lambda _: SECRET_TEXT)


def unwrap(value: Any) -> Any:
    """A copy with secrets replaced by their plain values, as the policy analyzer sees them
    (tests and the policy run only: never print this)."""
    return walk(value)


def _whole_floats_as_ints(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _secret_shape(plain: Any) -> Any:
    """A redacted secret that keeps its keys (a map of API keys shows which keys exist)."""
    return {k: SECRET_TEXT for k in plain} if isinstance(plain, dict) else SECRET_TEXT


def manifest_value(value: Any) -> Any:
    """A recorded input as a manifest value: secrets redacted (a secret map keeps its keys), whole
    floats back to integers (the engine hands every number over as a float), keys sorted."""
    return walk(value, secret=_secret_shape, leaf=_whole_floats_as_ints, sort_keys=True)


def scrubbed(value: Any, marker: str) -> Any:
    """A copy with every string that contains `marker` (a secret that lost its wrapping) as '[secret]'."""
    return walk(value, secret=lambda _: SECRET_TEXT,
                leaf=lambda v: SECRET_TEXT if isinstance(v, str) and marker in v else v)
