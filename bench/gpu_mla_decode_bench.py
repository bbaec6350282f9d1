"""Microbenchmark of MLA decode attention (DeepSeek-V3/R1 shapes) on the local GPU, in the absorbed
form vLLM decodes with: q_nope through W_UK into the latent space, attention over the latent cache
(kv_lora_rank 512 + rope 64 = 576 values a token, one "head" shared by all query heads), then the
latent output through W_UV.

What the sizing assumes of an MLA decode step (`sizing.parallel.kv_copies`: under TP every GPU holds
the whole latent cache; the step reads it once per step): each row reports the cache bytes read and
the effective bandwidth, at batch 1-256 and context 1k-32k, for 128 heads / TP query heads per GPU.
Random weights and cache, one layer, BF16, explicit batched GEMMs (no FlashMLA: PyTorch only).
Timed with CUDA events after warm-up.

    python bench/gpu_mla_decode_bench.py [--tp 8] [--out DIR]
    python bench/gpu_mla_decode_bench.py --dry-run      # tiny shapes, one iteration, CPU: a check

Writes gpu_mla_decode_bench.json to --out (default $OUT, else bench/results) and prints a table.
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

HEADS, KV_LORA_RANK, ROPE, NOPE, V_HEAD = 128, 512, 64, 128, 128      # DeepSeek-V3/R1 config.json
BATCHES = [1, 4, 16, 64, 128, 256]
CONTEXTS = [1024, 2048, 4096, 8192, 16384, 32768]
MAX_CACHE_BYTES = 40 << 30
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=8, help="tensor parallel degree: 128 / TP query heads a GPU (default 8)")
    p.add_argument("--batches", type=lambda s: [int(t) for t in s.split(",")], default=BATCHES)
    p.add_argument("--contexts", type=lambda s: [int(t) for t in s.split(",")], default=CONTEXTS)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, one iteration, on the CPU")
    p.add_argument("--out", help="folder for the JSON (default $OUT, else bench/results)")
    return p.parse_args(argv)


def mla_decode(torch, heads: int, rank: int, rope: int, dev: str, dt):
    """The absorbed step for `heads` query heads: (q_nope, q_pe, cache) -> output per head."""
    w_uk = torch.randn(heads, NOPE, rank, device=dev, dtype=dt) / NOPE ** 0.5     # kv_b_proj's K half
    w_uv = torch.randn(heads, rank, V_HEAD, device=dev, dtype=dt) / rank ** 0.5   # kv_b_proj's V half
    scale = (NOPE + rope) ** -0.5
    soft = torch.promote_types(dt, torch.float32)                # the softmax in FP32 (or wider)

    def attend(q_lat, q_pe, cache):
        q = torch.cat([q_lat, q_pe], dim=-1)                     # [B, H, rank + rope]
        scores = torch.bmm(q, cache.transpose(1, 2)).to(soft)    # [B, H, L]: latent and rope parts at once
        p = torch.softmax(scores * scale, dim=-1).to(dt)
        return torch.bmm(p, cache[..., :rank])                   # [B, H, rank]: the latent values

    def step(q_nope, q_pe, cache):
        q_lat = torch.einsum("bhd,hdc->bhc", q_nope, w_uk)       # absorb W_UK into the query
        return torch.einsum("bhc,hcv->bhv", attend(q_lat, q_pe, cache), w_uv)
    return step, attend, w_uk, w_uv


def measure(torch, dev: str, dt, heads: int, rank: int, rope: int, batch: int, ctx: int, timed) -> dict:
    step, attend, w_uk, _ = mla_decode(torch, heads, rank, rope, dev, dt)
    cache = torch.randn(batch, ctx, rank + rope, device=dev, dtype=dt)      # latent + rope key, per token
    q_nope = torch.randn(batch, heads, NOPE, device=dev, dtype=dt)
    q_pe = torch.randn(batch, heads, rope, device=dev, dtype=dt)
    q_lat = torch.einsum("bhd,hdc->bhc", q_nope, w_uk)
    row = {"batch": batch, "context": ctx, "heads": heads,
           "step_s": timed(lambda: step(q_nope, q_pe, cache)), "attention_s": timed(lambda: attend(q_lat, q_pe, cache))}
    row["cache_bytes"] = cache.numel() * cache.element_size()
    row["effective_tbps"] = row["cache_bytes"] / row["step_s"] / 1e12
    row["attention_tflops"] = 2 * batch * heads * ctx * (2 * rank + rope) / row["attention_s"] / 1e12
    return row


def absorbed_error(torch, heads: int, rank: int, rope: int) -> float:
    """The absorbed step against MLA written out (per-head keys latent W_UK, values latent W_UV),
    on the CPU in float64: the largest difference (a dry run's check that the form is MLA's)."""
    dt, b, ctx = torch.float64, 2, 8
    step, _, w_uk, w_uv = mla_decode(torch, heads, rank, rope, "cpu", dt)
    cache = torch.randn(b, ctx, rank + rope, dtype=dt)
    q_nope, q_pe = torch.randn(b, heads, NOPE, dtype=dt), torch.randn(b, heads, rope, dtype=dt)
    latent, k_pe = cache[..., :rank], cache[..., rank:]
    keys = torch.einsum("blc,hdc->bhld", latent, w_uk)           # [B, H, L, nope]
    values = torch.einsum("blc,hcv->bhlv", latent, w_uv)         # [B, H, L, v_head]
    scores = torch.einsum("bhd,bhld->bhl", q_nope, keys) + torch.einsum("bhr,blr->bhl", q_pe, k_pe)
    p = torch.softmax(scores * (NOPE + rope) ** -0.5, dim=-1)
    naive = torch.einsum("bhl,bhlv->bhv", p, values)
    return (step(q_nope, q_pe, cache) - naive).abs().max().item()


def print_table(rows: list[dict]) -> None:
    print("batch | context | heads | step | attention only | cache GB | effective TB/s")
    for r in rows:
        if "error" in r:
            print(f"{r['batch']} | {r['context']} | error: {r['error']}")
            continue
        print(f"{r['batch']} | {r['context']} | {r['heads']} | {r['step_s'] * 1e6:.1f} us | "
              f"{r['attention_s'] * 1e6:.1f} us | {r['cache_bytes'] / 1e9:.3f} | {r['effective_tbps']:.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch    # here, not at the top: --help and the project's tests run without torch

    dev = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    heads, rank, rope = (HEADS // args.tp, KV_LORA_RANK, ROPE) if not args.dry_run else (4, 32, 8)
    if args.dry_run:
        args.batches, args.contexts, args.reps, args.warmup = [1, 2], [16, 64], 1, 0
    timed = make_timer(torch, dev, args.reps, args.warmup)
    t0, rows = time.time(), []
    for ctx in args.contexts:
        for batch in args.batches:
            if batch * ctx * (rank + rope) * 2 > MAX_CACHE_BYTES:
                continue
            try:
                rows.append(measure(torch, dev, dt, heads, rank, rope, batch, ctx, timed))
            except Exception as exc:      # out of memory: keep what was measured
                rows.append({"batch": batch, "context": ctx, "error": repr(exc)[:300]})
            if dev == "cuda":
                torch.cuda.empty_cache()
    res = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
           "dry_run": args.dry_run, "dtype": str(dt).replace("torch.", ""), "tp": args.tp,
           "shape": {"heads_per_gpu": heads, "kv_lora_rank": rank, "qk_rope_head_dim": rope,
                     "qk_nope_head_dim": NOPE, "v_head_dim": V_HEAD},
           "form": "absorbed: q_nope @ W_UK, softmax(q . latent cache) @ latent, then @ W_UV (torch.bmm)",
           "reps": args.reps, "warmup": args.warmup, "rows": rows, "wall_s": time.time() - t0}
    if args.dry_run:
        res["absorbed_vs_naive_max_error"] = absorbed_error(torch, heads, rank, rope)
    out = Path(args.out or os.environ.get("OUT") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_mla_decode_bench.json").write_text(json.dumps(res, indent=1))
    print_table(rows)
    print(f"wrote {out / 'gpu_mla_decode_bench.json'}")
    failed = any("error" in r for r in rows) or res.get("absorbed_vs_naive_max_error", 0.0) > 1e-9
    return 1 if args.dry_run and failed else 0     # a dry run is a check


if __name__ == "__main__":
    sys.exit(main())
