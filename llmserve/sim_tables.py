"""The tables every `simulate` run prints the same way (aggregated, disaggregated)."""
from __future__ import annotations


def latency_table(data: dict):
    """TTFT, TPOT, queue and end-to-end latency at the mean, p50, p95 and p99 (ms): a rich Table."""
    from rich.table import Table     # on use: the CLI imports every command's module at start
    table = Table("latency (ms)", "mean", "p50", "p95", "p99")
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("queue_ms", "queue"), ("e2e_ms", "end to end")):
        table.add_row(label, *(ms(data[key][q]) for q in ("mean", "p50", "p95", "p99")))
    return table


def ms(x) -> str:
    return "-" if x is None else f"{x:,.1f}"
