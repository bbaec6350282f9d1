"""GuideLLM's load-test report, parsed into typed models, and the verdict on the plan.

The parser reads GuideLLM's JSON report schema version 2 (`metadata.version: 2`), written by
GuideLLM 0.8 (tested on a 0.8.0.dev18 capture; the LoadTest job pins 0.8.1). Every field it reads
is declared below (pydantic, strict numbers, finite only); the first one that does not fit is
reported with its path, e.g. `benchmarks[1].metrics.inter_token_latency_ms.successful.mean`.
TPOT is GuideLLM's `inter_token_latency_ms` (time per output token after the first, as vLLM and
the plan count it); GuideLLM's own `time_per_output_token_ms` divides the whole latency by all
tokens, first included.

The verdict counts a step only at the rate it achieved: a step whose successful requests per
second fall short of its offered rate did not test that rate, so it can neither show that the
SLOs hold at the planned rate nor raise the measured capacity.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from inputs import json_doc, json_prune
from inputs import InputError
from inputs.files import check_path_length, iter_regular_file
from inputs.untrusted import printable, redact_text, redact_url

SCHEMA_VERSION = 2
RATE_STRATEGIES = ("constant", "poisson")   # GuideLLM strategies with an offered rate
RATE_MATCH = 0.05        # a benchmark is "at the planned rate" within 5% of it
ACHIEVED_SHARE = 0.9     # a step counts when it achieved >= 90% of its offered rate, less Poisson noise:
                         # a shortfall beyond 10% means the client or the quota held it back
# The requests a step counts are Poisson: over a measured window of W s at r QPS, r W +- sqrt(r W). The
# shortfall allowed adds POISSON_SIGMAS of that noise: 0.6 QPS at 10 QPS over prod's 248-s window, 1.9 over
# a 24-s one (a 40-s step of `make loadtest-local`), where 10% alone refuses one healthy step in ten.
POISSON_SIGMAS = 3.0
# Too few requests test no rate, whatever they achieved: at least this many expected in the measured window.
MIN_COUNTED = 50
# A step's completions per second cannot exceed the successful requests its window holds per second:
# 1.5x (and 1 request/s) leaves room for rounding and still refuses a 1000x claim.
MAX_OVER_OFFERED = 1.5
ERROR_BUDGET = 0.01      # at most 1% errored requests in a step that counts as meeting the SLOs
# Requests GuideLLM cancels when a step's time is up are "incomplete" (guidellm 0.8.1 scheduler/constraints/
# request.py L240-242 stops processing; benchmark/schemas/accumulator.py L895-897 files a request cancelled
# after it started as incomplete): not server errors. The step's end explains up to what Little's law puts
# in flight at the p99 request latency, twice over; beyond that a request still running is a stalled one,
# and the excess counts as errored.
INCOMPLETE_EXPLAINED = 2.0
# The client kept the arrival schedule when its p95 dispatch delay (a request's actual start minus its
# scheduled one, guidellm 0.8.1 schemas/base/request_stats.py L126-148, reported as metrics.
# request_dispatch_delay, benchmark/schemas/metrics.py L1001) is under the mean gap between arrivals
# and under a tenth of the TTFT SLO: a later client sends bunched arrivals, and GuideLLM's TTFT, timed
# from the actual start, leaves its lag out.
DISPATCH_LAG_TTFT_SHARE = 0.1
# A prod sweep's report is 200-330 MB, 6.2-6.6 KB per request: GuideLLM keeps each request's stats and
# its prompt and output text. The reader holds only the statistics (the 0.8.0.dev18 capture's are 96 KB
# for two steps, ~30 KB a step), at most MAX_KEPT_CHARS (json.loads needs ~10x that), and skips the rest
# as it streams past, so the file's size costs time (~3 s per 100 MB, docs/proving.md), not memory.
MAX_REPORT_BYTES = 4 * 1024**3
MAX_KEPT_CHARS = 16 * 1024**2
MAX_DEPTH = 64           # a report's statistics nest ~8 deep


class ReportError(ValueError):
    """The file is not a GuideLLM report this parser reads; the message names the field."""


# -- the report as GuideLLM writes it (only what is read) ------------------------------------
class _Fields(BaseModel):
    # Unknown fields are GuideLLM's to add; numbers must be numbers (no "12" strings), finite.
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)


NonNegative = Annotated[float, Field(ge=0)]
# The report is not trusted text: every string it gives is printed, so it loses terminal escapes and
# control characters here (inputs.untrusted), and a URL its credentials and secret query values.
Text = Annotated[str, AfterValidator(lambda v: printable(redact_text(v)))]
Url = Annotated[str, AfterValidator(lambda v: printable(redact_url(v)))]
Count = Annotated[int, Field(ge=0)]


class Percentiles(_Fields):
    p50: NonNegative
    p90: NonNegative
    p95: NonNegative
    p99: NonNegative

    @model_validator(mode="after")
    def _ordered(self):
        return _ordered(self)


class SignedPercentiles(_Fields):
    """A delay's percentiles: a request started a hair before its scheduled time is a negative one."""
    p50: float
    p90: float
    p95: float
    p99: float

    @model_validator(mode="after")
    def _ordered(self):
        return _ordered(self)


def _ordered(self):
    values = (self.p50, self.p90, self.p95, self.p99)
    if any(a > b for a, b in zip(values, values[1:])):
        raise ValueError(f"percentiles out of order (p50 {self.p50:g}, p90 {self.p90:g}, p95 {self.p95:g}, "
                         f"p99 {self.p99:g}); a report whose statistics contradict themselves is not judged")
    return self


class Distribution(_Fields):
    mean: NonNegative
    count: Count
    percentiles: Percentiles


class SignedDistribution(_Fields):
    mean: float
    count: Count
    percentiles: SignedPercentiles


class DelayBySuccess(_Fields):
    successful: SignedDistribution


class BySuccess(_Fields):
    successful: Distribution


class RateBySuccess(_Fields):
    successful: Distribution


class RequestTotals(_Fields):
    successful: Count
    errored: Count
    incomplete: Count


class Metrics(_Fields):
    request_totals: RequestTotals
    requests_per_second: RateBySuccess
    time_to_first_token_ms: BySuccess
    inter_token_latency_ms: BySuccess
    request_latency: BySuccess           # seconds
    # seconds late against the arrival schedule; GuideLLM 0.8.1 writes it for the constant and poisson
    # strategies (metrics.py L1001-1009, L1276-1283), 0.8.0.dev18 did not
    request_dispatch_delay: DelayBySuccess | None = None


class Strategy(_Fields):
    type_: Text
    rate: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _rate_when_rated(self):
        if self.type_ in RATE_STRATEGIES and self.rate is None:
            raise ValueError(f"a {self.type_} strategy needs its offered rate")
        return self


class BenchmarkConfig(_Fields):
    strategy: Strategy


class GenerativeBenchmark(_Fields):
    type_: Literal["generative_benchmark"]
    config: BenchmarkConfig
    metrics: Metrics
    duration: NonNegative

    @model_validator(mode="after")
    def _consistent(self):
        """Statistics that contradict each other say the file was edited or broken: refused, with the reason."""
        totals, rate = self.metrics.request_totals, self.config.strategy.rate
        achieved = self.metrics.requests_per_second.successful.mean
        if self.duration == 0 and totals.successful + totals.errored + totals.incomplete > 0:
            raise ValueError(f"duration 0 s with {totals.successful + totals.errored + totals.incomplete} requests; "
                             "a report whose statistics contradict themselves is not judged")
        # Completions per second over the window cannot exceed the requests the window holds (those
        # overlapping it), beyond rounding; a client that sent more than it offered is no contradiction
        # (Benchmark.sent_as_offered judges that), a claimed rate the requests cannot back is.
        if self.duration > 0 and achieved > MAX_OVER_OFFERED * totals.successful / self.duration + 1:
            raise ValueError(f"achieved {achieved:g} requests/s over {self.duration:g} s with {totals.successful} "
                             "successful requests; a report whose statistics contradict themselves is not judged")
        return self


class Backend(_Fields):
    target: Url | None = None
    model: Text | None = None


class Spec(_Fields):
    backend: Backend


class RunConfig(_Fields):
    spec: Spec


class Metadata(_Fields):
    version: int
    guidellm_version: Text


class ReportHead(_Fields):
    metadata: Metadata
    config: RunConfig
    benchmarks: list[dict[str, Any]]     # each generative one is read below; other kinds are skipped


# -- what the verdict works with ---------------------------------------------------------------
@dataclass(frozen=True)
class Stat:
    mean: float
    p50: float
    p95: float
    p99: float
    count: int
    p90: float | None = None

    def at(self, statistic: str) -> float:
        """The figure the SLO is stated at (the workload's `slo_statistic`: mean, p50, p90, p95, p99)."""
        value = getattr(self, statistic)
        return self.p95 if value is None else value      # p90 missing: judge at the stricter p95


@dataclass(frozen=True)
class Benchmark:
    strategy: str
    rate: float | None          # offered requests/s (constant and poisson strategies)
    requests_per_s: float       # achieved, successful requests
    duration_s: float
    successful: int
    errored: int
    incomplete: int             # cancelled by GuideLLM while running (the step's end), not failed by the server
    ttft_ms: Stat
    tpot_ms: Stat               # inter-token latency
    e2e_ms: Stat
    dispatch_delay_ms: Stat | None = None     # how late the client sent requests (GuideLLM 0.8.1 and later)

    @property
    def incomplete_explained(self) -> int:
        """Incomplete requests the step's end accounts for: INCOMPLETE_EXPLAINED x (rate x p99 request
        latency), the requests Little's law puts in flight when the step is cut."""
        rate = self.rate if self.rate is not None else self.requests_per_s
        return math.ceil(INCOMPLETE_EXPLAINED * rate * self.e2e_ms.p99 / 1e3)

    @property
    def stalled(self) -> int:
        """Incomplete requests beyond what the step's end explains: stalled, counted as errored."""
        return max(0, self.incomplete - self.incomplete_explained)

    @property
    def error_share(self) -> float:
        """Errored (and stalled) requests among those that finished: the cut ones are no verdict on the server."""
        failed = self.errored + self.stalled
        total = self.successful + failed
        return failed / total if total else 1.0

    @property
    def reached_rate(self) -> bool:
        """It achieved (nearly) the rate it offered, or more (sent_as_offered judges that), in a window
        long enough to test a rate."""
        return self.long_enough and self.requests_per_s >= self.least_achieved

    @property
    def sent_as_offered(self) -> bool:
        """It did not achieve more than it offered, beyond the Poisson noise (mirroring least_achieved):
        GuideLLM 0.8.1's start-of-step race (scheduler/strategies.py L163-165 against L677-678: a worker
        adds its gaps to the clock's initial -1.0) can send a whole step far above its rate. Such a
        step tested a heavier load than it names: within the SLOs it shows them at its offered rate
        (and that rate, not more, counts as capacity); outside them it shows nothing, since the fleet
        was not given the rate it names."""
        if self.rate is None or self.duration_s <= 0:
            return True
        return self.requests_per_s <= (2 - ACHIEVED_SHARE) * self.rate + self.poisson_allowance

    @property
    def long_enough(self) -> bool:
        """Its measured window holds enough requests at its rate to test that rate."""
        return self.rate is not None and self.rate * self.duration_s >= MIN_COUNTED

    @property
    def least_achieved(self) -> float:
        """The least achieved rate that still tested the offered one: 90% of it, less the Poisson noise
        of the requests counted over the measured window (POISSON_SIGMAS standard deviations)."""
        if self.rate is None:
            return 0.0
        return max(0.0, ACHIEVED_SHARE * self.rate - self.poisson_allowance)

    @property
    def poisson_allowance(self) -> float:
        """POISSON_SIGMAS standard deviations of the rate a Poisson count over the window shows."""
        if self.rate is None or self.duration_s <= 0:
            return 0.0
        return POISSON_SIGMAS * math.sqrt(self.rate / self.duration_s)

    def dispatch_lag_limit_ms(self, ttft_slo_ms: float) -> float | None:
        if self.rate is None:
            return None
        return min(1e3 / self.rate, DISPATCH_LAG_TTFT_SHARE * ttft_slo_ms)

    def kept_schedule(self, ttft_slo_ms: float) -> bool:
        """The client sent on time (p95 dispatch delay within its limit); true when the report does not say."""
        limit = self.dispatch_lag_limit_ms(ttft_slo_ms)
        return self.dispatch_delay_ms is None or limit is None or self.dispatch_delay_ms.p95 <= limit

    def meets(self, ttft_slo_ms: float, tpot_slo_ms: float, statistic: str = "mean") -> bool:
        """TTFT and TPOT within the SLOs at the plan's statistic (mean, p50, ... p99), errors within budget."""
        return (self.successful > 0 and self.ttft_ms.at(statistic) <= ttft_slo_ms
                and self.tpot_ms.at(statistic) <= tpot_slo_ms and self.error_share <= ERROR_BUDGET)

    def tested(self, ttft_slo_ms: float) -> bool:
        """It tested its rate: achieved it, and the client kept the arrival schedule."""
        return self.reached_rate and self.kept_schedule(ttft_slo_ms)


@dataclass(frozen=True)
class Report:
    guidellm_version: str
    target: str
    model: str
    benchmarks: tuple[Benchmark, ...]


def _path(loc: tuple, prefix: str = "") -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<report>"


def _first_problem(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "missing"
    return f"{_path(tuple(err['loc']), prefix)}: {msg}"


def _stat(d: Distribution, scale: float = 1.0) -> Stat:
    p = d.percentiles
    return Stat(mean=scale * d.mean, p50=scale * p.p50, p95=scale * p.p95, p99=scale * p.p99, count=d.count,
                p90=scale * p.p90)


def _benchmark(b: GenerativeBenchmark) -> Benchmark:
    m, s = b.metrics, b.config.strategy
    lag = m.request_dispatch_delay
    return Benchmark(
        strategy=s.type_, rate=s.rate if s.type_ in RATE_STRATEGIES else None,
        requests_per_s=m.requests_per_second.successful.mean, duration_s=b.duration,
        successful=m.request_totals.successful, errored=m.request_totals.errored,
        incomplete=m.request_totals.incomplete,
        ttft_ms=_stat(m.time_to_first_token_ms.successful), tpot_ms=_stat(m.inter_token_latency_ms.successful),
        e2e_ms=_stat(m.request_latency.successful, scale=1e3),
        dispatch_delay_ms=None if lag is None or lag.successful.count == 0 else _stat(lag.successful, scale=1e3))


# Other load generators' result files, told apart by the keys they always write, and refused by name:
# no real capture of either is at hand to test a reader on, so neither is read (docs/proving.md).
OTHER_CLIENTS = (
    # vLLM 0.29.0 `vllm bench serve --save-result`: vllm/benchmarks/serve.py L2226-2262 (date, endpoint_type,
    # backend, model_id, num_prompts, request_rate, ...) merged with the result, L1271-1292 (duration, completed,
    # failed, request_throughput, ...); no version field.
    ("a vllm bench serve result", {"date", "backend", "completed", "request_throughput"}),
    # kubernetes-sigs inference-perf 0.7.0 `*_lifecycle_metrics.json`: inference_perf/reportgen/base.py
    # L389-397 (ResponsesSummary: benchmark_time_seconds, load_summary, successes, failures); no version field.
    ("an inference-perf lifecycle-metrics report", {"benchmark_time_seconds", "load_summary", "successes", "failures"}),
)
NOT_GUIDELLM = "not a GuideLLM report: this reads GuideLLM 0.8.x benchmarks.json"


def parse_report(data: Any) -> Report:
    if not isinstance(data, dict):
        raise ReportError("not a GuideLLM report (a JSON object with metadata, config, benchmarks)")
    if "benchmarks" not in data:
        for name, keys in OTHER_CLIENTS:
            if keys <= data.keys():
                raise ReportError(f"{NOT_GUIDELLM}; {name} is not read yet")
    version = data.get("metadata", {}).get("version") if isinstance(data.get("metadata"), dict) else None
    if isinstance(version, int) and version != SCHEMA_VERSION:
        raise ReportError(f"report schema version {version}; this parser reads version {SCHEMA_VERSION} "
                          "(GuideLLM 0.8)")
    try:
        head = ReportHead.model_validate(data)
    except ValidationError as exc:
        raise ReportError(_first_problem(exc)) from None
    benches = []
    for i, raw in enumerate(head.benchmarks):
        if raw.get("type_") != "generative_benchmark":
            continue
        try:
            benches.append(_benchmark(GenerativeBenchmark.model_validate(raw)))
        except ValidationError as exc:
            raise ReportError(_first_problem(exc, f"benchmarks[{i}]")) from None
    backend = head.config.spec.backend
    return Report(guidellm_version=head.metadata.guidellm_version, target=str(backend.target),
                  model=str(backend.model), benchmarks=tuple(benches))


def _skipped(path: list) -> bool:
    """What the verdict never reads: each benchmark's per-request lists (what makes a report big: GuideLLM
    0.8.1 keeps every request's stats, prompt and output text when metrics.sample_size is unset,
    benchmark/schemas/benchmark.py L62-71, schemas/benchmark/entrypoints.py L132-141), and at the top
    every key but the three it reads (their names stay, for telling other clients' files apart)."""
    return ((len(path) == 3 and path[0] == "benchmarks" and path[2] == "requests")
            or (len(path) == 1 and isinstance(path[0], str) and path[0] not in ("metadata", "config", "benchmarks")))


def read_report(path: Path) -> Report:
    """The report at `path` (or `path`/benchmarks.json): a regular file of at most MAX_REPORT_BYTES,
    checked by `stat` before it is opened (inputs.files: no FIFO, device or sparse giant), read in
    chunks with the per-request lists skipped as they pass (inputs.json_prune): its memory is the
    statistics', at most MAX_KEPT_CHARS, not the file's."""
    try:
        check_path_length(path)
        if path.is_dir():
            path = path / "benchmarks.json"       # GuideLLM's default file name in a folder
        text = json_prune.pruned_text(iter_regular_file(path, MAX_REPORT_BYTES, "GuideLLM JSON report"),
                                      _skipped, MAX_KEPT_CHARS, MAX_DEPTH)
    except json_prune.NotUTF8 as exc:
        raise ReportError(f"{path}: {exc}") from None
    except json_prune.TooDeep:
        raise ReportError(f"{path}: nested too deeply to be a GuideLLM report") from None
    except json_prune.TooLarge:
        raise ReportError(f"{path}: more than {MAX_KEPT_CHARS:,} characters outside the per-request lists; "
                          "a GuideLLM report's statistics are far smaller") from None
    except InputError as exc:
        raise ReportError(str(exc)) from None
    try:
        data = json_doc.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ReportError(f"{path}: nested too deeply to be a GuideLLM report") from None
    try:
        return parse_report(data)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None
    except RecursionError:
        raise ReportError(f"{path}: nested too deeply to be a GuideLLM report") from None


# -- the verdict -------------------------------------------------------------------------------
def _planned_step_check(at_plan: list[Benchmark], rated: list[Benchmark], qps: float,
                        ttft_slo: float, tpot_slo: float, stat: str) -> dict:
    if not at_plan:
        rates = ", ".join(f"{b.rate:g}" for b in rated) or "none"
        return {"name": "slos_at_planned_rate", "ok": False,
                "detail": f"no constant or poisson step at the planned {qps:g} QPS (rates: {rates})"}
    b = at_plan[0]
    detail = (f"at {b.rate:g} QPS: {stat} TTFT {b.ttft_ms.at(stat):.1f} ms (SLO {ttft_slo:g}), {stat} TPOT "
              f"{b.tpot_ms.at(stat):.1f} ms (SLO {tpot_slo:g}), errors {100 * b.error_share:.1f}% "
              f"(budget {100 * ERROR_BUDGET:g}%)")
    if b.incomplete:
        detail += (f", {b.incomplete} cut at the step's end" + (
            f" ({b.stalled} beyond the {b.incomplete_explained} it explains, counted as errored)" if b.stalled else ""))
    if not b.long_enough:
        detail += (f"; its measured {b.duration_s:.0f} s hold {b.rate * b.duration_s:.0f} requests at {b.rate:g} QPS "
                   f"(at least {MIN_COUNTED} test a rate), so the planned rate was not tested")
    elif not b.sent_as_offered and not b.meets(ttft_slo, tpot_slo, stat):
        detail += (f"; the client sent {b.requests_per_s:.2f} QPS against {b.rate:g} offered (GuideLLM's "
                   "start-of-step race: docs/proving.md), so the planned rate was not tested")
    elif not b.reached_rate:
        detail += (f"; achieved only {b.requests_per_s:.2f} of {b.rate:g} QPS offered (needs {b.least_achieved:.2f}: "
                   f"{100 * ACHIEVED_SHARE:g}% less Poisson noise over {b.duration_s:g} s), so the planned rate was "
                   "not tested")
    elif not b.kept_schedule(ttft_slo):
        detail += (f"; the client sent late (p95 dispatch delay {b.dispatch_delay_ms.p95:.1f} ms, limit "
                   f"{b.dispatch_lag_limit_ms(ttft_slo):.1f} ms), so the planned rate was not tested: "
                   "the load generator, not the fleet, capped it")
    return {"name": "slos_at_planned_rate", "ok": b.tested(ttft_slo) and b.meets(ttft_slo, tpot_slo, stat),
            "detail": detail}


def assess(report: Report, plan, simulation: dict) -> dict:
    """The verdict: each check with its numbers, and whether the plan holds."""
    w = plan.request.workload
    ttft_slo, tpot_slo = 1e3 * w.ttft_slo_s, 1e3 * w.tpot_slo_s
    stat = getattr(w, "slo_statistic", "mean")

    def counts(b: Benchmark) -> bool:
        return b.tested(ttft_slo) and b.meets(ttft_slo, tpot_slo, stat)

    rated = sorted((b for b in report.benchmarks if b.rate is not None), key=lambda b: b.rate)
    # Steps at the planned rate (within 5%), one that tested its rate first, then the nearest.
    at_plan = sorted((b for b in rated if abs(b.rate - w.qps) <= RATE_MATCH * w.qps),
                     key=lambda b: (not b.tested(ttft_slo), abs(b.rate - w.qps)))
    good = [b for b in rated if counts(b)]
    best = max((g.rate for g in good), default=0.0)
    # The capacity is bounded above only by a higher step tested at its own rate that missed the SLOs.
    reached = any(b.rate > best and b.tested(ttft_slo) and b.sent_as_offered and not counts(b) for b in rated)
    # What the fleet carried at the SLOs: the highest offered rate it was tested at (`tested`: achieved
    # within Poisson noise of it, sent on time) and met them; not the achieved rate, whose noise would
    # put a step at exactly the rate N+1 needs a hair below it.
    measured_cap = max((b.rate for b in good), default=0.0)
    # With no redundancy the plan claims only that its node carries the load.
    share_left = (plan.replicas if plan.redundancy == "none" else plan.replicas_after_loss) / plan.replicas
    checks = [_planned_step_check(at_plan, rated, w.qps, ttft_slo, tpot_slo, stat)]
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
                                   "incomplete_explained": b.incomplete_explained, "stalled": b.stalled,
                                   "reached_rate": b.reached_rate, "sent_as_offered": b.sent_as_offered,
                                   "kept_schedule": b.kept_schedule(ttft_slo),
                                   "meets_slos": b.meets(ttft_slo, tpot_slo, stat)} for b in report.benchmarks]},
        "measured": {
            "ttft_p95_ms": at_plan[0].ttft_ms.p95 if at_plan else None,
            "tpot_p95_ms": at_plan[0].tpot_ms.p95 if at_plan else None,
            "capacity_qps": measured_cap, "capacity_reached": reached,
        },
        "plan": {"qps": w.qps, "replicas": plan.replicas, "ttft_slo_ms": ttft_slo, "tpot_slo_ms": tpot_slo,
                 "slo_statistic": stat,
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
