"""Microbenchmark of one MoE layer on the local GPU: the router (gate GEMM, softmax, top-k) and the
routed experts' grouped GEMMs (gate_up, SiLU x up, down) at 1, 2, 4, ..., 512 tokens.

What the sizing's MoE decode read assumes (`sizing.parallel.decode_read_bytes`: the experts a batch
touches, E (1 - (1 - k/E)^B), each read whole): here each row reports the experts its tokens touched
and the bytes and time their GEMMs took. Random weights and uniform random routing; no model
download. Shapes: DeepSeek-V3/R1 (hidden 7168, moe_intermediate 2048, 256 experts, top-8) and
Qwen3-235B-A22B (4096, 1536, 128, top-8), or one given by flags. BF16 always; FP8 through
`torch._scaled_mm` per expert where the GPU takes it (Hopper and later), else BF16 only and the JSON
says why. The grouped GEMM is `torch._grouped_mm` where present and working (BF16), else a loop over
the touched experts with their token slices; the JSON records which ran.

Timed with CUDA events after warm-up. `--graph` replays the layer in a CUDA graph: the routing is
drawn once before capture, so the experts' token slices are fixed (the router still runs in the
graph, its choice unused), which is what a replayed decode step of a fixed batch costs.

    python bench/gpu_moe_layer_bench.py [--graph] [--shape deepseek-v3] [--out DIR]
    python bench/gpu_moe_layer_bench.py --dry-run        # tiny shapes, one iteration, CPU: a check

Writes gpu_moe_layer_bench.json to --out (default $OUT, else bench/results) and prints a table.
PyTorch only; torch is imported inside main(), so --help works without it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_timing import make_timer  # noqa: E402  (bench/ beside this script)

SHAPES = {
    "deepseek-v3": {"hidden": 7168, "moe_intermediate": 2048, "experts": 256, "top_k": 8},
    "qwen3-235b-a22b": {"hidden": 4096, "moe_intermediate": 1536, "experts": 128, "top_k": 8},
}
DRY_SHAPE = {"hidden": 64, "moe_intermediate": 32, "experts": 8, "top_k": 2}
TOKENS = [2 ** i for i in range(10)]         # 1 .. 512
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", choices=sorted(SHAPES), help="a named shape (repeat; default: all)")
    p.add_argument("--hidden", type=int, help="a custom shape: hidden size (with the three below)")
    p.add_argument("--moe-intermediate", type=int, help="a custom shape: each expert's intermediate size")
    p.add_argument("--experts", type=int, help="a custom shape: routed experts")
    p.add_argument("--top-k", type=int, help="a custom shape: experts per token")
    p.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=TOKENS,
                   help="token counts, comma-separated (default 1,2,4,...,512)")
    p.add_argument("--dtypes", default="bf16,fp8", help="bf16 and/or fp8 (default both)")
    p.add_argument("--graph", action="store_true", help="time the layer replayed in a CUDA graph")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, one iteration, on the CPU")
    p.add_argument("--out", help="folder for the JSON (default $OUT, else bench/results)")
    return p.parse_args(argv)


def shapes_of(args) -> dict[str, dict]:
    if args.dry_run:
        return {"dry-run": DRY_SHAPE}
    custom = (args.hidden, args.moe_intermediate, args.experts, args.top_k)
    if any(v is not None for v in custom):
        if None in custom:
            sys.exit("a custom shape needs --hidden, --moe-intermediate, --experts and --top-k")
        return {"custom": dict(zip(("hidden", "moe_intermediate", "experts", "top_k"), custom))}
    return {name: SHAPES[name] for name in (args.shape or SHAPES)}


def graphed(torch, fn):
    """fn captured in a CUDA graph (after warm-up on a side stream, as vLLM captures): its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def fp8_support(torch, dev: str) -> tuple[bool, str]:
    if dev != "cuda":
        return False, "no CUDA device: BF16 only"
    if not (hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")):
        return False, f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm: BF16 only"
    try:
        one = torch.ones((), device=dev)
        a = torch.ones(16, 32, device=dev).to(torch.float8_e4m3fn)
        b = torch.ones(16, 32, device=dev).to(torch.float8_e4m3fn)
        torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except Exception as exc:       # e.g. a GPU before Hopper / Ada
        return False, f"torch._scaled_mm failed ({repr(exc)[:200]}): BF16 only"
    return True, "torch._scaled_mm per expert, per-tensor scale 1"


class Layer:
    """One MoE layer's weights at one precision, and its router and experts for a token batch."""

    def __init__(self, torch, dev: str, shape: dict, dtype: str):
        self.t, self.dev, self.dtype = torch, dev, dtype
        h, i, e = shape["hidden"], shape["moe_intermediate"], shape["experts"]
        self.h, self.i, self.e, self.k = h, i, e, shape["top_k"]
        self.act = torch.bfloat16 if dev == "cuda" else torch.float32
        self.gate = torch.randn(e, h, device=dev, dtype=self.act) / h ** 0.5
        w1 = torch.randn(e, 2 * i, h, device=dev, dtype=self.act) / h ** 0.5     # gate_up, [out, in]
        w2 = torch.randn(e, h, i, device=dev, dtype=self.act) / i ** 0.5         # down
        if dtype == "fp8":
            w1, w2 = w1.to(torch.float8_e4m3fn), w2.to(torch.float8_e4m3fn)
        self.w1, self.w2 = w1, w2
        self.one = torch.ones((), device=dev)
        self.elem_bytes = 1 if dtype == "fp8" else w1.element_size()

    def router(self, x):
        t = self.t
        logits = x @ self.gate.t()
        probs = t.softmax(logits.float(), dim=-1)
        w, ids = t.topk(probs, self.k, dim=-1)
        return w / w.sum(-1, keepdim=True), ids

    def dispatch(self, w, ids) -> list[tuple[int, object, object]]:
        """(expert, token rows, routing weights) for each touched expert (a host sync)."""
        t = self.t
        flat = ids.flatten()
        order = t.argsort(flat)
        counts = t.bincount(flat, minlength=self.e).tolist()
        rows, weights = order // self.k, w.flatten()[order].to(self.act)
        out, start = [], 0
        for expert, n in enumerate(counts):
            if n:
                out.append((expert, rows[start:start + n], weights[start:start + n, None]))
            start += n
        return out

    def mm(self, a, w):
        """a @ w.T at the layer's precision (FP8: the activations cast, rows padded to 16)."""
        t = self.t
        if self.dtype != "fp8":
            return a @ w.t()
        m, pad = a.shape[0], (-a.shape[0]) % 16
        a8 = t.nn.functional.pad(a, (0, 0, 0, pad)).to(t.float8_e4m3fn) if pad else a.to(t.float8_e4m3fn)
        out = t._scaled_mm(a8, w.t(), scale_a=self.one, scale_b=self.one, out_dtype=t.bfloat16)
        out = out[0] if isinstance(out, tuple) else out      # torch < 2.5 returned (out, amax)
        return out[:m]

    def experts_loop(self, x, slices):
        t, i = self.t, self.i
        out = t.zeros_like(x)
        for expert, rows, weights in slices:
            gu = self.mm(x[rows], self.w1[expert])
            y = self.mm(t.nn.functional.silu(gu[:, :i]) * gu[:, i:], self.w2[expert])
            out.index_add_(0, rows, y.to(x.dtype) * weights)
        return out

    def grouped_inputs(self, slices):
        """All (token, expert) rows sorted by expert, their weights and the groups' end offsets."""
        t = self.t
        rows = t.cat([r for _, r, _ in slices])
        weights = t.cat([w for _, _, w in slices])
        counts = t.zeros(self.e, dtype=t.int64, device=self.dev)
        for expert, r, _ in slices:
            counts[expert] = r.numel()
        return rows, weights, t.cumsum(counts, 0).to(t.int32)

    def experts_grouped(self, x, grouped):
        t, i = self.t, self.i
        rows, weights, offs = grouped
        gu = t._grouped_mm(x[rows], self.w1.transpose(-2, -1), offs=offs)
        y = t._grouped_mm(t.nn.functional.silu(gu[:, :i]) * gu[:, i:], self.w2.transpose(-2, -1), offs=offs)
        return t.zeros_like(x).index_add_(0, rows, y * weights)


def grouped_method(torch, layer: Layer) -> tuple[str, str]:
    """("grouped" or "loop", what ran and why): torch._grouped_mm for BF16 where it works here."""
    if layer.dtype == "fp8":
        return "loop", "loop over the touched experts, torch._scaled_mm each"
    if not hasattr(torch, "_grouped_mm"):
        return "loop", f"loop over the touched experts with their token slices (torch {torch.__version__} has no _grouped_mm)"
    try:
        x = torch.randn(4, layer.h, device=layer.dev, dtype=layer.act)
        w, ids = layer.router(x)
        layer.experts_grouped(x, layer.grouped_inputs(layer.dispatch(w, ids)))
        if layer.dev == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        return "loop", f"loop over the touched experts (torch._grouped_mm failed: {repr(exc)[:200]})"
    return "grouped", "torch._grouped_mm (one call per GEMM over all touched experts)"


def measure(torch, layer: Layer, tokens: int, method: str, timed, graph: bool) -> dict:
    x = torch.randn(tokens, layer.h, device=layer.dev, dtype=layer.act)
    w, ids = layer.router(x)
    slices = layer.dispatch(w, ids)
    if method == "grouped":
        grouped = layer.grouped_inputs(slices)
        experts = lambda: layer.experts_grouped(x, grouped)     # noqa: E731
    else:
        experts = lambda: layer.experts_loop(x, slices)         # noqa: E731

    def whole():
        layer.router(x)
        return experts()

    def run(fn):
        return timed(graphed(torch, fn) if graph else fn)
    row = {"tokens": tokens, "touched_experts": len(slices), "router_s": run(lambda: layer.router(x)),
           "experts_s": run(experts), "layer_s": run(whole),
           "dispatch_s": timed(lambda: layer.dispatch(*layer.router(x)))}     # eager: it syncs the host
    expert_bytes = 3 * layer.h * layer.i * layer.elem_bytes
    row["expert_weight_bytes"] = len(slices) * expert_bytes
    row["experts_effective_tbps"] = row["expert_weight_bytes"] / row["experts_s"] / 1e12
    row["experts_tflops"] = 2 * tokens * layer.k * 3 * layer.h * layer.i / row["experts_s"] / 1e12
    return row


def bench_shape(torch, dev: str, name: str, shape: dict, dtypes: list[str], args, timed, meta: dict) -> list[dict]:
    rows = []
    for dtype in dtypes:
        try:
            layer = Layer(torch, dev, shape, dtype)
        except Exception as exc:      # out of memory: keep what was measured
            rows.append({"shape": name, "dtype": dtype, "error": repr(exc)[:300]})
            continue
        method, how = grouped_method(torch, layer)
        meta["grouped_gemm"][f"{name}/{dtype}"] = how
        methods = [method] + (["loop"] if args.dry_run and method != "loop" else [])    # a dry run checks both
        for tokens, m in ((tokens, m) for m in methods for tokens in args.tokens):
            try:
                rows.append({"shape": name, "dtype": dtype, "method": m,
                             **measure(torch, layer, tokens, m, timed, args.graph and dev == "cuda")})
            except Exception as exc:
                rows.append({"shape": name, "dtype": dtype, "tokens": tokens, "error": repr(exc)[:300]})
        del layer
        if dev == "cuda":
            torch.cuda.empty_cache()
    return rows


def print_table(rows: list[dict]) -> None:
    cols = ("shape", "dtype", "method", "tokens", "touched_experts", "router_s", "experts_s", "layer_s",
            "experts_effective_tbps", "experts_tflops")
    print(" | ".join(cols))
    for r in rows:
        if "error" in r:
            print(f"{r['shape']} | {r['dtype']} | error: {r['error']}")
            continue
        cells = [f"{r[c] * 1e6:.1f} us" if c.endswith("_s") else (f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]))
                 for c in cols]
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch    # here, not at the top: --help and the project's tests run without torch

    dev = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    if args.dry_run:
        args.tokens, args.reps, args.warmup, args.graph = [1, 4], 1, 0, False
    fp8, fp8_why = fp8_support(torch, dev)
    dtypes = [d for d in args.dtypes.split(",") if d == "bf16" or (d == "fp8" and fp8)]
    meta = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
            "dry_run": args.dry_run, "graph": args.graph, "fp8": fp8, "fp8_note": fp8_why,
            "routing": "uniform random (softmax of a random gate, top-k, renormalized)",
            "activations": "bf16" if dev == "cuda" else "float32 (CPU)", "grouped_gemm": {},
            "reps": args.reps, "warmup": args.warmup}
    t0 = time.time()
    timed = make_timer(torch, dev, args.reps, args.warmup)
    rows = []
    for name, shape in shapes_of(args).items():
        rows += bench_shape(torch, dev, name, shape, dtypes, args, timed, meta)
    res = {**meta, "shapes": shapes_of(args), "rows": rows, "wall_s": time.time() - t0}
    out = Path(args.out or os.environ.get("OUT") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_moe_layer_bench.json").write_text(json.dumps(res, indent=1))
    print_table(rows)
    print(f"fp8: {fp8_why}; grouped GEMM: {meta['grouped_gemm']}; wrote {out / 'gpu_moe_layer_bench.json'}")
    return 1 if args.dry_run and any("error" in r for r in rows) else 0     # a dry run is a check


if __name__ == "__main__":
    sys.exit(main())
