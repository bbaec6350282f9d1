"""Fit the per-operation cost forms of `sizing/data/op_costs.json` to NVIDIA AIConfigurator's
measured per-op silicon tables (vLLM backend), and write a checkpoint sample of source rows
(`sizing/data/op_cost_checks.csv`) the unit tests replay without the wheel.

Build time only: needs numpy, pandas and pyarrow (`requirements-derive.txt`), never the project's
runtime. Rerun:

    python -m venv /tmp/derive && /tmp/derive/bin/pip install -r requirements-derive.txt
    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
    /tmp/derive/bin/python scripts/derive_op_costs.py /tmp/aic/aiconfigurator_core-0.12.0-*.whl
    # or, on an unzipped wheel: scripts/derive_op_costs.py /path/to/unzipped (sha256 not checked)

A .whl argument is verified against WHEEL_SHA256 and read in place. The fits are deterministic
(a fixed-start Nelder-Mead in log-parameter space minimising the RMS of log(predicted/measured)),
so a rerun on the same wheel writes the same bytes. The tables themselves are never copied:
only fitted parameters and ~20 rows per entry.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

PACKAGE, VERSION = "aiconfigurator-core", "0.12.0"
WHEEL_SHA256 = "aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4"
ROOT = Path(__file__).resolve().parent.parent
OUT_JSON = ROOT / "sizing" / "data" / "op_costs.json"
OUT_CHECKS = ROOT / "sizing" / "data" / "op_cost_checks.csv"
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm"}
DATA = "aiconfigurator_core/systems/data"
CHECK_ROWS = 20
MLA_KV_WIDTH = 512 + 64          # DeepSeek-V3 kv_lora_rank + qk_rope_head_dim: the latent cache per token
MLA_PAIR_FLOPS = 2 * (192 + 128)  # context MLA unabsorbed: QK at 192 (nope+rope), PV at 128, per head
CHECK_COLUMNS = ["gpu", "op", "variant", "m", "n", "k", "batch", "seq", "heads", "kv_heads", "head_dim",
                 "tokens", "hidden", "inter", "topk", "experts", "tp", "ep", "gpus", "bytes",
                 "measured_us", "source_file"]


# -- reading the wheel --------------------------------------------------------------------------

class Wheel:
    """The wheel's files, from the .whl itself (sha256 checked) or an unzipped copy."""

    def __init__(self, path: Path):
        self.path = path
        if path.suffix == ".whl":
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != WHEEL_SHA256:
                sys.exit(f"{path}: sha256 {digest}, expected {WHEEL_SHA256} ({PACKAGE} {VERSION})")
            self.zip = zipfile.ZipFile(path)
            self.names = set(self.zip.namelist())
        else:
            self.zip = None
            base = path if (path / "aiconfigurator_core").is_dir() else path.parent
            self.path = base
            self.names = {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}

    def read(self, name: str) -> pd.DataFrame:
        data = self.zip.read(name) if self.zip else (self.path / name).read_bytes()
        return pd.read_parquet(io.BytesIO(data))

    def newest(self, system: str, op: str, backend: str, table: str) -> str | None:
        """The table's path in the newest version folder that has it."""
        prefix = f"{DATA}/{system}/{op}/{backend}/"
        found = [n for n in self.names if n.startswith(prefix) and n.endswith("/" + table)]
        if not found:
            return None
        return max(found, key=lambda n: _version_key(n[len(prefix):].split("/")[0]))


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.replace("rc", ".").replace("post", ".").split("."))


# -- fitting --------------------------------------------------------------------------------------

def nelder_mead(loss, x0: np.ndarray, iters: int = 3000, tol: float = 1e-10) -> np.ndarray:
    """Minimise `loss` from `x0` (deterministic: fixed start simplex, fixed iteration cap)."""
    n = len(x0)
    simplex = [x0] + [x0 + np.eye(n)[i] * 0.5 for i in range(n)]
    values = [loss(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = loss(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = loss(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = loss(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex]
                values = [loss(s) for s in simplex]
    return simplex[int(np.argmin(values))]


def fit(form, names: list[str], start: list[float], x: dict, measured: np.ndarray) -> dict:
    """Positive parameters of `form(params, x)` minimising RMS log error; restarted twice from
    the best point so the simplex does not stall in a corner of the max()."""
    logm = np.log(measured)

    def loss(z):
        pred = form(dict(zip(names, np.exp(z))), x)
        return float(np.sqrt(np.mean((np.log(np.maximum(pred, 1e-12)) - logm) ** 2)))

    z0 = np.log(np.array(start, dtype=float))
    # a max() of pieces has corners a simplex can stall in: start also from each parameter x/÷ 4
    starts = [z0] + [z0 + sign * np.log(4.0) * np.eye(len(z0))[i] for i in range(len(z0)) for sign in (1, -1)]
    best = None
    for z in starts:
        for _ in range(2):
            z = nelder_mead(loss, z)
        if best is None or loss(z) < loss(best):
            best = z
    return dict(zip(names, (float(v) for v in np.exp(best))))


def errors(pred: np.ndarray, measured: np.ndarray) -> dict:
    log_err = np.log(pred / measured)
    return {"rows": int(len(measured)), "rms_log_error": float(np.sqrt(np.mean(log_err ** 2))),
            "p90_abs_rel_error": float(np.quantile(np.abs(pred / measured - 1), 0.9))}


def spread_rows(df: pd.DataFrame, count: int = CHECK_ROWS) -> pd.DataFrame:
    """`count` rows evenly spaced through the measured range (deterministic)."""
    ordered = df.sort_values(["latency_us"] + [c for c in df.columns if c != "latency_us"], kind="mergesort")
    idx = np.unique(np.linspace(0, len(ordered) - 1, min(count, len(ordered))).round().astype(int))
    return ordered.iloc[idx]


# -- the cost forms (microseconds; the same forms as sizing/op_costs.py) ------------------------

def gemm_form(p: dict, x: dict) -> np.ndarray:
    weight_and_act_bytes = x["n"] * x["k"] * x["w"] + x["m"] * (x["k"] + x["n"]) * 2
    return np.maximum.reduce([np.full_like(x["m"], p["floor_us"], dtype=float),
                              weight_and_act_bytes / (p["bw_tbps"] * 1e6),
                              2 * x["n"] * x["k"] * (x["m"] + p["m_half"]) / (p["tflops"] * 1e6)])


def attention_decode_form(p: dict, x: dict) -> np.ndarray:
    kv_bytes = x["batch"] * x["seq"] * 2 * x["kv_heads"] * x["head_dim"] * x["kv_bytes"]
    return np.maximum(p["floor_us"], kv_bytes / (p["bw_tbps"] * 1e6) + x["batch"] * p["per_seq_us"])


def prefill_flops(x: dict) -> np.ndarray:
    """Causal: each of a sequence's s queries against the s(s+1)/2 keys at or before it; QK and
    PV are 2 h d FLOPs each per (query, key) pair."""
    return x["batch"] * 4 * x["heads"] * x["head_dim"] * x["seq"] * (x["seq"] + 1) / 2


def attention_prefill_form(p: dict, x: dict) -> np.ndarray:
    return np.maximum(p["floor_us"], prefill_flops(x) / (p["tflops"] * 1e6)
                      + x["batch"] * x["seq"] * p["per_token_us"])


def mla_decode_form(p: dict, x: dict) -> np.ndarray:
    latent_bytes = x["batch"] * x["seq"] * MLA_KV_WIDTH * x["kv_bytes"]
    return (p["fixed_us"] + x["heads"] * p["per_head_us"] + latent_bytes / (p["bw_tbps"] * 1e6)
            + x["batch"] * x["heads"] * p["per_head_seq_us"])


def mla_prefill_form(p: dict, x: dict) -> np.ndarray:
    flops = x["batch"] * x["heads"] * MLA_PAIR_FLOPS * x["seq"] * (x["seq"] + 1) / 2
    return (p["fixed_us"] + x["heads"] * p["per_head_us"] + x["batch"] * x["seq"] * x["heads"] * p["per_head_token_us"]
            + flops / (p["tflops"] * 1e6))


def moe_touched(x: dict) -> np.ndarray:
    """Local experts at least one of T tokens routes to, uniform routing of k of E experts."""
    return x["experts"] / x["ep"] * (1 - (1 - x["topk"] / x["experts"]) ** x["tokens"])


def moe_form(p: dict, x: dict) -> np.ndarray:
    touched, f_local = moe_touched(x), x["inter"] / x["tp"]
    pairs = x["tokens"] * x["topk"] / x["ep"]          # token-expert pairs this GPU computes
    return np.maximum.reduce([np.full_like(touched, p["floor_us"]),
                              touched * 3 * x["hidden"] * f_local * x["w"] / (p["bw_tbps"] * 1e6),
                              2 * 3 * x["hidden"] * f_local * (pairs + touched * p["m_half"]) / (p["tflops"] * 1e6)])


def collective_form(p: dict, x: dict) -> np.ndarray:
    return np.maximum(p["floor_us"], p["latency_us"] + x["bytes"] / (p["bw_gbps"] * 1e3))


# -- one entry ------------------------------------------------------------------------------------

def fit_entry(rows: pd.DataFrame, fitted: pd.Series, xfn, form, start: dict, meta: dict, check_shape: dict):
    """Fit `form` on rows[fitted]; errors over the fitted rows and over all `rows`; the check rows
    (spread through the fitted ones) in the CSV's columns (`check_shape`: CSV column -> row column)."""
    used = rows[fitted]
    if "floor_us" in start:          # the floor starts at the fastest rows
        start = {**start, "floor_us": float(used["latency_us"].quantile(0.02))}
    params = fit(form, list(start), list(start.values()), xfn(used), used["latency_us"].to_numpy())
    fit_err = errors(form(params, xfn(used)), used["latency_us"].to_numpy())
    all_err = errors(form(params, xfn(rows)), rows["latency_us"].to_numpy())
    entry = {**{k: _round(v) for k, v in params.items()}, **meta, **{k: _round(v) for k, v in fit_err.items()},
             "all_rows": all_err["rows"], "all_rms_log_error": _round(all_err["rms_log_error"]),
             "all_p90_abs_rel_error": _round(all_err["p90_abs_rel_error"]),
             # the fastest any row of this kernel ran: the floor of a shape smaller than the fit's
             "min_us": _round(float(rows["latency_us"].min()))}
    sample = spread_rows(used)
    checks = pd.DataFrame({col: sample[src].to_numpy() for col, src in check_shape.items()})
    checks["measured_us"] = sample["latency_us"].round(4).to_numpy()
    checks["source_file"] = meta["file"].split("aiconfigurator_core/", 1)[-1]
    return entry, checks


def _round(v):
    return float(f"{v:.4g}") if isinstance(v, float) else v


def _meta(path: str, backend: str, kernel: str, covers: str) -> dict:
    version = path.split("/")[-2]
    return {"kernel": kernel, "file": path, "backend": backend, "version": version, "covers": covers}


def _load(wheel: Wheel, system: str, op: str, table: str, backend: str = "vllm"):
    path = wheel.newest(system, op, backend, table)
    if path is None:
        return None, None
    df = wheel.read(path)
    df["latency_us"] = df["latency"] * 1000.0          # the tables' latency column is in ms
    return path, df[df["latency_us"] > 0]


def _main_kernel(df: pd.DataFrame) -> str:
    counts = df["kernel_source"].value_counts()
    return str(sorted(counts.index, key=lambda k: (-counts[k], k))[0])


def _span(df: pd.DataFrame, col: str) -> str:
    return f"{int(df[col].min())}-{int(df[col].max())}"


def _vllm_choice(rows: pd.DataFrame, shape: list[str]) -> pd.DataFrame:
    """One row per shape: where the table measured several kernels for one shape, the one it
    measured most (vLLM picks its backend per shape: e.g. MLA prefill switches kernel with length)."""
    counts = rows["kernel_source"].value_counts()
    rank = {k: i for i, k in enumerate(sorted(counts.index, key=lambda k: (-counts[k], k)))}
    ordered = rows.assign(_rank=rows["kernel_source"].map(rank)).sort_values(shape + ["_rank"], kind="mergesort")
    return ordered.drop_duplicates(shape).drop(columns="_rank")


# -- the operations -------------------------------------------------------------------------------

GEMM_DTYPES = {"bf16": ("bfloat16", 2.0), "fp8": ("fp8", 1.0), "fp8_block": ("fp8_block", 1.0), "fp4": ("nvfp4", 0.5)}
# w4a16_mxfp4: 4-bit E2M1 and one E8M0 scale byte per 32 elements (OCP MX v1.0), as sizing.architecture
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5, "bf16": 2.0, "w4a16_mxfp4": 0.5 + 1 / 32}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}


GEMM_FIT_MIN_DIM = 4096


def gemm_entries(wheel: Wheel, system: str):
    """Per-tensor FP8 (Cutlass scaled-mm), block FP8 (DeepGEMM/FlashInfer/Cutlass, as vLLM picks
    per shape), BF16 (torch linear), NVFP4 on Blackwell; fitted on N, K >= GEMM_FIT_MIN_DIM: the
    projections that take a serving step's time (hidden sizes and FFN widths of 4,096 and more; a
    fit over smaller shapes as well put large-M FP8 at 840 TFLOP/s on H100, where the rows reach
    1,100-1,300)."""
    path, df = _load(wheel, system, "gemm", "gemm_perf.parquet")
    for variant, (dtype, w) in GEMM_DTYPES.items():
        rows = df[df["gemm_dtype"] == dtype].copy()
        if rows.empty:
            continue
        rows["w"] = w
        fitted = (rows["n"] >= GEMM_FIT_MIN_DIM) & (rows["k"] >= GEMM_FIT_MIN_DIM)
        kernels = "+".join(sorted(rows["kernel_source"].unique()))
        covers = f"M {_span(rows, 'm')}, N {_span(rows, 'n')}, K {_span(rows, 'k')}; fitted N,K >= {GEMM_FIT_MIN_DIM}"
        xfn = lambda d: {c: d[c].to_numpy(float) for c in ("m", "n", "k", "w")}
        start = {"floor_us": 8.0, "bw_tbps": 3.0, "tflops": 600.0 / w, "m_half": 64.0}
        yield ("gemm", variant), *fit_entry(rows, fitted, xfn, gemm_form, start, _meta(path, "vllm", kernels, covers),
                                            {"m": "m", "n": "n", "k": "k"})


def _attention_x(d: pd.DataFrame) -> dict:
    return {"batch": d["batch_size"].to_numpy(float), "seq": (d["isl"] + d["step"]).to_numpy(float),
            "heads": d["num_heads"].to_numpy(float), "kv_heads": d["num_key_value_heads"].to_numpy(float),
            "head_dim": d["head_dim"].to_numpy(float), "kv_bytes": d["kv_cache_dtype"].map(KV_BYTES).to_numpy(float)}


ATTENTION_CHECK = {"batch": "batch_size", "seq": "seq", "heads": "num_heads", "kv_heads": "num_key_value_heads",
                   "head_dim": "head_dim"}


def attention_entries(wheel: Wheel, system: str):
    """GQA flash attention, full (window 0) layers at head_dim 128 (Llama, Qwen, Mistral: the
    serving shapes) with 8-64 query heads per GPU, the table's main kernel; decode context s = isl + step."""
    for op, table, form in (("attention_decode", "generation_attention_perf.parquet", attention_decode_form),
                            ("attention_prefill", "context_attention_perf.parquet", attention_prefill_form)):
        path, df = _load(wheel, system, "attention", table)
        df = df[df["window_size"] == 0].copy()
        df["seq"], df["kv_bytes"] = df["isl"] + df["step"], df["kv_cache_dtype"].map(KV_BYTES)
        for kv, variant in (("bfloat16", "bf16_kv" if op == "attention_decode" else "bf16"),
                            ("fp8", "fp8_kv" if op == "attention_decode" else "fp8_kv")):
            rows = df[df["kv_cache_dtype"] == kv]
            kernel = _main_kernel(rows[rows["head_dim"] == 128])
            rows = rows[rows["kernel_source"] == kernel]
            # per-GPU query heads 8-64: Llama/Qwen-class models from TP 1 to TP 8
            # (and GQA: <= 8 KV heads; B200's table adds MHA-like rows up to 96 KV heads, where the
            # per-sequence cost grows with the heads and this form does not hold)
            fitted = (rows["head_dim"] == 128) & rows["num_heads"].between(8, 64) & (rows["num_key_value_heads"] <= 8)
            covers = (f"batch {_span(rows, 'batch_size')}, s {_span(rows, 'seq')}, heads {_span(rows, 'num_heads')}, "
                      f"kv heads {_span(rows, 'num_key_value_heads')}, head_dim {sorted(int(h) for h in rows['head_dim'].unique())}; "
                      "fitted head_dim 128, heads 8-64, kv heads <= 8, window 0")
            if op == "attention_decode":
                start = {"floor_us": 8.0, "bw_tbps": 3.0, "per_seq_us": 0.05}
            else:
                start = {"floor_us": 8.0, "tflops": 400.0, "per_token_us": 0.001}
            yield (op, variant), *fit_entry(rows, fitted, _attention_x, form, start,
                                            _meta(path, "vllm", kernel, covers), ATTENTION_CHECK)


def _mla_x(d: pd.DataFrame) -> dict:
    return {"batch": d["batch_size"].to_numpy(float), "seq": (d["isl"] + d["step"]).to_numpy(float),
            "heads": d["num_heads"].to_numpy(float), "kv_bytes": d["kv_cache_dtype"].map(KV_BYTES).to_numpy(float)}


def mla_entries(wheel: Wheel, system: str):
    """AIC's MLA *module* rows (DeepSeek-V3 shapes): the whole attention block of a layer (q_a/kv_a
    down-projections, q_b, kv_b or its absorbed BMMs, the MLA kernel, o_proj), block-FP8 GEMMs
    (DeepSeek-V3's checkpoint); fitted on num_heads >= 16 (TP <= 8 of 128 heads)."""
    for op, table, form in (("mla_decode", "mla_generation_module_perf.parquet", mla_decode_form),
                            ("mla_prefill", "mla_context_module_perf.parquet", mla_prefill_form)):
        path, df = _load(wheel, system, "mla", table)
        df = df[df["gemm_type"] == "fp8_block"].copy()
        df["seq"], df["kv_bytes"] = df["isl"] + df["step"], df["kv_cache_dtype"].map(KV_BYTES)
        # `module_`: these price the whole attention block, projections included (not the kernel alone)
        for kv, variant in (("bfloat16", "module_bf16_kv"), ("fp8", "module_fp8_kv")):
            rows = df[df["kv_cache_dtype"] == kv]
            if rows.empty:
                continue
            rows = _vllm_choice(rows, ["batch_size", "isl", "step", "num_heads"])
            kernel = "+".join(sorted(rows["kernel_source"].unique()))
            fitted = rows["num_heads"] >= 16
            covers = (f"batch {_span(rows, 'batch_size')}, s {_span(rows, 'seq')}, heads {_span(rows, 'num_heads')}; "
                      "gemm fp8_block; fitted heads >= 16")
            start = ({"fixed_us": 80.0, "per_head_us": 0.5, "bw_tbps": 3.0, "per_head_seq_us": 0.005}
                     if op == "mla_decode" else
                     {"fixed_us": 80.0, "per_head_us": 0.5, "per_head_token_us": 0.001, "tflops": 300.0})
            yield (op, variant), *fit_entry(rows, fitted, _mla_x, form, start, _meta(path, "vllm", kernel, covers),
                                            {"batch": "batch_size", "seq": "seq", "heads": "num_heads"})


# mxfp4: gpt-oss's W4A16 MXFP4 experts; the table's main kernel is the one vLLM's MXFP4 oracle picks
# (OAI Triton matmul_ogs on Hopper, FlashInfer TRT-LLM MXFP4 x BF16 on Blackwell), measured on
# gpt-oss's shapes only (its other kernel, Marlin, is Kimi-K3's rows).
MOE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "fp4": "nvfp4", "mxfp4": "w4a16_mxfp4"}
MOE_CHECK = {"tokens": "num_tokens", "hidden": "hidden_size", "inter": "inter_size", "topk": "topk",
             "experts": "num_experts", "tp": "moe_tp_size", "ep": "moe_ep_size"}


def _moe_x(d: pd.DataFrame) -> dict:
    return {"tokens": d["num_tokens"].to_numpy(float), "hidden": d["hidden_size"].to_numpy(float),
            "inter": d["inter_size"].to_numpy(float), "topk": d["topk"].to_numpy(float),
            "experts": d["num_experts"].to_numpy(float), "tp": d["moe_tp_size"].to_numpy(float),
            "ep": d["moe_ep_size"].to_numpy(float), "w": d["w"].to_numpy(float)}


def moe_entries(wheel: Wheel, system: str):
    """Fused MoE, the `balanced` routing rows, one node (moe_tp x moe_ep <= 8), the dtype's main
    kernel; the error under the power-law routings is recorded beside it."""
    path, df = _load(wheel, system, "moe", "moe_perf.parquet")
    for variant, dtype in MOE_DTYPES.items():
        rows = df[df["moe_dtype"] == dtype].copy()
        if rows.empty:
            continue
        kernel = _main_kernel(rows[rows["distribution"] == "balanced"])
        rows = rows[rows["kernel_source"] == kernel]
        rows["w"] = WEIGHT_BYTES[dtype]
        one_node = rows["moe_tp_size"] * rows["moe_ep_size"] <= 8
        balanced = rows[rows["distribution"] == "balanced"]
        covers = (f"T {_span(rows, 'num_tokens')}, hidden {_span(rows, 'hidden_size')}, inter {_span(rows, 'inter_size')}, "
                  f"E {_span(rows, 'num_experts')}, k {_span(rows, 'topk')}, tp {_span(rows, 'moe_tp_size')}, "
                  f"ep {_span(rows, 'moe_ep_size')}; fitted balanced, tp x ep <= 8")
        start = {"floor_us": 20.0, "bw_tbps": 2.0, "tflops": 300.0 / WEIGHT_BYTES[dtype], "m_half": 16.0}
        entry, checks = fit_entry(balanced, one_node[balanced.index], _moe_x, moe_form, start,
                                  _meta(path, "vllm", kernel, covers), MOE_CHECK)
        params = {k: entry[k] for k in start}
        for dist in ("power_law_1.01", "power_law_1.2"):
            other = rows[(rows["distribution"] == dist) & one_node]
            if not other.empty:
                err = errors(moe_form(params, _moe_x(other)), other["latency_us"].to_numpy())
                entry[f"rms_log_error_{dist.replace('.', '_')}"] = _round(err["rms_log_error"])
        yield ("moe", variant), entry, checks


# vLLM uses its custom all-reduce up to this message size (custom_all_reduce.py max_size), NCCL above.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8192 * 1024
COLLECTIVE_START = {"floor_us": 5.0, "latency_us": 5.0, "bw_gbps": 200.0}
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "alltoall": "all_to_all"}


def _collective_x(d: pd.DataFrame) -> dict:
    return {"bytes": d["bytes"].to_numpy(float)}


def _collective(rows, fitted, path, kernel, gpus_col="num_gpus"):
    covers = f"bytes {_span(rows, 'bytes')}; fitted {_span(rows[fitted], 'bytes')}"
    entry, checks = fit_entry(rows, fitted, _collective_x, collective_form, COLLECTIVE_START,
                              _meta(path, path.split("/")[-3], kernel, covers), {"gpus": gpus_col, "bytes": "bytes"})
    entry["max_bytes_measured"] = int(rows["bytes"].max())
    return entry, checks


def collective_entries(wheel: Wheel, system: str):
    """All-reduce (vLLM's custom kernel, CUDA-graph variant, up to vLLM's 8 MiB limit; NCCL), NCCL
    all-gather and all-to-all, and vLLM's DeepEP MoE dispatch/combine. `message_size` is in
    elements (AIC passes tokens x hidden), BF16/half: bytes = 2 x elements."""
    path, df = _load(wheel, system, "comm", "custom_allreduce_perf.parquet")
    df = df[df["kernel_source"] == "vLLM_custom_graph"].assign(bytes=lambda d: d["message_size"] * 2)
    for gpus, rows in df.groupby("num_gpus"):
        yield ("all_reduce", "custom", int(gpus)), *_collective(rows, rows["bytes"] <= CUSTOM_ALL_REDUCE_MAX_BYTES,
                                                                path, "vLLM_custom_graph")
    path, df = _load(wheel, system, "comm", "nccl_perf.parquet", backend="nccl")
    df = df[df["nccl_dtype"] == "half"].assign(bytes=lambda d: d["message_size"] * 2)
    for (op, gpus), rows in df.groupby(["op_name", "num_gpus"]):
        if op in NCCL_OPS:
            yield (NCCL_OPS[op], "nccl", int(gpus)), *_collective(rows, rows["bytes"] > 0, path, "NCCL")
    path, df = _load(wheel, system, "comm", "moe_a2a_perf.parquet")
    if df is None:
        return
    # this table's latency equals its transmit_us + notify_us columns: microseconds, not ms
    df = df.assign(latency_us=df["latency"])
    # bytes: each token's BF16 hidden vector once (its top-k fan-out is inside the fitted bandwidth)
    df = df.assign(bytes=lambda d: d["num_tokens"] * d["hidden_size"] * 2)
    for (backend, phase, ep), rows in df.groupby(["comm_backend", "phase", "ep_size"]):
        yield ("all_to_all", f"{backend}_{phase}", int(ep)), *_collective(rows, rows["bytes"] > 0, path, "deepep",
                                                                          gpus_col="ep_size")


OP_FAMILIES = (gemm_entries, attention_entries, mla_entries, moe_entries, collective_entries)

# Norms, rotary, activations: AIC's vLLM tables have no per-kernel rows for them; kept at the
# development values until measured (sizing/ops.py prices them from this entry).
ELEMENTWISE = {"h100-sxm": (2.5, 2.5), "h200": (2.5, 3.5), "b200": (2.5, 6.0)}


# -- writing ----------------------------------------------------------------------------------------

def _rounded(node):
    """Four significant digits, as the fits support (the JSON stays readable and diffs small)."""
    if isinstance(node, dict):
        return {k: _rounded(v) for k, v in node.items()}
    if isinstance(node, float):
        return float(f"{node:.4g}")
    return node


ABOUT = [
    "Per-operation cost parameters, per GPU, fitted by scripts/derive_op_costs.py (do not edit by hand).",
    f"Source: NVIDIA AIConfigurator silicon tables, PyPI {PACKAGE}=={VERSION} (sha256 {WHEEL_SHA256}), "
    "Apache-2.0; every entry names the table (`file`, a path inside the wheel), its `backend` and `version`, "
    "and the kernel rows it was fitted on.",
    "Units: microseconds (_us), TB/s (bw_tbps), TFLOP/s (tflops), GB/s (bw_gbps), bytes; all per GPU.",
    "Errors: rms_log_error / p90_abs_rel_error over the fitted rows (`rows`, the serving shapes named in "
    "`covers`), all_* over every row of that kernel and dtype. Forms: docs/sizing-model.md, "
    "'Per-operation cost tables', and sizing/op_costs.py.",
    "JSON, not YAML: `llmserve size` reads it on every run, and the C json parser keeps that within its "
    "speed target.",
]


def derive(wheel: Wheel) -> tuple[dict, pd.DataFrame]:
    gpus, checks = {}, []
    for gpu, system in SYSTEMS.items():
        tree = {"system": system}
        for family in OP_FAMILIES:
            for key, entry, sample in family(wheel, system):
                node = tree
                for part in key[:-1]:
                    node = node.setdefault(part, {})
                node[key[-1]] = entry
                variant = key[1] if len(key) == 2 else f"{key[1]}"
                checks.append(sample.assign(gpu=gpu, op=key[0], variant=variant))
        floor, bw = ELEMENTWISE[gpu]
        tree["elementwise"] = {"floor_us": floor, "bw_tbps": bw, "backend": "provisional"}
        gpus[gpu] = tree
    table = {"about": ABOUT, "source": {"package": PACKAGE, "version": VERSION, "sha256": WHEEL_SHA256, "license": "Apache-2.0"},
             "gpus": gpus}
    frame = pd.concat(checks, ignore_index=True).reindex(columns=CHECK_COLUMNS)
    return table, frame


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    table, checks = derive(Wheel(Path(argv[0])))
    _write_atomic(OUT_JSON, json.dumps(_rounded(table), indent=1) + "\n")
    csv = io.StringIO()
    checks.to_csv(csv, index=False, lineterminator="\n")
    _write_atomic(OUT_CHECKS, csv.getvalue())
    print(f"wrote {OUT_JSON.relative_to(ROOT)} and {OUT_CHECKS.relative_to(ROOT)} ({len(checks)} check rows)")


if __name__ == "__main__":
    main(sys.argv[1:])
