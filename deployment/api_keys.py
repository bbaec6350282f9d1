"""The `apiKeys` secret, read where it is used: JSON {name: key}, names = gateway.apiKeyNames.

Errors here run inside Pulumi's apply on a secret value, so they never quote it: not a key, not
a name found in it (a swapped or malformed value could put a key where a name belongs). They
name the configured key names (from the stack file, not secret) and counts only.
"""
from __future__ import annotations

import hashlib
import hmac
import json


SET_IT = "set it with `pulumi config set --secret apiKeys '{\"<name>\": \"<key>\", ...}'`"


def parse_api_keys(text: str, names: tuple[str, ...]) -> dict[str, str]:
    """{name: key} for exactly the configured names; a key without a rule would be unmetered."""
    try:
        keys = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError(f"secret apiKeys is not JSON; {SET_IT}") from None
    if not isinstance(keys, dict) or not all(isinstance(v, str) and v for v in keys.values()):
        raise ValueError(f"secret apiKeys is not a JSON object of non-empty string keys; {SET_IT}") from None
    missing = [n for n in names if n not in keys]
    extra = sum(1 for k in keys if k not in names)
    if missing or extra:
        parts = ([f"has no key for {', '.join(missing)}"] if missing else []) + \
                ([f"holds {extra} entr{'y' if extra == 1 else 'ies'} not in gateway.apiKeyNames"] if extra else [])
        raise ValueError(f"secret apiKeys {' and '.join(parts)}; make its names exactly gateway.apiKeyNames "
                         f"({', '.join(names)})")
    return {name: keys[name] for name in names}


def client_key(text: str, name: str) -> str:
    """One configured key as a client sends it (the jobs' key), without quoting the secret on error."""
    try:
        keys = json.loads(text)
    except (TypeError, ValueError):
        raise ValueError(f"secret apiKeys is not JSON; {SET_IT}") from None
    value = keys.get(name) if isinstance(keys, dict) else None
    if not isinstance(value, str) or not value:
        raise ValueError(f"secret apiKeys has no key for {name}; {SET_IT}")
    return bearer_stripped(value)


def bearer_stripped(value: str) -> str:
    """The key as a client sends it: the secret may hold it with its "Bearer " prefix."""
    return value[len("Bearer "):] if value.startswith("Bearer ") else value


def gate_key(text: str) -> str:
    """The accuracy gate's own key, derived from the apiKeys secret (HMAC-SHA256), so it is as hard to
    guess as the tenants' keys, needs no secret of its own, and changes when they are rotated."""
    return hmac.new(text.encode(), b"llm-serving/accuracy-gate", hashlib.sha256).hexdigest()
