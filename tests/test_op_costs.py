"""The per-operation cost table (`sizing/data/op_costs.json`) against the source rows it was
fitted to (`sizing/data/op_cost_checks.csv`, ~20 per entry spread through the measured range),
without the AIConfigurator wheel.

Tolerances, chosen honestly. The check rows are spread through the fitted range by measured
time, extremes included, so a per-row bound at the recorded p90 would fail about one row in ten
by construction. So: at least SHARE_WITHIN of each entry's rows lie within max(2 x its recorded
p90 relative error, 0.35) of the measurement, their RMS log error is at most twice the recorded
one (+0.05), and no row is off by more than a factor ROW_BOUND (the worst rows are the smallest
shapes, measured under the fitted floor: e.g. a 1 x 1536 x 1024 BF16 GEMM in 3.9 us, floor 7.6 us).
"""
from __future__ import annotations

import csv
import math

import pytest

from sizing import op_costs
from sizing.catalog import DATA_DIR, CatalogError

GPUS = ("h100-sxm", "h200", "b200")
EVERY_OP = ("gemm", "attention_decode", "attention_prefill", "mla_decode", "mla_prefill", "moe",
            "all_reduce", "all_gather", "all_to_all")
COLLECTIVES = ("all_reduce", "all_gather", "all_to_all")
SHARE_WITHIN = 0.85
ROW_BOUND = 4.0


def _rows() -> list[dict]:
    with open(DATA_DIR / "op_cost_checks.csv", newline="") as f:
        return list(csv.DictReader(f))


def _num(row: dict, *cols: str) -> list[float]:
    return [float(row[c]) for c in cols]


def predicted_us(row: dict) -> float:
    """The loader's function for the row's op, at the row's shape."""
    gpu, op, variant = row["gpu"], row["op"], row["variant"]
    kv = variant.removeprefix("module_").removesuffix("_kv")
    if op == "gemm":
        return op_costs.gemm_us(gpu, variant, *_num(row, "m", "n", "k"))
    if op == "attention_decode":
        return op_costs.attention_decode_us(gpu, kv, *_num(row, "batch", "seq", "kv_heads", "head_dim"))
    if op == "attention_prefill":
        return op_costs.attention_prefill_us(gpu, kv, *_num(row, "batch", "seq", "heads", "head_dim"))
    if op == "mla_decode":
        return op_costs.mla_decode_us(gpu, kv, *_num(row, "batch", "seq", "heads"))
    if op == "mla_prefill":
        return op_costs.mla_prefill_us(gpu, kv, *_num(row, "batch", "seq", "heads"))
    if op == "moe":
        tokens, hidden, inter, topk, experts, tp, ep = _num(row, "tokens", "hidden", "inter", "topk", "experts", "tp", "ep")
        return op_costs.moe_us(gpu, variant, tokens, hidden, inter, topk, experts, int(tp), int(ep))
    return op_costs.collective_us(gpu, op, variant, int(float(row["gpus"])), float(row["bytes"]))


def _entry_of(row: dict) -> dict:
    if row["op"] in COLLECTIVES:
        return op_costs.entry(row["gpu"], row["op"], row["variant"], int(float(row["gpus"])))
    return op_costs.entry(row["gpu"], row["op"], row["variant"])


CHECKS = _rows()


@pytest.mark.parametrize("row", CHECKS, ids=lambda r: f"{r['gpu']}-{r['op']}-{r['variant']}-{r['measured_us']}")
def test_no_measured_row_is_off_by_more_than_the_bound(row):
    ratio = predicted_us(row) / float(row["measured_us"])
    assert abs(math.log(ratio)) <= math.log(ROW_BOUND), f"{row['source_file']}: x{ratio:.2f} at {row}"


def _by_entry() -> dict:
    groups = {}
    for row in CHECKS:
        groups.setdefault((row["gpu"], row["op"], row["variant"], row["gpus"]), []).append(row)
    return groups


@pytest.mark.parametrize("key,rows", sorted(_by_entry().items()), ids=lambda v: "-".join(v) if isinstance(v, tuple) else "")
def test_an_entry_reproduces_its_rows_as_well_as_its_recorded_error_says(key, rows):
    e = _entry_of(rows[0])
    tolerance = max(2 * e["p90_abs_rel_error"], 0.35)
    errors = [predicted_us(r) / float(r["measured_us"]) - 1 for r in rows]
    within = sum(abs(err) <= tolerance for err in errors) / len(errors)
    assert within >= SHARE_WITHIN, f"{key}: {within:.0%} within {tolerance:.0%}: {sorted(errors)}"
    rms = math.sqrt(sum(math.log1p(err) ** 2 for err in errors) / len(errors))
    assert rms <= 2 * e["all_rms_log_error"] + 0.05, (key, rms, e["all_rms_log_error"])


def test_every_entry_has_its_check_rows():
    per_entry = {}
    for row in CHECKS:
        key = (row["gpu"], row["op"], row["variant"], row["gpus"])
        per_entry[key] = per_entry.get(key, 0) + 1
    assert min(per_entry.values()) >= 10, {k: n for k, n in per_entry.items() if n < 10}
    assert {k[:2] for k in per_entry} == {(g, op) for g in GPUS for op in EVERY_OP}


@pytest.mark.parametrize("gpu", GPUS)
def test_every_gpu_has_every_op(gpu):
    table = op_costs.load_op_costs()["gpus"][gpu]
    assert set(EVERY_OP) <= set(table)
    assert {"bf16", "fp8"} <= set(table["gemm"]) and {"bf16", "fp8"} <= set(table["moe"])
    for impl in ("custom", "nccl"):
        assert {2, 4, 8} <= set(table["all_reduce"][impl])


def _entries(node, path=()):
    if isinstance(node, dict) and "rows" in node:
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _entries(value, path + (key,))


ENTRIES = list(_entries(op_costs.load_op_costs()["gpus"]))
NOT_PARAMETERS = {"rows", "all_rows", "max_bytes_measured"}


@pytest.mark.parametrize("path,e", ENTRIES, ids=lambda v: "/".join(map(str, v)) if isinstance(v, tuple) else "")
def test_parameters_are_positive_and_finite_with_their_provenance(path, e):
    params = {k: v for k, v in e.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert all(math.isfinite(v) and v > 0 for v in params.values()), params
    assert e["file"].startswith(f"aiconfigurator_core/systems/data/{op_costs.load_op_costs()['gpus'][path[0]]['system']}/")
    assert e["backend"] in ("vllm", "nccl") and e["version"] and e["kernel"] and e["covers"]
    assert e["rows"] <= e["all_rows"] and 0 < e["rms_log_error"] < 1 and 0 < e["p90_abs_rel_error"] < 1.5


def test_the_source_is_the_pinned_wheel():
    source = op_costs.load_op_costs()["source"]
    assert source == {"package": "aiconfigurator-core", "version": "0.12.0", "license": "Apache-2.0",
                      "sha256": "aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4"}


@pytest.mark.parametrize("call,message", [
    (lambda: op_costs.gemm_us("a100", "bf16", 1, 4096, 4096), "no op cost table for GPU 'a100'"),
    (lambda: op_costs.gemm_us("h200", "int3", 1, 4096, 4096), "no op cost entry 'int3' under h200/gemm"),
    (lambda: op_costs.collective_us("h200", "broadcast", "nccl", 8, 1e6), "no op cost entry 'broadcast' under h200"),
    (lambda: op_costs.collective_us("h200", "all_reduce", "custom", 16, 1e6), "no op cost entry '16' under h200/all_reduce/custom"),
])
def test_an_unknown_gpu_or_op_is_named(call, message):
    with pytest.raises(CatalogError, match=message):
        call()


def test_the_forms_are_max_of_affine_in_tokens():
    """At a fixed shape doubling a large token count at most doubles the time, and more tokens
    never cost less (the step model's convexity rests on it)."""
    times = [op_costs.gemm_us("h200", "fp8", m, 8192, 8192) for m in (1, 64, 512, 4096, 8192)]
    assert times == sorted(times) and times[-1] <= 2 * times[-2] + 1e-9
    moe = [op_costs.moe_us("h200", "bf16", t, 4096, 1536, 8, 128) for t in (1, 16, 256, 4096)]
    assert moe == sorted(moe)
