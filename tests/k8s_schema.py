"""Validate rendered Kubernetes objects offline, strictly.

- Built-in kinds: `kubernetes-validate` against the schema of the cluster's Kubernetes version.
- CRD-backed kinds: the `openAPIV3Schema` of the upstream CRD that `scripts/fetch-upstream` put
  in `.upstream/crds/` (or `$LLM_SERVING_CRDS`), with `additionalProperties: false` added in
  memory to every object node that lists `properties` and does not preserve unknown fields, so
  a misspelt field fails.
"""
from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = Path(os.environ.get("LLM_SERVING_CRDS", ROOT / ".upstream" / "crds"))


class ValidationFailed(ValueError):
    pass


class CrdMissing(ValidationFailed):
    """A kind that is neither built in nor backed by a fetched CRD."""


@lru_cache(maxsize=1)
def crd_index() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict openAPIV3Schema, for every CRD file under CRD_DIR."""
    if not CRD_DIR.exists():
        raise FileNotFoundError(f"CRD folder not found at {CRD_DIR}; run scripts/fetch-upstream")
    index = {}
    for path in sorted(CRD_DIR.rglob("*.yaml")):
        doc = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
        for version in doc["spec"]["versions"]:
            schema = version.get("schema", {}).get("openAPIV3Schema")
            if schema:
                index[(f"{group}/{version['name']}", kind)] = _strict(copy.deepcopy(schema))
    return index


def _strict(node):
    """Add additionalProperties: false where the API server would reject unknown fields."""
    if isinstance(node, dict):
        if node.get("pattern") == "^(?i)(abort|warn)?$":   # RE2-only inline flag (see crds/README)
            node["pattern"] = "(?i)^(abort|warn)?$"
        props = node.get("properties")
        if isinstance(props, dict):
            for sub in props.values():     # walk property schemas, not property names
                _strict(sub)
            if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
                node["additionalProperties"] = False
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), dict):
                _strict(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []) or []:
                _strict(sub)
    return node


def is_custom(obj: dict) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in crd_index()


def validate_custom(obj: dict) -> None:
    import jsonschema

    schema = crd_index().get((obj.get("apiVersion"), obj.get("kind")))
    if schema is None:
        raise ValidationFailed(f"no CRD for {obj.get('apiVersion')} {obj.get('kind')} under {CRD_DIR}")
    body = {k: v for k, v in obj.items()}
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path))
    if errors:
        name = (obj.get("metadata") or {}).get("name", "?")
        lines = [f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}" for e in errors[:10]]
        raise ValidationFailed(f"{obj['kind']}/{name}: " + "; ".join(lines))


def validate_builtin(obj: dict, kubernetes_version: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        raise CrdMissing(f"{obj.get('apiVersion')} {obj.get('kind')}: not a built-in kind and no CRD under "
                         f"{CRD_DIR}; run scripts/fetch-upstream") from None
    except kubernetes_validate.ValidationError as exc:
        name = (obj.get("metadata") or {}).get("name", "?")
        raise ValidationFailed(f"{obj.get('kind')}/{name}: {exc.message} at {'.'.join(map(str, exc.path))}") from None


def validate(obj: dict, kubernetes_version: str) -> None:
    """Validate one object: CRD-backed kinds against their CRD, the rest against Kubernetes."""
    if is_custom(obj):
        validate_custom(obj)
    else:
        validate_builtin(obj, kubernetes_version)
