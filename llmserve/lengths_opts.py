"""`llmserve size`'s words on the lengths (their form, the percentiles sized for, the served limit)
and on the prefix cache the plan counts on."""
from __future__ import annotations


def lengths_line(w: dict) -> str:
    """The report's line on the lengths: their form, the percentiles sized for, the served limit."""
    d = w["lengths"]
    if d["form"] == "fixed":         # the title says them already (and the README's reference output)
        return ""
    fields = []
    for name in ("input_tokens", "output_tokens"):
        f = d[name]
        fields.append(f"{name.split('_')[0]} mean {f['mean']:,.0f}, p50 {f['p50']:,}, p95 {f['p95']:,}, max {f['max']:,}")
    source = f" from {d['source']} ({d['requests']:,} requests)" if "source" in d else ""
    return (f"Lengths ({d['form']}{source}): {'; '.join(fields)}. Served max_model_len {w['served_max_model_len']:,} "
            "tokens: a longer request gets vLLM's 400.")


def prefix_line(d: dict) -> str:
    """The report's words on the prefix cache the plan counts on, with and without it."""
    pc = d.get("prefix_caching")
    if not pc:
        return ""

    def fig(x, unit):
        return "unstable" if x is None else f"{x:,.0f} {unit}" if unit == "ms" else f"{x:.1f} {unit}"
    w, wo = pc["with"], pc["without"]
    return (f"Prefix cache: {pc['cached_prompt_tokens']:,} prompt tokens per request from the cache "
            f"(--enable-prefix-caching): TTFT {fig(w['ttft_ms'], 'ms')} (p95 {fig(w['ttft_p95_ms'], 'ms')}), "
            f"capacity {fig(w['capacity_per_replica_qps'], 'QPS')} per replica; without it TTFT "
            f"{fig(wo['ttft_ms'], 'ms')} (p95 {fig(wo['ttft_p95_ms'], 'ms')}), capacity "
            f"{fig(wo['capacity_per_replica_qps'], 'QPS')}.")
