"""`llmserve render` as a library call: the recorded program as the files it would apply.

DIR/manifests/ (every Kubernetes object) and DIR/helm/ (every Helm release) from
`offline.manifests`, DIR/prometheus/ and DIR/grafana/ from `offline.monitoring_files`. Every file is
written in a hidden folder under DIR first; each folder is swapped in only once all are complete
(`inputs.outputs`), so an interrupted or failed render keeps the previous one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from inputs.outputs import staging_folder, swap_folder

from .engine import leaked_secret_urns
from .manifests import write_each, helm_releases, kubernetes_objects, manifest_name
from .monitoring_files import write_monitoring_files


@dataclass
class RenderedFiles:
    manifests: list[Path] = field(default_factory=list)
    helm: list[Path] = field(default_factory=list)
    monitoring: list[Path] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)     # resources a secret reached unwrapped (written as [secret])


def render(recording, out: Path) -> RenderedFiles:
    """Write the recording's objects, Helm releases and monitoring files under `out`; the same
    net as preview's catches a secret that lost its wrapping (scrubbed in `kubernetes_objects`)."""
    with staging_folder(out) as staging:
        built = RenderedFiles(
            leaked=[u.rsplit("::", 1)[-1] for u in leaked_secret_urns(recording)],
            manifests=write_each(staging / "manifests", kubernetes_objects(recording), manifest_name),
            helm=write_each(staging / "helm", helm_releases(recording), lambda r: f"{r['namespace']}_{r['name']}.yaml"),
            monitoring=write_monitoring_files(recording, staging),
        )
        for folder in OUTPUT_FOLDERS:
            if (staging / folder).is_dir():
                swap_folder(staging / folder, out / folder)

    def moved(paths: list[Path]) -> list[Path]:
        return [out / p.relative_to(staging) for p in paths]
    return RenderedFiles(manifests=moved(built.manifests), helm=moved(built.helm),
                         monitoring=moved(built.monitoring), leaked=built.leaked)


OUTPUT_FOLDERS = ("manifests", "helm", "prometheus", "grafana")
