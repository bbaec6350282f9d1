"""Render the stack's Kubernetes objects as YAML, offline: `llmserve render --stack NAME --out DIR`.

Builds the Pulumi program under mocks (no cloud, no cluster) and writes every Kubernetes object
it creates to DIR/manifests/, one file per object, named `<namespace>_<kind>_<name>.yaml`
(`cluster_` for cluster-scoped objects), and every Helm release it installs (chart, version,
values) to DIR/helm/. Secret values never reach disk: each becomes "[secret]".

Other outputs plug in as render hooks: a function `hook(ctx: RenderContext) -> list[Path]`
decorated with `@render_hook`, in a module listed in `HOOK_MODULES` (imported when the command
runs). `ctx.recording` is the recorded program, `ctx.settings` and `ctx.plan` the stack's.
"""
from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer
import yaml

from .errors import check_output_dir, fail

NOT_OBJECTS = ("kubernetes:helm.sh/", "kubernetes:yaml/")   # installers, not Kubernetes objects
SECRET_TEXT = "[secret]"
# Modules that register more render hooks (e.g. Prometheus rules, Grafana dashboards).
HOOK_MODULES: tuple[str, ...] = (
    "observability.render",     # DIR/prometheus/rules.yaml, DIR/grafana/*.json (issue 5)
)


@dataclass
class RenderContext:
    stack: str
    out: Path
    recording: Any            # llmserve.engine.Recording
    settings: Any             # settings.StackSettings
    plan: Any                 # sizing.planner.Plan


RenderHook = Callable[[RenderContext], "list[Path]"]
RENDER_HOOKS: list[RenderHook] = []


def render_hook(fn: RenderHook) -> RenderHook:
    """Register `fn` to run after the manifests are written; it returns the paths it wrote."""
    RENDER_HOOKS.append(fn)
    return fn


# -- objects -----------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """A recorded input as a manifest value: secrets redacted (a secret map keeps its keys),
    whole floats back to integers (the engine hands every number over as a float), keys sorted."""
    from .engine import PLACEHOLDER_PREFIX, is_secret, unwrap

    if isinstance(value, str) and PLACEHOLDER_PREFIX in value:    # unwrapped by a bug: never to disk
        return SECRET_TEXT
    if is_secret(value):
        inner = unwrap(value)
        return {k: SECRET_TEXT for k in inner} if isinstance(inner, dict) else SECRET_TEXT
    if isinstance(value, dict):     # sorted: the same program renders byte-identical files
        return {k: plain(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def kubernetes_objects(recording) -> list[dict]:
    """Every Kubernetes object the program registers, as it would be applied."""
    objects = []
    for r in recording.resources:
        if not r.type.startswith("kubernetes:") or r.type.startswith(NOT_OBJECTS):
            continue
        obj = plain(r.inputs)
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
    return [plain(r.inputs) for r in recording.resources if r.type.startswith("kubernetes:helm.sh/")]


def _dump(path: Path, obj: dict) -> Path:
    path.write_text(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False))
    return path


def write_manifests(ctx: RenderContext) -> list[Path]:
    written = []
    for sub, items, namer in (("manifests", kubernetes_objects(ctx.recording), manifest_name),
                              ("helm", helm_releases(ctx.recording), lambda r: f"{r['namespace']}_{r['name']}.yaml")):
        folder = ctx.out / sub
        if folder.exists():
            shutil.rmtree(folder)       # stale objects from an earlier render would mislead
        folder.mkdir(parents=True)
        names = set()
        for item in items:
            name = namer(item)
            if name in names:
                raise ValueError(f"two objects render to {sub}/{name}")
            names.add(name)
            written.append(_dump(folder / name, item))
    return written


# -- command -----------------------------------------------------------------------------------
def render(
    stack: str = typer.Option(..., help="Stack name: reads stacks/Pulumi.STACK.yaml."),
    out: Path = typer.Option(..., help="Output folder; manifests/ and helm/ under it are replaced."),
    config: Optional[Path] = typer.Option(None, help="A stack file to read instead of stacks/Pulumi.STACK.yaml."),
) -> None:
    from settings import SettingsError, read_stack_config, settings_from_config, stack_file
    from sizing.model import SizingError
    from sizing.planner import plan as make_plan

    check_output_dir("--out", out)
    try:
        raw = read_stack_config(config or stack_file(stack))
        settings = settings_from_config(stack, raw)
        plan = make_plan(settings.plan_request())
    except SettingsError as exc:
        fail(f"--stack {stack}: " + "; ".join(exc.problems))
    except SizingError as exc:
        fail(f"--stack {stack}: no plan: {exc}")
    from .engine import ProgramError, build, plaintext_secrets

    try:
        recording = build(stack, raw)
    except ProgramError as exc:
        fail(f"--stack {stack}: {exc}")
    # The same net as preview's: a secret outside its wrapping is written as [secret] (plain()),
    # and the render fails so CI sees the bug.
    leaked = plaintext_secrets(recording)
    ctx = RenderContext(stack=stack, out=out, recording=recording, settings=settings, plan=plan)
    for module in HOOK_MODULES:
        __import__(module)
    try:
        written = write_manifests(ctx)
        for hook in RENDER_HOOKS:
            written += hook(ctx)
    except OSError as exc:     # a folder that cannot be made or written (permissions, a read-only mount)
        fail(f"--out: cannot write {exc.filename or out}: {exc.strerror}; give a folder you can write")
    manifests = sum(1 for p in written if p.parent.name == "manifests")
    helm = sum(1 for p in written if p.parent.name == "helm")
    print(f"wrote {manifests} Kubernetes objects to {out / 'manifests'}")
    print(f"wrote {helm} Helm releases to {out / 'helm'}")
    others = len(written) - manifests - helm
    if others:
        print(f"wrote {others} more files (render hooks) under {out}")
    if leaked:
        print(f"error: a secret reaches {len(leaked)} resource(s) unwrapped (written as [secret]): "
              f"{', '.join(u.rsplit('::', 1)[-1] for u in leaked)}; keep it a Pulumi secret Output", file=sys.stderr)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("render", help=__doc__.split("\n\n")[0])(render)
