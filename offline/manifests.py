"""What the recorded program would apply, as files: every Kubernetes object as YAML under
DIR/manifests/ (one file per object, `<namespace>_<kind>_<name>.yaml`, `cluster_` for
cluster-scoped objects) and every Helm release (chart, version, values) under DIR/helm/.
Secret values never reach disk: each becomes "[secret]".
"""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from inputs.outputs import write_synced

from .engine import PLACEHOLDER_PREFIX
from .values import manifest_value, scrubbed

NOT_OBJECTS = ("kubernetes:helm.sh/", "kubernetes:yaml/")   # installers, not Kubernetes objects


def kubernetes_objects(recording) -> list[dict]:
    """Every Kubernetes object the program registers, as it would be applied."""
    objects = []
    for r in recording.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith(NOT_OBJECTS):
            continue
        obj = scrubbed(manifest_value(r.inputs), PLACEHOLDER_PREFIX)    # an unwrapped secret never reaches disk
        metadata = obj.pop("metadata", {})
        if "name" not in metadata:      # auto-named: Pulumi's name (a real apply adds a random suffix)
            metadata = {**metadata, "name": (r.outputs.get("metadata") or {}).get("name", r.name)}
        head = {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), "metadata": metadata}
        objects.append({**head, **obj})
    return objects


def manifest_name(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'cluster'}_{obj['kind'].lower()}_{meta['name']}.yaml"


def helm_releases(recording) -> list[dict]:
    return [manifest_value(r.inputs) for r in recording.resources if r.type.startswith("kubernetes:helm.sh/")]


def fresh_folder(folder: Path) -> Path:
    """An empty `folder`: a stale file from an earlier render would mislead."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def write_each(folder: Path, items: list[dict], namer) -> list[Path]:
    fresh_folder(folder)
    written: list[Path] = []
    for item in items:
        path = folder / namer(item)
        if path in written:
            raise ValueError(f"two objects render to {folder.name}/{path.name}")
        write_synced(path, yaml.safe_dump(item, sort_keys=False, default_flow_style=False))
        written.append(path)
    return written
