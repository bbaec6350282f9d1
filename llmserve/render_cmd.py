"""Render the stack's Kubernetes objects as YAML, offline: `llmserve render --stack NAME --out DIR`.

Builds the Pulumi program under mocks (no cloud, no cluster) and writes every Kubernetes object
it creates to DIR/manifests/, one file per object, named `<namespace>_<kind>_<name>.yaml`
(`cluster_` for cluster-scoped objects), every Helm release it installs (chart, version,
values) to DIR/helm/, the Prometheus rules to DIR/prometheus/rules.yaml and the Grafana
dashboards to DIR/grafana/. Secret values never reach disk: each becomes "[secret]".
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from . import options
from .errors import check_output_dir, fail


def render(
    stack: str = options.STACK,
    out_text: str = typer.Option(..., "--out", help="Output folder; manifests/, helm/, prometheus/ and grafana/ "
                                                      "under it are replaced (nothing else is touched)."),
    config: Optional[Path] = options.CONFIG,
) -> None:
    from offline.render import render as render_files
    from offline.stack import StackError, load_stack

    # A str, not a Path: typer turns '' into '.', which would fill the current folder unasked.
    if not out_text.strip():
        fail("--out: empty; give the folder to write, e.g. --out rendered")
    out = Path(out_text)
    check_output_dir("--out", out)
    try:
        resolved = out.resolve()
    except (OSError, RuntimeError) as exc:      # a symlink loop
        fail(f"--out: {out_text} cannot be resolved ({exc}); give a plain folder")
    if resolved == Path(resolved.anchor):
        fail(f"--out: {out_text} is the file system's root; give a folder of its own, e.g. --out rendered")
    try:
        files = render_files(load_stack(stack, config).record(), out)
    except StackError as exc:
        fail(str(exc))
    except OSError as exc:     # a folder that cannot be made or written (permissions, a read-only mount)
        fail(f"--out: cannot write {exc.filename or out}: {exc.strerror}; give a folder you can write")
    print(f"wrote {len(files.manifests)} Kubernetes objects to {out / 'manifests'}")
    print(f"wrote {len(files.helm)} Helm releases to {out / 'helm'}")
    if files.monitoring:
        print(f"wrote {len(files.monitoring)} more files (Prometheus rules, Grafana dashboards) under {out}")
    if files.leaked:        # preview's safety net: written as [secret], and the render fails so CI sees the bug
        print(f"error: a secret reaches {len(files.leaked)} resource(s) unwrapped (written as [secret]): "
              f"{', '.join(files.leaked)}; keep it a Pulumi secret Output", file=sys.stderr)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("render", help=__doc__.split("\n\n")[0])(render)
