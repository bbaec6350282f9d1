"""`llmserve render` hook: DIR/prometheus/rules.yaml and DIR/grafana/*.json.

Both are taken from the recorded program (the PrometheusRule and the dashboard ConfigMap that
`components/monitoring.py` creates), so the files are exactly what the stack deploys:
`promtool check rules DIR/prometheus/rules.yaml` checks the deployed rules.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from llmserve.render_cmd import RenderContext, plain, render_hook

from .dashboard import dashboard_json
from .rules import render_rule_file

PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DASHBOARD_LABEL = "grafana_dashboard"


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)          # a stale file from an earlier render would mislead
    folder.mkdir(parents=True)
    return folder


@render_hook
def monitoring_files(ctx: RenderContext) -> list[Path]:
    rules = [plain(r.inputs) for r in ctx.recording.resources if r.type == PROMETHEUS_RULE]
    boards = [plain(r.inputs) for r in ctx.recording.resources
              if r.type == CONFIG_MAP and DASHBOARD_LABEL in ((r.inputs.get("metadata") or {}).get("labels") or {})]
    written: list[Path] = []
    if rules:
        path = _fresh(ctx.out / "prometheus") / "rules.yaml"
        path.write_text(render_rule_file([g for rule in rules for g in rule["spec"]["groups"]]))
        written.append(path)
    if boards:
        folder = _fresh(ctx.out / "grafana")
        for board in boards:
            for key, text in sorted(board["data"].items()):
                path = folder / key
                path.write_text(dashboard_json(json.loads(text)))
                written.append(path)
    return written
