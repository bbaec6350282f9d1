"""What every `simulate` run (aggregated, disaggregated, a load over time) prints the same way."""
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


def emit(data: dict, as_json: bool, show) -> None:
    """The JSON, or `show()`'s tables; then exit 1 when a request was lost."""
    import json

    import typer
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        show()
    if data["requests_lost"]:
        raise typer.Exit(1)
