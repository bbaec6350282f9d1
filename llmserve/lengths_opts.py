"""`llmserve size`'s length options: --input-tokens / --output-tokens as a number or as
percentiles (p50=N,p95=N,max=N), or --lengths FILE (observed lengths, CSV or JSONL), over the
stack's lengths. Errors name the flag; exit 2."""
from __future__ import annotations

from pathlib import Path

from settings.files import FileInputError, read_text
from sizing.model import Workload
from sizing.traffic import LengthDistribution, LengthsError, Percentiles, from_percentiles, parse_length_option
from sizing.traffic import parse_lengths_text

from .errors import fail


def lengths_from_options(base: Workload, input_tokens: str | None, output_tokens: str | None,
                         lengths: Path | None) -> tuple[int, int, LengthDistribution | None]:
    """(mean input, mean output, distribution or None for fixed lengths) from the flags given,
    else the stack's (or the reference's)."""
    if lengths is not None:
        given = [f for f, v in (("--input-tokens", input_tokens), ("--output-tokens", output_tokens)) if v is not None]
        if given:
            fail(f"--lengths and {' and '.join(given)}: give the lengths one way (a file of observed lengths, "
                 "or numbers/percentiles), not both")
        try:
            dist = parse_lengths_text(read_text(lengths, "lengths file (CSV or JSONL)"), str(lengths))
        except (FileInputError, LengthsError) as exc:
            fail(f"--lengths: {exc}")
        return round(dist.mean_input), round(dist.mean_output), dist
    if input_tokens is None and output_tokens is None:
        return base.input_tokens, base.output_tokens, base.lengths
    try:
        ins = parse_length_option(input_tokens, "--input-tokens") if input_tokens is not None else None
        outs = parse_length_option(output_tokens, "--output-tokens") if output_tokens is not None else None
    except LengthsError as exc:
        fail(str(exc))
    ins = ins if ins is not None else _base_form(base, "input")
    outs = outs if outs is not None else _base_form(base, "output")
    if isinstance(ins, int) and isinstance(outs, int):
        return ins, outs, None
    dist = from_percentiles(_percentiles(ins), _percentiles(outs))
    return round(dist.mean_input), round(dist.mean_output), dist


def _base_form(base: Workload, field: str) -> int | Percentiles:
    """The stack's length for a field the flags leave alone: its number, or its percentiles."""
    d = base.lengths
    if d is None:
        return base.input_tokens if field == "input" else base.output_tokens
    values = d.inputs if field == "input" else d.outputs
    q = d.input_quantile if field == "input" else d.output_quantile
    return Percentiles(q(0.5), q(0.95), max(values))


def _percentiles(v: int | Percentiles) -> Percentiles:
    return Percentiles(v, v, v) if isinstance(v, int) else v


def lengths_line(w: dict) -> str:
    """The report's line on the lengths: their form, the percentiles sized for, the served limit."""
    d = w["lengths"]
    fields = []
    for name in ("input_tokens", "output_tokens"):
        f = d[name]
        fields.append(f"{name.split('_')[0]} mean {f['mean']:,.0f}, p50 {f['p50']:,}, p95 {f['p95']:,}, max {f['max']:,}")
    source = f" from {d['source']} ({d['requests']:,} requests)" if "source" in d else ""
    return (f"Lengths ({d['form']}{source}): {'; '.join(fields)}. Served max_model_len {w['max_model_len']:,} "
            "tokens: a longer request gets vLLM's 400.")


def prefix_line(d: dict) -> str:
    """The report's words on the prefix cache the plan counts on, with and without it."""
    pc = d.get("prefix_caching")
    if not pc:
        return ""

    def fig(x, unit):
        return "unstable" if x is None else f"{x:,.0f} {unit}" if unit == "ms" else f"{x:.1f} {unit}"
    w, wo = pc["with"], pc["without"]
    return (f"\nPrefix cache: {pc['cached_prompt_tokens']:,} prompt tokens per request from the cache "
            f"(--enable-prefix-caching): TTFT {fig(w['ttft_ms'], 'ms')} (p95 {fig(w['ttft_p95_ms'], 'ms')}), "
            f"capacity {fig(w['capacity_per_replica_qps'], 'QPS')} per replica; without it TTFT "
            f"{fig(wo['ttft_ms'], 'ms')} (p95 {fig(wo['ttft_p95_ms'], 'ms')}), capacity "
            f"{fig(wo['capacity_per_replica_qps'], 'QPS')}.")
