"""Read a GuideLLM load-test report and say whether the plan holds: measured p95 TTFT and TPOT at
the planned rate, and the measured capacity, next to the plan and the simulation. Exit code 0
when it holds, 1 when it does not (or the report cannot show it), 2 on bad input.

The parser reads GuideLLM's JSON report schema version 2 (`metadata.version: 2`), written by
GuideLLM 0.8 (tested on a 0.8.0.dev18 capture; the LoadTest job pins 0.8.1). TPOT is GuideLLM's
`inter_token_latency_ms` (time per output token after the first, as vLLM and the plan count it);
GuideLLM's own `time_per_output_token_ms` divides the whole latency by all tokens, first included.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import typer

from .errors import fail

SCHEMA_VERSION = 2
RATE_STRATEGIES = ("constant", "poisson")   # GuideLLM strategies with an offered rate
RATE_MATCH = 0.05        # a benchmark is "at the planned rate" within 5% of it
ERROR_BUDGET = 0.01      # at most 1% errored requests in a step that counts as meeting the SLOs


class ReportError(ValueError):
    """The file is not a GuideLLM report this parser reads; the message names the key."""


@dataclass(frozen=True)
class Stat:
    mean: float
    p50: float
    p95: float
    p99: float
    count: int


@dataclass(frozen=True)
class Benchmark:
    strategy: str
    rate: float | None          # offered requests/s (constant and poisson strategies)
    requests_per_s: float       # achieved, successful requests
    duration_s: float
    successful: int
    errored: int
    incomplete: int
    ttft_ms: Stat
    tpot_ms: Stat               # inter-token latency
    e2e_ms: Stat

    @property
    def error_share(self) -> float:
        total = self.successful + self.errored + self.incomplete
        return (self.errored + self.incomplete) / total if total else 1.0

    def meets(self, ttft_slo_ms: float, tpot_slo_ms: float) -> bool:
        """The plan's SLOs are means: mean TTFT and mean TPOT within them, errors within budget."""
        return (self.successful > 0 and self.ttft_ms.mean <= ttft_slo_ms and self.tpot_ms.mean <= tpot_slo_ms
                and self.error_share <= ERROR_BUDGET)


@dataclass(frozen=True)
class Report:
    guidellm_version: str
    target: str
    model: str
    benchmarks: tuple[Benchmark, ...]


def _get(obj, *path):
    cur = obj
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            raise ReportError(f"missing key {'.'.join(str(p) for p in path)}")
        cur = cur[key]
    return cur


def _stat(metrics: dict, name: str, scale: float = 1.0) -> Stat:
    s = _get(metrics, name, "successful")
    pct = _get(s, "percentiles")
    return Stat(mean=scale * s["mean"], p50=scale * pct["p50"], p95=scale * pct["p95"], p99=scale * pct["p99"],
                count=int(s["count"]))


def parse_report(data: dict) -> Report:
    version = _get(data, "metadata", "version")
    if version != SCHEMA_VERSION:
        raise ReportError(f"report schema version {version}; this parser reads version {SCHEMA_VERSION} "
                          "(GuideLLM 0.8)")
    benches = []
    for i, b in enumerate(_get(data, "benchmarks")):
        if b is None or b.get("type_") != "generative_benchmark":
            continue
        try:
            strategy = _get(b, "config", "strategy")
            m = _get(b, "metrics")
            totals = _get(m, "request_totals")
            benches.append(Benchmark(
                strategy=strategy["type_"],
                rate=float(strategy["rate"]) if strategy["type_"] in RATE_STRATEGIES else None,
                requests_per_s=float(_get(m, "requests_per_second", "successful", "mean")),
                duration_s=float(_get(b, "duration")),
                successful=int(totals["successful"]), errored=int(totals["errored"]),
                incomplete=int(totals["incomplete"]),
                ttft_ms=_stat(m, "time_to_first_token_ms"), tpot_ms=_stat(m, "inter_token_latency_ms"),
                e2e_ms=_stat(m, "request_latency", scale=1e3),       # seconds in the report
            ))
        except (ReportError, KeyError, TypeError) as exc:
            raise ReportError(f"benchmarks[{i}]: {exc}") from None
    backend = _get(data, "config", "spec", "backend")
    return Report(guidellm_version=str(_get(data, "metadata", "guidellm_version")),
                  target=str(backend.get("target")), model=str(backend.get("model")), benchmarks=tuple(benches))


def read_report(path: Path) -> Report:
    if path.is_dir():
        path = path / "benchmarks.json"       # GuideLLM's default file name in a folder
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a GuideLLM report (a JSON object with metadata, config, benchmarks)")
    return parse_report(data)


def assess(report: Report, plan, simulation: dict) -> dict:
    """The verdict: each check with its numbers, and whether the plan holds."""
    w = plan.request.workload
    ttft_slo, tpot_slo = 1e3 * w.ttft_slo_s, 1e3 * w.tpot_slo_s
    rated = sorted((b for b in report.benchmarks if b.rate is not None), key=lambda b: b.rate)
    at_plan = [b for b in rated if abs(b.rate - w.qps) <= RATE_MATCH * w.qps]
    good = [b for b in rated if b.meets(ttft_slo, tpot_slo)]
    reached = any(not b.meets(ttft_slo, tpot_slo) and b.rate > max((g.rate for g in good), default=0) for b in rated)
    measured_cap = max((b.rate for b in good), default=0.0)
    # With no redundancy the plan claims only that its node carries the load.
    share_left = (plan.replicas if plan.redundancy == "none" else plan.replicas_after_loss) / plan.replicas
    checks = []
    if at_plan:
        b = at_plan[0]
        ok = b.meets(ttft_slo, tpot_slo)
        checks.append({"name": "slos_at_planned_rate", "ok": ok, "detail": (
            f"at {b.rate:g} QPS: mean TTFT {b.ttft_ms.mean:.1f} ms (SLO {ttft_slo:g}), mean TPOT "
            f"{b.tpot_ms.mean:.1f} ms (SLO {tpot_slo:g}), errors {100 * b.error_share:.1f}% "
            f"(budget {100 * ERROR_BUDGET:g}%)")})
    else:
        rates = ", ".join(f"{b.rate:g}" for b in rated) or "none"
        checks.append({"name": "slos_at_planned_rate", "ok": False,
                       "detail": f"no constant or poisson step at the planned {w.qps:g} QPS (rates: {rates})"})
    after_loss = measured_cap * share_left
    bound = "" if reached else "at least "
    loss = (f"{plan.replicas_after_loss} left after losing {plan.lost_domain} carry" if plan.redundancy != "none"
            else "no failure domain to lose (one node); they carry")
    checks.append({"name": "n_plus_one", "ok": after_loss >= w.qps, "detail": (
        f"measured capacity {bound}{measured_cap:g} QPS on {plan.replicas} replica(s); {loss} {bound}"
        f"{after_loss:.2f} QPS against {w.qps:g} planned")})
    return {
        "report": {"guidellm_version": report.guidellm_version, "target": report.target, "model": report.model,
                   "benchmarks": [{**asdict(b), "error_share": round(b.error_share, 4),
                                   "meets_slos": b.meets(ttft_slo, tpot_slo)} for b in report.benchmarks]},
        "measured": {
            "ttft_p95_ms": at_plan[0].ttft_ms.p95 if at_plan else None,
            "tpot_p95_ms": at_plan[0].tpot_ms.p95 if at_plan else None,
            "capacity_qps": measured_cap, "capacity_reached": reached,
        },
        "plan": {"qps": w.qps, "replicas": plan.replicas, "ttft_slo_ms": ttft_slo, "tpot_slo_ms": tpot_slo,
                 **simulation.pop("analytic"), "capacity_qps": round(plan.capacity_qps, 3),
                 "capacity_after_zone_loss_qps": round(plan.capacity_after_zone_loss_qps, 3)},
        "simulation": simulation,
        "checks": checks,
        "holds": all(c["ok"] for c in checks),
    }


def simulate_plan(plan, duration_s: float = 600.0) -> dict:
    """The simulation and the analytic model at the planned rate on all replicas, and the capacity."""
    from simulator import config_from_plan, replica_model, simulate, simulated_capacity_qps, summarize

    w = plan.request.workload
    cfg = config_from_plan(plan, duration_s)
    stats = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
    point = replica_model(plan).at(w.qps / plan.replicas)
    return {
        "analytic": {"ttft_p95_ms": round(point.ttft_p95_ms, 3), "tpot_p95_ms": round(point.tpot_p95_ms, 3)},
        "ttft_p95_ms": stats["ttft_ms"]["p95"], "tpot_p95_ms": stats["tpot_ms"]["p95"],
        "capacity_qps": round(plan.replicas * simulated_capacity_qps(plan), 3),
        "duration_s": duration_s,
    }


def loadtest_report(
    results: Path = typer.Argument(..., help="GuideLLM JSON report (or a folder holding benchmarks.json)."),
    stack: str = typer.Option("prod", help="The plan to judge it against: stacks/Pulumi.STACK.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    from settings import SettingsError, load_stack
    from sizing.model import SizingError
    from sizing.planner import plan as make_plan

    try:
        report = read_report(results)
    except ReportError as exc:
        fail(f"RESULTS: {exc}")
    try:
        p = make_plan(load_stack(stack).plan_request())
    except SettingsError as exc:
        fail(f"--stack {stack}: " + "; ".join(exc.problems))
    except SizingError as exc:
        fail(f"--stack {stack}: {exc}")
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

    console = Console(width=max(Console().width, 110))
    r = v["report"]
    console.print(f"GuideLLM {r['guidellm_version']} against {r['target']} ({r['model']}); plan: stack {stack}.")
    steps = Table("strategy", "rate", "achieved", "ok / errors", "TTFT mean", "TTFT p95", "TPOT mean", "TPOT p95",
                  "meets SLOs")
    for b in r["benchmarks"]:
        steps.add_row(b["strategy"], "-" if b["rate"] is None else f"{b['rate']:g}", f"{b['requests_per_s']:.2f}",
                      f"{b['successful']} / {b['errored'] + b['incomplete']}", f"{b['ttft_ms']['mean']:.1f}",
                      f"{b['ttft_ms']['p95']:.1f}", f"{b['tpot_ms']['mean']:.1f}", f"{b['tpot_ms']['p95']:.1f}",
                      "yes" if b["meets_slos"] else "no")
    console.print(steps)
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
