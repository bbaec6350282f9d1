"""Read a GuideLLM load-test report and say whether the plan holds: measured p95 TTFT and TPOT at
the planned rate, and the measured capacity, next to the plan and the simulation. Exit code 0
when it holds, 1 when it does not (or the report cannot show it), 2 on bad input.

The parser and the verdict live in `proving/loadtest_report.py`; this is the command.
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from .errors import fail


def loadtest_report(
    results: Path = typer.Argument(..., help="GuideLLM JSON report (or a folder holding benchmarks.json)."),
    stack: str = typer.Option("prod", help="The plan to judge it against: stacks/Pulumi.STACK.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    # Imported here, not at the top: its pydantic models cost every other command ~0.2 s.
    from proving.loadtest_report import ReportError, assess, read_report, simulate_plan

    from .stack_arg import load

    try:
        report = read_report(results)
    except ReportError as exc:
        fail(f"RESULTS: {exc}")
    p = load(stack, plan=True).plan
    if p.request.workload.qps is None:
        fail(f"--stack {stack}: the workload is closed-loop; a rate-based load test needs an open-loop qps")
    verdict = assess(report, p, simulate_plan(p))
    if as_json:
        print(json.dumps({"stack": stack, **verdict}, indent=2))
    else:
        _print(verdict, stack)
    if not verdict["holds"]:
        raise typer.Exit(1)


def _print(v: dict, stack: str) -> None:
    from rich.console import Console
    from rich.table import Table

    # markup off: the report's text (target, model, strategy) prints as the characters it holds
    console = Console(width=max(Console().width, 110), markup=False, highlight=False)
    r = v["report"]
    console.print(f"GuideLLM {r['guidellm_version']} against {r['target']} ({r['model']}); plan: stack {stack}.")
    # ok / errors / cut: completed, errored (and stalled), cancelled at the step's end (no verdict on the server)
    steps = Table("strategy", "rate", "achieved", "ok / errors / cut", "TTFT mean", "TTFT p95", "TPOT mean",
                  "TPOT p95", "meets SLOs")
    for b in r["benchmarks"]:
        short = ("" if b["rate"] is None else " (over)" if not b["sent_as_offered"]   # the client over-sent
                 else " (short)" if not b["reached_rate"]                               # did not test its rate
                 else " (late)" if not b["kept_schedule"] else "")                     # the client fell behind
        steps.add_row(b["strategy"], "-" if b["rate"] is None else f"{b['rate']:g}", f"{b['requests_per_s']:.2f}{short}",
                      f"{b['successful']} / {b['errored'] + b['stalled']} / {b['incomplete']}", f"{b['ttft_ms']['mean']:.1f}",
                      f"{b['ttft_ms']['p95']:.1f}", f"{b['tpot_ms']['mean']:.1f}", f"{b['tpot_ms']['p95']:.1f}",
                      "yes" if b["meets_slos"] else "no")
    console.print(steps)
    console.print("errors: errored, and cut requests beyond what the step's end explains (stalled); cut: cancelled "
                  "by GuideLLM when the step's time was up, not counted against the error budget. A step marked "
                  "over, short or late did not test its rate.")
    m, pl, s = v["measured"], v["plan"], v["simulation"]
    cmp = Table(f"at {pl['qps']:g} QPS on {pl['replicas']} replica(s)", "measured", "plan (analytic)", "simulation")
    cmp.add_row("TTFT p95 (ms)", _n(m["ttft_p95_ms"]), _n(pl["ttft_p95_ms"]), _n(s["ttft_p95_ms"]))
    cmp.add_row("TPOT p95 (ms)", _n(m["tpot_p95_ms"]), _n(pl["tpot_p95_ms"]), _n(s["tpot_p95_ms"]))
    cmp.add_row("capacity (QPS)", ("" if m["capacity_reached"] else ">= ") + _n(m["capacity_qps"]),
                _n(pl["capacity_qps"]), _n(s["capacity_qps"]))
    console.print(cmp)
    for c in v["checks"]:
        console.print(f"{'PASS' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
    console.print("The plan holds." if v["holds"] else "The plan does not hold (see FAIL above).")


def _n(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def register(app: typer.Typer) -> None:
    app.command("loadtest-report", help=__doc__.split("\n\n")[0])(loadtest_report)
