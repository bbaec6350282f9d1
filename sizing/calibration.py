"""Fit the efficiency factors (MFU, real-step factor) to published measurements.

Data: `data/calibration_measurements.csv`, the numeric rows of
../shared/reference/calibration_measurements.csv with how each is read (per TP group, KV dtype
assumed, used or not and why). Rows with variable lengths (MLPerf OpenOrca: input not stated)
or static batching are kept for the record and not fitted.

Each used row is an offline max-throughput run: every KV slot busy, so it is the closed-loop
throughput with as many clients as sequences fit (`ReplicaModel.closed_loop`). The fit minimises
the squared log error over (mfu, real_factor) by a coarse grid then a fine one; deterministic.

    python -m sizing.calibration            # print the per-row error of both profiles
    python -m sizing.calibration --write    # refit and rewrite the calibrated profile
"""
from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass, replace

import yaml

from .catalog import DATA_DIR, Instance, load_catalog
from .model import ReplicaModel, Shape, Workload
from .profiles import Profile, get_profile

CALIBRATION_CSV = DATA_DIR / "calibration_measurements.csv"
PROFILES_YAML = DATA_DIR / "profiles.yaml"
ENGINE_MAX_SEQS = 1024      # a tuned engine's running-sequence cap (vLLM V1 and trtllm-bench size to the KV cache)


@dataclass(frozen=True)
class Measurement:
    id: int
    source: str
    model: str
    weights: str
    kv_dtype: str
    gpu: str
    tp: int
    input_tokens: int
    output_tokens: int
    output_tok_s: float
    used: bool
    note: str


def load_measurements(used_only: bool = True) -> list[Measurement]:
    rows = []
    with CALIBRATION_CSV.open() as fh:
        for r in csv.DictReader(fh):
            used = r["used"] == "yes"
            if used_only and not used:
                continue
            rows.append(Measurement(
                id=int(r["id"]), source=r["source"], model=r["model"], weights=r["weights"],
                kv_dtype=r["kv_dtype"], gpu=r["gpu"], tp=int(r["tp"] or 0),
                input_tokens=int(r["input_tokens"] or 0), output_tokens=int(r["output_tokens"] or 0),
                output_tok_s=float(r["output_tok_s"]), used=used, note=r["note"]))
    return rows


def _node(gpu_id: str) -> Instance:
    return load_catalog().node_for_gpu(gpu_id)


def predict(m: Measurement, profile: Profile) -> float:
    """Predicted output tokens/s of one TP group running flat out."""
    catalog = load_catalog()
    shape = Shape(catalog.model(m.model), _node(m.gpu), m.tp, m.weights, m.kv_dtype)
    w = Workload(input_tokens=m.input_tokens, output_tokens=m.output_tokens, qps=None, concurrency=1)
    rm = ReplicaModel(shape, w, profile, real=True)
    n = rm.memory.max_seqs
    if n < 1:
        return 0.0
    return rm.closed_loop(n)["output_tokens_per_s"]


def errors(profile: Profile, rows: list[Measurement] | None = None) -> list[tuple[Measurement, float, float]]:
    """(row, predicted tok/s, relative error) per row."""
    rows = rows if rows is not None else load_measurements()
    out = []
    for m in rows:
        p = predict(m, profile)
        out.append((m, p, p / m.output_tok_s - 1))
    return out


def _loss(profile: Profile, rows: list[Measurement]) -> float:
    total = 0.0
    for m in rows:
        p = predict(m, profile)
        total += math.log(max(p, 1e-9) / m.output_tok_s) ** 2
    return total


def fit(base: Profile | None = None) -> tuple[Profile, float]:
    """Grid-search mfu and real_factor; returns the fitted profile and its RMS log error."""
    rows = load_measurements()
    base = base or replace(get_profile("reference"), name="calibrated", max_num_seqs=ENGINE_MAX_SEQS)
    best = None
    grid = [(mfu / 100, rf / 100) for mfu in range(20, 96, 5) for rf in range(50, 301, 10)]
    for step in (None, (0.01, 0.02)):
        if step is not None:
            m0, r0 = best[1].mfu, best[1].real_factor
            grid = [(round(m0 + i * step[0], 4), round(r0 + j * step[1], 4))
                    for i in range(-5, 6) for j in range(-5, 6)
                    if 0.05 <= m0 + i * step[0] <= 1.0 and r0 + j * step[1] >= 0.3]
        for mfu, rf in grid:
            cand = replace(base, mfu=mfu, real_factor=rf)
            loss = _loss(cand, rows)
            if best is None or loss < best[0]:
                best = (loss, cand)
    loss, profile = best
    return profile, math.sqrt(loss / len(rows))


def write_profile(profile: Profile, rms_log_error: float) -> None:
    doc = yaml.safe_load(PROFILES_YAML.read_text())
    doc["profiles"]["calibrated"] = {
        "description": (f"Fitted to {len(load_measurements())} published TensorRT-LLM throughput runs "
                        f"(sizing/data/calibration_measurements.csv); RMS log error {rms_log_error:.3f}."),
        "mfu": profile.mfu, "real_factor": profile.real_factor,
        "gpu_memory_utilization": profile.gpu_memory_utilization,
        "runtime_overhead_gb": profile.runtime_overhead_gb, "max_num_seqs": profile.max_num_seqs,
        "comm_baseline_link": profile.comm_baseline_link,
    }
    header = "# Efficiency profiles. `calibrated` is rewritten by `python -m sizing.calibration --write`.\n"
    PROFILES_YAML.write_text(header + yaml.safe_dump(doc, sort_keys=False))


def error_table() -> str:
    """Markdown: per-row error of the reference and calibrated profiles (for the README)."""
    ref, cal = get_profile("reference"), get_profile("calibrated")
    lines = ["| row | model | GPU | TP | in/out | measured tok/s | reference | error | calibrated | error |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (m, pr, er), (_, pc, ec) in zip(errors(ref), errors(cal)):
        lines.append(f"| {m.id} | {m.model} | {m.gpu} | {m.tp} | {m.input_tokens}/{m.output_tokens} | "
                     f"{m.output_tok_s:,.0f} | {pr:,.0f} | {er:+.0%} | {pc:,.0f} | {ec:+.0%} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--write" in argv:
        profile, rms = fit()
        write_profile(profile, rms)
        get_profile.__globals__["load_profiles"].cache_clear()
        print(f"calibrated: mfu={profile.mfu} real_factor={profile.real_factor} rms_log_error={rms:.3f}")
    print(error_table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
