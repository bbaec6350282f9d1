"""DIR/prometheus/rules.yaml and DIR/grafana/*.json, for `llmserve render`.

Both are taken from the recorded program (the PrometheusRule and the dashboard ConfigMap that
`components/monitoring.py` creates), so the files are exactly what the stack deploys:
`promtool check rules DIR/prometheus/rules.yaml` checks the deployed rules.
"""
from __future__ import annotations

import json
from pathlib import Path

from conventions import LABEL_GRAFANA_DASHBOARD
from inputs.outputs import write_synced
from observability.dashboard import dashboard_json
from observability.rules import render_rule_file

from .manifests import fresh_folder
from .values import manifest_value

PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def write_monitoring_files(recording, out: Path) -> list[Path]:
    rules = [manifest_value(r.inputs) for r in recording.resources if r.type == PROMETHEUS_RULE]
    boards = [manifest_value(r.inputs) for r in recording.resources
              if r.type == CONFIG_MAP and LABEL_GRAFANA_DASHBOARD in ((r.inputs.get("metadata") or {}).get("labels") or {})]
    written: list[Path] = []
    if rules:
        path = fresh_folder(out / "prometheus") / "rules.yaml"
        write_synced(path, render_rule_file([g for rule in rules for g in rule["spec"]["groups"]]))
        written.append(path)
    if boards:
        folder = fresh_folder(out / "grafana")
        for board in boards:
            for key, text in sorted(board["data"].items()):
                path = folder / key
                write_synced(path, dashboard_json(json.loads(text)))
                written.append(path)
    return written
