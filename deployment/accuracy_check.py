"""The accuracy gate's verdict: lm-eval's scores against the BF16 baseline.

This file runs as it is inside the gate's Job (shipped in a ConfigMap, standard library only)
and is imported by the tests, so what is tested is what runs:

    python accuracy_check.py GATE_JSON RESULTS_DIR

GATE_JSON: {"max_drop": 0.01, "tasks": {"gsm8k": {"metric": "exact_match,strict-match",
"baseline": 0.93}, ...}}. RESULTS_DIR: lm-eval's `--output_path` (it writes
`<model>/results_<time>.json` there; the newest one is read). Exit code 0 when every task is
within `max_drop` of its baseline, 1 when one is not or has no score; the verdict table goes to
stdout and to the container's termination message, where `kubectl describe` shows it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

TERMINATION_LOG = "/dev/termination-log"


def judge(results: dict, gate: dict) -> tuple[bool, list[str]]:
    """(passed, lines): one line per task with its score, baseline and drop."""
    scores = results.get("results", {})
    max_drop = float(gate["max_drop"])
    passed, lines = True, []
    for task, spec in gate["tasks"].items():
        metric, baseline = spec["metric"], float(spec["baseline"])
        value = scores.get(task, {}).get(metric)
        if value is None:
            passed = False
            lines.append(f"FAIL {task}: no '{metric}' score in the results")
            continue
        drop = baseline - float(value)
        ok = drop <= max_drop + 1e-12
        passed = passed and ok
        stderr = scores[task].get(metric.replace(",", "_stderr,", 1))
        err = f" +/- {float(stderr):.4f}" if isinstance(stderr, (int, float)) else ""
        lines.append(f"{'PASS' if ok else 'FAIL'} {task}: {metric} {float(value):.4f}{err}, BF16 baseline "
                     f"{baseline:.4f}, drop {drop:+.4f} (allowed {max_drop:.4f})")
    return passed, lines


def newest_results(results_dir: Path) -> dict:
    files = sorted(results_dir.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no lm-eval results_*.json under {results_dir}")
    return json.loads(files[-1].read_text())


def main(argv: list[str]) -> int:
    gate = json.loads(Path(argv[1]).read_text())
    try:
        passed, lines = judge(newest_results(Path(argv[2])), gate)
    except FileNotFoundError as exc:
        passed, lines = False, [f"FAIL {exc}"]
    text = "\n".join(["FP8 accuracy gate: " + ("passed" if passed else "FAILED"), *lines])
    print(text)
    log = Path(TERMINATION_LOG)
    if log.exists():                          # the kubelet mounts it in a container; not elsewhere
        log.write_text(text[-4000:])          # and keeps at most 4 KiB of it
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
