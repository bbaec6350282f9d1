"""Accuracy benchmark: the engine against every measured row it can express.

    .venv/bin/python bench/bench_accuracy.py                    # the rows in sizing/data: the calibrated
                                                                # profile on the offline runs it was fitted
                                                                # to, the default on those and on the MoE runs
    .venv/bin/python bench/bench_accuracy.py --csv OTHER.csv    # held-out rows, same columns as
                                                                # ../shared/reference/calibration_measurements.csv

A row is expressible when its model, GPU and precisions are in the catalog and its prompt and
output lengths are fixed numbers. Its load is read as: offline / max throughput -> the closed
loop with every KV slot busy; a concurrency (closed loop, `load_type` naming clients or
concurrency) -> that many clients per replica; a Poisson or QPS load -> the open loop at that
rate per replica. Predicted: mean TTFT, mean TPOT (ITL when only that is given), output tokens/s
of the TP group. Prints a Markdown table of per-row errors and the median absolute error per
figure (targets: TPOT and tokens/s <= 5%, TTFT <= 15%).
"""
from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sizing.catalog import load_catalog  # noqa: E402
from sizing.memory import Shape  # noqa: E402
from sizing.model import ReplicaModel  # noqa: E402
from sizing.planner import PlanRequest  # noqa: E402
from sizing.profiles import get_profile  # noqa: E402
from sizing.vllm_engine import batch_defaults  # noqa: E402
from sizing.workload import Workload  # noqa: E402

FIGURES = ("ttft_ms", "tpot_ms", "output_tok_s")
TARGETS = {"ttft_ms": 0.15, "tpot_ms": 0.05, "output_tok_s": 0.05}     # median absolute error


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    gpu: str
    weights: str
    kv_dtype: str
    tp: int
    input_tokens: int
    output_tokens: int
    load: str               # offline | clients | qps
    load_value: float
    measured: dict          # figure -> value (absent when not measured)
    engine: str = ""
    layout: str = "tp"      # tp, tp-ep (TP + expert parallel) or dp-ep


def _model(text: str) -> str | None:
    t = text.lower()
    for key, ident in (("405b", "llama-3.1-405b"), ("70b", "llama-3-70b"), ("8x7b", "mixtral-8x7b"), ("8b", "llama-3-8b")):
        if key in t:
            return ident
    return None


def _gpu(text: str) -> str | None:
    t = text.lower()
    return next((g for g in ("h100-sxm", "h200", "b200", "a100-40gb", "l40s") if g.split("-")[0] in t), None)


def _int(text: str) -> int | None:
    return int(text) if text and text.strip().isdigit() else None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_shared_format(path: Path) -> tuple[list[Row], list[str]]:
    """Rows in the shared file's columns; returns (expressible rows, why the others are not)."""
    rows, skipped = [], []
    with path.open() as fh:
        for r in csv.DictReader(fh):
            rid = r.get("id", "?")
            model, gpu = _model(r.get("model", "")), _gpu(r.get("gpu", ""))
            tp, s_in, s_out = _int(r.get("tp", "")), _int(r.get("input_tokens", "")), _int(r.get("output_tokens", ""))
            if not (model and gpu and tp and s_in and s_out):
                skipped.append(f"{rid}: model, GPU, TP or fixed lengths not expressible")
                continue
            weights = "fp8" if "fp8" in r.get("precision_weights", "").lower() else "bf16"
            kv_text = r.get("precision_kv", "").lower()
            kv = "fp8" if "fp8" in kv_text else "bf16" if ("bf16" in kv_text or "fp16" in kv_text) else weights
            load_type, load_value = r.get("load_type", "").lower(), r.get("load_value", "")
            per_gpu = "per-gpu" in r.get("notes", "").lower()
            measured = {}
            for fig, cols in (("ttft_ms", ("ttft_mean_ms",)), ("tpot_ms", ("tpot_mean_ms", "itl_mean_ms")),
                              ("output_tok_s", ("output_tok_s",))):
                value = next((v for v in (_float(r.get(c, "")) for c in cols) if v is not None), None)
                if value is not None:
                    measured[fig] = value * (tp if fig == "output_tok_s" and per_gpu else 1)
            replicas = _int(r.get("replicas", "")) or 1
            number = _float(re.sub(r"[^0-9.]", "", load_value.split(";")[0]) or "x")
            if "offline" in load_type or "max throughput" in load_type:
                load, value = "offline", 0.0
            elif ("concurren" in load_type or "client" in load_type or "closed" in load_type) and number:
                load, value = "clients", number / replicas
            elif ("poisson" in load_type or "qps" in load_type) and number:
                load, value = "qps", number / replicas
            else:
                skipped.append(f"{rid}: load '{load_type}' not expressible")
                continue
            if replicas > 1 and "output_tok_s" in measured:
                measured["output_tok_s"] /= replicas
            rows.append(Row(rid, model, gpu, weights, kv, tp, s_in, s_out, load, value, measured,
                            r.get("engine", "").lower()))
    return rows, skipped


def read_project_rows() -> list[Row]:
    """The offline rows the calibration uses (sizing/data/calibration_measurements.csv)."""
    from sizing.calibration import load_measurements
    # the engine from the row's source (they ran TensorRT-LLM): its KV reservation is the engine's
    return [Row(str(m.id), m.model, m.gpu, m.weights, m.kv_dtype, m.tp, m.input_tokens, m.output_tokens,
                "offline", 0.0, {"output_tok_s": m.output_tok_s}, m.source.lower()) for m in load_measurements()]


def read_published_rows(name: str, prefix: str, in_unit_test: str | None = None) -> list[Row]:
    """Published closed-loop runs in sizing/data/<name> (moe_measurements.csv's columns), as
    per-replica figures: TPOT and output tokens/s (a `total` throughput less its prompt share)."""
    path = ROOT / "sizing" / "data" / name
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    catalog, rows = load_catalog(), []
    for i, r in enumerate(csv.DictReader(lines), 1):
        if in_unit_test is not None and r.get("in_unit_test", "no") != in_unit_test:
            continue
        tp, s_in, s_out = int(r["tp"]), int(r["input_tokens"]), int(r["output_tokens"])
        tok_s = float(r["throughput_per_gpu"]) * tp
        if r["throughput_kind"] == "total":
            tok_s /= 1 + s_in / s_out
        rows.append(Row(f"{prefix}-{i}", r["model"], catalog.instance(r["instance"]).gpu.id, r["weights"], "bf16", tp,
                        s_in, s_out, "clients", float(r["concurrency"]),
                        {"tpot_ms": float(r["tpot_ms"]), "output_tok_s": tok_s}, r["engine"],
                        r.get("layout") or "tp"))
    return rows


def read_moe_rows() -> list[Row]:
    """The published MoE runs tests/test_model_catalog.py holds (moe_measurements.csv, in_unit_test=yes)."""
    return read_published_rows("moe_measurements.csv", "moe", "yes")


def read_moe_validation_rows() -> list[Row]:
    """The other published MoE runs (in_unit_test=no): a validation set, reported."""
    return read_published_rows("moe_measurements.csv", "moe", "no")


def read_dense_rows() -> list[Row]:
    """The published dense runs (sizing/data/dense_measurements.csv, when there is one)."""
    return read_published_rows("dense_measurements.csv", "dense")


def predict(row: Row, profile_name: str) -> dict:
    catalog = load_catalog()
    shape = Shape(catalog.model(row.model), catalog.node_for_gpu(row.gpu), row.tp, row.weights, row.kv_dtype,
                  row.layout)
    # The clients a closed loop runs (an MoE step reads the experts that batch touches).
    clients = max(1, round(row.load_value)) if row.load == "clients" else 1
    w = Workload(input_tokens=row.input_tokens, output_tokens=row.output_tokens, qps=None, concurrency=clients,
                 slo_statistic="mean")
    profile, batched = get_profile(profile_name), None
    if "vllm" in row.engine:       # the measured server ran with vLLM's defaults, not our plan's budget
        # What a vLLM 0.29.0 OpenAI server picks when not told (arg_utils.py get_batch_defaults).
        batched, seqs = batch_defaults(shape.instance.gpu)
        profile = replace(profile, max_num_seqs=seqs)
    elif "tensorrt" in row.engine or "trt" in row.engine:
        # TensorRT-LLM's default capacity scheduler reserves each request's whole KV up front.
        profile = replace(profile, kv_reservation="whole")
    rm = ReplicaModel(shape, w, profile, real=True, batched_tokens=batched)
    if row.load == "qps":
        p = rm.at(row.load_value)
        return {"ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "output_tok_s": row.load_value * row.output_tokens}
    clients = rm.memory.max_seqs if row.load == "offline" else max(1, round(row.load_value))
    p = rm.closed_point(clients)
    return {"ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "output_tok_s": p.qps * row.output_tokens}


def report(rows: list[Row], profile_name: str, targets: dict | None = None) -> tuple[str, bool]:
    targets = TARGETS if targets is None else targets
    lines = [f"| row | model | GPU | TP | in/out | load | {' | '.join(f'{f} measured / predicted (error)' for f in FIGURES)} |",
             "| --- | --- | --- | --- | --- | --- | " + " | ".join("---:" for _ in FIGURES) + " |"]
    errors: dict[str, list[float]] = {f: [] for f in FIGURES}
    for row in rows:
        pred = predict(row, profile_name)
        cells = []
        for f in FIGURES:
            if f not in row.measured:
                cells.append("not measured")
                continue
            err = pred[f] / row.measured[f] - 1
            errors[f].append(abs(err))
            cells.append(f"{row.measured[f]:,.1f} / {pred[f]:,.1f} ({err:+.1%})")
        load = row.load if row.load == "offline" else f"{row.load_value:g} {row.load}"
        lines.append(f"| {row.id} | {row.model} | {row.gpu} | {row.tp} | {row.input_tokens}/{row.output_tokens} | "
                     f"{load} | {' | '.join(cells)} |")
    verdicts = {f: statistics.median(v) <= targets[f] for f, v in errors.items() if v and f in targets}
    medians = ", ".join(f"{f} {statistics.median(v):.1%} over {len(v)} rows" + (
                        f" (target <= {targets[f]:.0%}: {'PASS' if verdicts[f] else 'FAIL'})" if f in targets
                        else " (reported)") if v else f"{f}: no measured rows" for f, v in errors.items())
    return ("\n".join(lines) + f"\n\nMedian absolute error (profile {profile_name}): {medians}.",
            all(verdicts.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="Rows in the shared file's columns (held-out measurements).")
    parser.add_argument("--profile", default=None, help="one profile (default: the sets below)")
    args = parser.parse_args()
    if args.csv:
        rows, skipped = read_shared_format(args.csv)
        if skipped:
            print(f"{len(skipped)} rows not expressible: " + "; ".join(skipped), file=sys.stderr)
        text, ok = report(rows, args.profile or DEFAULT_PROFILE)
        print(text)
        return 0 if ok else 1
    ok = True
    for title, rows, profile, targets in SETS:
        if args.profile and profile != args.profile:
            continue
        selected = rows()
        if not selected:            # a set whose file holds no rows yet (dense_measurements.csv)
            continue
        text, passed = report(selected, profile, targets)
        print(f"### {title}\n\n{text}\n")
        ok &= passed
    return 0 if ok else 1


DEFAULT_PROFILE = PlanRequest.__dataclass_fields__["profile"].default
# (title, rows, profile, targets on the median absolute error; a figure without one is reported)
SETS = (
    ("The calibrated profile on the 13 TensorRT-LLM throughput runs it was fitted to", read_project_rows,
     "calibrated", TARGETS),
    (f"The default profile ({DEFAULT_PROFILE}: per-operation tables, not fitted to these) on the same runs",
     read_project_rows, DEFAULT_PROFILE, {}),
    (f"The default profile ({DEFAULT_PROFILE}) on the published MoE runs the unit test holds (vLLM and SGLang, "
     "closed loop)", read_moe_rows, DEFAULT_PROFILE, {"tpot_ms": 0.25, "output_tok_s": 0.25}),
    (f"The default profile ({DEFAULT_PROFILE}) on the other published MoE runs (validation set: vLLM and SGLang, "
     "closed loop, layouts tp / tp-ep)", read_moe_validation_rows, DEFAULT_PROFILE, {}),
    (f"The default profile ({DEFAULT_PROFILE}) on the published dense runs (validation set: vLLM, closed loop)",
     read_dense_rows, DEFAULT_PROFILE, {}),
)


if __name__ == "__main__":
    sys.exit(main())
