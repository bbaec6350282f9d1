"""Fit the efficiency factors (prefill MFU, decode bandwidth fraction) to measurements, apart.

Data: `data/calibration_measurements.csv`, the numeric rows of
../shared/reference/calibration_measurements.csv with how each is read (per TP group, KV dtype
assumed, used or not and why). Rows with variable lengths (MLPerf OpenOrca: input not stated)
or static batching are kept for the record and not fitted.

Each used row is an offline max-throughput run: every KV slot busy, so it is the closed-loop
throughput with as many clients as sequences fit (`ReplicaModel.closed_loop`). The fit minimises
the squared log error over the decode bandwidth fraction, with the MFU fitted first to the H200
prefill measurements (`data/h200_layer_measurements.csv`); both stay within what an H200
measures (MFU <= 0.74, bandwidth <= 0.89 of the spec). Deterministic.

    python -m sizing.calibration            # print the per-row error of both profiles
    python -m sizing.calibration --write    # refit and rewrite the calibrated profile
"""
from __future__ import annotations

import csv
import itertools
import math
import sys
from dataclasses import dataclass, replace

import yaml

from inputs import safe_yaml
from inputs.outputs import write_text_atomically

from .catalog import DATA_DIR, Instance, load_catalog
from .memory import Shape
from .model import ReplicaModel
from .profiles import Profile, get_profile
from .step import build_step
from .workload import Workload

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
    w = Workload(input_tokens=m.input_tokens, output_tokens=m.output_tokens, qps=None, concurrency=1,
                 slo_statistic="mean")
    # The rows ran TensorRT-LLM, whose default capacity scheduler (GUARANTEED_NO_EVICT,
    # tensorrt_llm/llmapi/llm_args.py SchedulerConfig) reserves each request's whole KV up front.
    rm = ReplicaModel(shape, w, replace(profile, kv_reservation="whole"), real=True)
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


LAYER_CSV = DATA_DIR / "h200_layer_measurements.csv"
MFU_BOUNDS = (0.30, 0.74)          # 0.74: the best FP8 GEMM an H200 measured (1,463 of 1,979 TFLOP/s)
DECODE_BW_BOUNDS = (0.30, 0.89)    # 0.89: the HBM copy bandwidth an H200 measured (4.28 of 4.8 TB/s)


@dataclass(frozen=True)
class LayerRow:
    kind: str            # prefill | decode_graph | mixed
    ctx: int
    decodes: int
    prompt_tokens: int
    ms: float


def load_layer_measurements() -> list[LayerRow]:
    lines = [ln for ln in LAYER_CSV.read_text().splitlines() if ln and not ln.startswith("#")]
    return [LayerRow(r["kind"], int(r["ctx"]), int(r["decodes"]), int(r["prompt_tokens"]), float(r["ms_80_layers"]))
            for r in csv.DictReader(lines)]


def layer_step_ms(row: LayerRow, profile: Profile) -> float:
    """The step model's time for one measured H200 row (TP=1, FP8 weights, BF16 KV)."""
    catalog = load_catalog()
    shape = Shape(catalog.model("llama-3-70b"), _node("h200"), 1, "fp8", "bf16")
    if row.kind == "prefill" or row.decodes == 0:
        w = Workload(input_tokens=row.prompt_tokens, output_tokens=1, qps=None, concurrency=1)
        return 1e3 * build_step(shape, w, profile).prefill_s(row.prompt_tokens)
    w = Workload(input_tokens=row.ctx, output_tokens=1, qps=None, concurrency=1)
    return 1e3 * build_step(shape, w, profile).step_s(row.decodes, row.prompt_tokens)


def fit_prefill_mfu(base: Profile) -> tuple[float, float]:
    """MFU from the H200 prefill measurements (prompts of 512 tokens and more; shorter ones are
    bound by the weight read, which the roofline covers): (mfu, RMS log error)."""
    rows = [r for r in load_layer_measurements() if r.kind == "prefill" and r.prompt_tokens >= 512]
    best = None
    for i in range(int(MFU_BOUNDS[0] * 200), int(MFU_BOUNDS[1] * 200) + 1):
        cand = replace(base, mfu=i / 200)
        loss = sum(math.log(layer_step_ms(r, cand) / r.ms) ** 2 for r in rows)
        if best is None or loss < best[0]:
            best = (loss, cand.mfu)
    return best[1], math.sqrt(best[0] / len(rows))


def _loss(profile: Profile, rows: list[Measurement]) -> float:
    total = 0.0
    for m in rows:
        p = predict(m, profile)
        total += math.log(max(p, 1e-9) / m.output_tok_s) ** 2
    return total


def prefill_bound(m: Measurement) -> bool:
    """Rows whose time goes mostly to prefill (prompts 4x the outputs or more) fit the MFU; the
    rest, mostly decode, fit the decode bandwidth fraction."""
    return m.input_tokens >= 4 * m.output_tokens


def _grid(base: Profile, field: str, bounds: tuple[float, float], rows: list[Measurement]) -> Profile:
    best = None
    for i in range(int(bounds[0] * 200), int(bounds[1] * 200) + 1):
        cand = replace(base, **{field: i / 200})
        loss = _loss(cand, rows)
        if best is None or loss < best[0]:
            best = (loss, cand)
    return best[1]


def fit(base: Profile | None = None) -> tuple[Profile, float]:
    """Prefill and decode efficiencies apart, each on the rows it dominates: MFU on the
    prefill-bound runs, the decode bandwidth fraction on the decode-bound ones, alternately until
    neither moves (grids of 0.005 within the H200 physical bounds). Returns the fitted profile and
    its RMS log error over all rows."""
    rows = load_measurements()
    base = base or get_profile("calibrated")
    # A fixed start, so the fit never depends on what is stored: the H200 layer's prefill MFU and
    # its CUDA-graph decode bandwidth (about 3.6 of 4.8 TB/s).
    profile = replace(base, mfu=fit_prefill_mfu(base)[0], decode_bw_fraction=0.75)
    prefill_rows = [m for m in rows if prefill_bound(m)]
    decode_rows = [m for m in rows if not prefill_bound(m)]
    for _ in range(10):
        before = (profile.mfu, profile.decode_bw_fraction)
        profile = _grid(profile, "mfu", MFU_BOUNDS, prefill_rows)
        profile = _grid(profile, "decode_bw_fraction", DECODE_BW_BOUNDS, decode_rows)
        if (profile.mfu, profile.decode_bw_fraction) == before:
            break
    return profile, math.sqrt(_loss(profile, rows) / len(rows))


def write_profile(profile: Profile, rms_log_error: float) -> None:
    doc = safe_yaml.load(PROFILES_YAML.read_text(), str(PROFILES_YAML))     # the same loader as every profile read
    layer_mfu, prefill_rms = fit_prefill_mfu(profile)
    body = doc["profiles"]["calibrated"]
    body.update({
        "description": (f"mixed steps; MFU fitted to the prefill-bound and the decode bandwidth fraction to "
                        f"the decode-bound of {len(load_measurements())} published TensorRT-LLM throughput runs "
                        f"(RMS log error {rms_log_error:.3f}); an H200 layer prefills at MFU "
                        f"{layer_mfu:.2f} (RMS log error {prefill_rms:.3f})."),
        "mfu": profile.mfu, "decode_bw_fraction": profile.decode_bw_fraction,
    })
    # the file's leading comment block (what it says of the profiles' fields) is kept as it is
    lines = PROFILES_YAML.read_text().splitlines(keepends=True)
    header = "".join(line for line in itertools.takewhile(lambda line: line.startswith("#"), lines))
    write_text_atomically(PROFILES_YAML, header + yaml.safe_dump(doc, sort_keys=False))


def error_table() -> str:
    """Markdown: per-row error of the reference and calibrated profiles (for the README)."""
    ref, cal = get_profile("seed"), get_profile("calibrated")
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
        print(f"calibrated: mfu={profile.mfu} decode_bw_fraction={profile.decode_bw_fraction} rms_log_error={rms:.3f}")
    print(error_table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
