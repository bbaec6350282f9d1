"""The load test: the GuideLLM Job follows the plan, and `llmserve loadtest-report` reads GuideLLM's
report (the real 0.8.0.dev18 capture, fetched by scripts/fetch-upstream) and judges the plan with it."""
from __future__ import annotations

import dataclasses

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from conventions import GUIDELLM_IMAGE
from deployment.jobs import loadtest_rates, n_plus_one_qps
from llmserve.cli import app
from offline.engine import is_secret, unwrap
from proving.loadtest_report import Benchmark, Report, ReportError, Stat, assess, parse_report, read_report
from offline.manifests import kubernetes_objects
from tests.k8s_schema import validate
from settings import stack_settings
from sizing.planner import plan as make_plan

SAMPLE = "samples/guidellm-report-0.8.0.dev18.json"
JOB = "kubernetes:batch/v1:Job"
ENABLED = {"loadTest": {"enabled": True}}

@pytest.fixture
def sample(upstream_file):
    return upstream_file(SAMPLE)


@pytest.fixture(scope="module")
def prod_plan():
    return make_plan(stack_settings("prod").plan_request())


# -- the parser, on the real report ---------------------------------------------------------------
def test_the_sample_is_guidellm_schema_2_with_two_constant_steps(sample):
    report = read_report(sample)
    assert report.guidellm_version == "0.8.0.dev18"
    assert (report.target, report.model) == ("http://127.0.0.1:8765", "e2e-mock-model")
    assert [(b.strategy, b.rate, b.successful, b.errored, b.incomplete) for b in report.benchmarks] == [
        ("constant", 2.0, 2, 0, 0), ("constant", 4.0, 2, 0, 0)]


@pytest.mark.parametrize("field, metric, scale", [
    ("ttft_ms", "time_to_first_token_ms", 1.0),
    ("tpot_ms", "inter_token_latency_ms", 1.0),       # vLLM's TPOT: after the first token
    ("e2e_ms", "request_latency", 1e3),               # seconds in the report
])
def test_each_figure_comes_from_its_metric(sample, field, metric, scale):
    raw = json.loads(sample.read_text())
    for parsed, bench in zip(read_report(sample).benchmarks, raw["benchmarks"]):
        source = bench["metrics"][metric]["successful"]
        stat = getattr(parsed, field)
        assert (stat.mean, stat.p50, stat.p95, stat.p99, stat.count) == (
            scale * source["mean"], scale * source["percentiles"]["p50"], scale * source["percentiles"]["p95"],
            scale * source["percentiles"]["p99"], source["count"])


def test_achieved_rate_is_the_successful_requests_per_second(sample):
    raw = json.loads(sample.read_text())
    assert [b.requests_per_s for b in read_report(sample).benchmarks] == [
        b["metrics"]["requests_per_second"]["successful"]["mean"] for b in raw["benchmarks"]]


def _nest(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["metadata"].update(version=1), "report schema version 1; this parser reads version 2 (GuideLLM 0.8)"),
    (lambda d: d.pop("metadata"), "metadata: missing"),
    (lambda d: d["benchmarks"][1]["metrics"].pop("inter_token_latency_ms"),
     "benchmarks[1].metrics.inter_token_latency_ms: missing"),
    (lambda d: d.update(benchmarks=7), "benchmarks: Input should be a valid list"),
    (lambda d: d.update(benchmarks=["x"]), "benchmarks[0]: Input should be a valid dictionary"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].update(rate="fast"),
     "benchmarks[0].config.strategy.rate: Input should be a valid number"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].update(rate="2"),
     "benchmarks[0].config.strategy.rate: Input should be a valid number"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].update(rate=float("inf")),
     "benchmarks[0].config.strategy.rate: Input should be a finite number"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].update(rate=-1),
     "benchmarks[0].config.strategy.rate: Input should be greater than 0"),
    (lambda d: d["benchmarks"][0]["config"]["strategy"].pop("rate"),
     "benchmarks[0].config.strategy: a constant strategy needs its offered rate"),
    (lambda d: d["benchmarks"][1]["metrics"]["requests_per_second"].update(successful=[1, 2]),
     "benchmarks[1].metrics.requests_per_second.successful: Input should be a valid dictionary or instance of "
     "Distribution"),
    (lambda d: d["benchmarks"][0]["metrics"]["request_totals"].update(errored=_nest(3000)),
     "benchmarks[0].metrics.request_totals.errored: Input should be a valid integer"),
    (lambda d: d["config"].update(spec="x"), "config.spec: Input should be a valid dictionary or instance of Spec"),
    (lambda d: d["benchmarks"][0]["metrics"]["requests_per_second"]["successful"].update(mean=1000.0),
     "benchmarks[0]: achieved 1000 requests/s over 5.01965 s with 2 successful requests; a report whose statistics "
     "contradict themselves is not judged"),
])
def test_a_report_this_parser_cannot_read_says_why(sample, mutate, message):
    data = json.loads(sample.read_text())
    mutate(data)
    with pytest.raises(ReportError) as exc:
        parse_report(data)
    assert str(exc.value) == message


# -- the verdict -----------------------------------------------------------------------------------
def step(rate: float, ttft: float, tpot: float, errored: int = 0, incomplete: int = 0,
         lag_p95_ms: float | None = None) -> Benchmark:
    def s(mean):
        return Stat(mean, mean, 1.5 * mean, 2 * mean, 100)
    lag = None if lag_p95_ms is None else Stat(lag_p95_ms / 2, lag_p95_ms / 2, lag_p95_ms, lag_p95_ms, 100)
    return Benchmark("poisson", rate, rate, 300.0, 1000 - errored, errored, incomplete, s(ttft), s(tpot),
                     s(ttft + 300 * tpot), lag)


@pytest.mark.parametrize("rate, achieved, window_s, tested", [
    (10, 8.83, 24, True),       # a 40-s step of `make loadtest-local`: 8.83 is within 3 sigma of 90% of 10
    (10, 6.9, 24, False),       # beyond it: the client or a quota held the rate back
    (10, 8.45, 248, True),      # prod's 300-s steps (248 s measured): the allowance is 0.6 QPS, 8.40 the least
    (10, 8.35, 248, False),
    (2, 1.9, 5, False),         # 10 requests expected: too few to test a rate, whatever they achieved
    (2, 1.9, 25, True),         # 50 expected
])
def test_a_step_tests_its_rate_within_poisson_noise(rate, achieved, window_s, tested):
    b = dataclasses.replace(step(rate, 100, 20), requests_per_s=achieved, duration_s=window_s)
    assert b.reached_rate is tested, (b.least_achieved, b.long_enough)


@pytest.mark.parametrize("tpot, holds", [(17, True), (45, False)])
def test_an_over_sent_step_shows_the_slos_at_its_rate_only_when_it_met_them(prod_plan, tpot, holds):
    """GuideLLM's start-of-step race sent the planned step at 1.8x: within the SLOs, the fleet carried
    more than planned; outside them, the planned rate was not tested (and the fleet is not blamed)."""
    over = dataclasses.replace(step(10, 120, tpot), requests_per_s=18.0)
    assert not over.sent_as_offered
    v = verdict(prod_plan, over, step(20, 300, 30))
    assert v["checks"][0]["ok"] is holds
    if not holds:
        assert v["checks"][0]["detail"].endswith("; the client sent 18.00 QPS against 10 offered (GuideLLM's "
                                                 "start-of-step race: docs/proving.md), so the planned rate was "
                                                 "not tested")


def verdict(plan, *steps: Benchmark) -> dict:
    simulation = {"analytic": {"ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0}, "ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0,
                  "capacity_qps": 1.0, "duration_s": 1.0}
    return assess(Report("0.8.1", "https://llm.example.com", "llama-3-70b", steps), plan, simulation)


def test_the_plan_holds_when_the_planned_rate_meets_the_slos_and_capacity_covers_a_zone_loss(prod_plan):
    v = verdict(prod_plan, step(10, 120, 17), step(20, 300, 30), step(32, 5000, 45))
    assert v["holds"]
    assert v["measured"] == {"ttft_p95_ms": 180.0, "tpot_p95_ms": 25.5, "capacity_qps": 20, "capacity_reached": True}
    assert [c["ok"] for c in v["checks"]] == [True, True]


@pytest.mark.parametrize("steps, failed, detail", [
    ([step(10, 1200, 17), step(20, 300, 30)], "slos_at_planned_rate",
     "at 10 QPS: mean TTFT 1200.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 0.0% (budget 1%)"),
    ([step(10, 120, 17, errored=50), step(20, 300, 30)], "slos_at_planned_rate",
     "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 5.0% (budget 1%)"),
    ([step(10, 120, 17), step(15, 300, 30), step(18, 300, 41)], "n_plus_one",
     "measured capacity 15 QPS on 2 replica(s); 1 left after losing us-east-1b carry 7.50 QPS against 10 planned"),
    ([step(20, 300, 30)], "slos_at_planned_rate", "no constant or poisson step at the planned 10 QPS (rates: 20)"),
])
def test_the_plan_fails_on_the_check_that_breaks(prod_plan, steps, failed, detail):
    v = verdict(prod_plan, *steps)
    assert not v["holds"]
    broken = [c for c in v["checks"] if not c["ok"]]
    assert [(c["name"], c["detail"]) for c in broken][0] == (failed, detail)


# A healthy step at 10 QPS has ~rate x latency = 10 x 5.2 s = 52 requests running when its time is up: GuideLLM
# cancels them ("incomplete"). step(10, 120, 17): p99 request latency 2 x 5,220 ms, so the end explains
# ceil(2 x 10 x 10.44) = 209 of them; more are stalled requests, counted as errored.
@pytest.mark.parametrize("incomplete, holds, detail", [
    (0, True, "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 0.0% (budget 1%)"),
    (52, True, "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 0.0% (budget 1%), "
               "52 cut at the step's end"),
    (209, True, "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 0.0% (budget 1%), "
                "209 cut at the step's end"),
    (219, True, "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 1.0% (budget 1%), "
                "219 cut at the step's end (10 beyond the 209 it explains, counted as errored)"),
    (400, False, "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 16.0% (budget 1%), "
                 "400 cut at the step's end (191 beyond the 209 it explains, counted as errored)"),
])
def test_requests_cut_at_the_steps_end_are_not_errors_unless_more_than_it_explains(prod_plan, incomplete, holds,
                                                                                    detail):
    v = verdict(prod_plan, step(10, 120, 17, incomplete=incomplete), step(20, 300, 30))
    assert (v["holds"], v["checks"][0]["detail"]) == (holds, detail)
    b = v["report"]["benchmarks"][0]
    assert (b["incomplete"], b["incomplete_explained"], b["stalled"]) == (incomplete, 209, max(0, incomplete - 209))


def test_the_error_budget_is_over_finished_requests_only(prod_plan):
    """10 errored of 1,000 finished is 1.0% (within budget) whether 0 or 150 more were cut at the end;
    before, the cut ones counted as errors (16% at 150) and a healthy fleet failed."""
    for cut in (0, 150):
        b = step(10, 120, 17, errored=10, incomplete=cut)
        assert b.error_share == 0.01
        assert verdict(prod_plan, b, step(20, 300, 30))["holds"]


@pytest.mark.parametrize("rate, lag_p95_ms, counts, limit_ms", [
    (10, 40.0, True, 100.0),     # limit min(1/rate = 100 ms, 10% of the 1 s TTFT SLO = 100 ms)
    (10, 100.0, True, 100.0),
    (10, 150.0, False, 100.0),
    (20, 60.0, False, 50.0),     # 1/rate = 50 ms binds
    (20, None, True, 50.0),      # a report without dispatch delays (GuideLLM 0.8.0.dev18) is taken as on time
])
def test_a_step_the_client_sent_late_did_not_test_its_rate(prod_plan, rate, lag_p95_ms, counts, limit_ms):
    b = step(rate, 120, 17, lag_p95_ms=lag_p95_ms)
    assert b.dispatch_lag_limit_ms(1000.0) == limit_ms
    assert b.kept_schedule(1000.0) is counts and b.tested(1000.0) is counts


def test_a_late_client_at_the_planned_rate_is_named_not_blamed_on_the_fleet(prod_plan):
    v = verdict(prod_plan, step(10, 120, 17, lag_p95_ms=250.0), step(20, 300, 30))
    assert not v["holds"]
    assert v["checks"][0]["detail"] == (
        "at 10 QPS: mean TTFT 120.0 ms (SLO 1000), mean TPOT 17.0 ms (SLO 40), errors 0.0% (budget 1%); the client "
        "sent late (p95 dispatch delay 250.0 ms, limit 100.0 ms), so the planned rate was not tested: the load "
        "generator, not the fleet, capped it")
    assert v["report"]["benchmarks"][0]["kept_schedule"] is False


def short(rate: float, achieved: float, ttft: float = 120, tpot: float = 17) -> Benchmark:
    b = step(rate, ttft, tpot)
    return Benchmark(b.strategy, rate, achieved, b.duration_s, b.successful, b.errored, b.incomplete,
                     b.ttft_ms, b.tpot_ms, b.e2e_ms)


@pytest.mark.parametrize("steps, holds, capacity", [
    ([short(10, 3.0), step(20, 300, 30)], False, 20),     # the planned step achieved 30% of its rate
    ([short(10, 9.0), short(24, 22.0)], True, 24),         # 90%+ counts; capacity is the rate it tested
    ([step(10, 120, 17), short(20, 11.0)], False, 10),     # a short step adds no capacity: 10 left 5 after loss
])
def test_a_step_counts_only_at_the_rate_it_achieved(prod_plan, steps, holds, capacity):
    v = verdict(prod_plan, *steps)
    assert v["holds"] is holds
    assert v["measured"]["capacity_qps"] == capacity


def test_a_sweep_that_never_broke_the_slos_gives_a_lower_bound(prod_plan):
    v = verdict(prod_plan, step(10, 120, 17), step(16, 200, 25))
    assert v["measured"]["capacity_reached"] is False
    assert v["checks"][1]["detail"].startswith("measured capacity at least 16 QPS")


# -- the CLI on the real report --------------------------------------------------------------------
def run(*args: str):
    return CliRunner().invoke(app, ["loadtest-report", *args])


def test_the_sample_does_not_prove_the_dev_plan_its_steps_fell_short_of_their_rates(sample):
    """The capture sent 2 requests in 5 s at "2 QPS": 0.40 QPS achieved is not a test of 2 QPS."""
    result = run(str(sample), "--stack", "dev")
    assert result.exit_code == 1, result.stderr
    assert "GuideLLM 0.8.0.dev18 against http://127.0.0.1:8765 (e2e-mock-model); plan: stack dev." in result.stdout
    assert "its measured 5 s hold 10 requests at 2 QPS (at least 50 test a rate), so the planned rate was not " \
           "tested" in " ".join(result.stdout.split())
    assert result.stdout.rstrip().endswith("The plan does not hold (see FAIL above).")


def test_prod_plan_is_not_shown_by_the_sample_and_exits_1(sample):
    result = run(str(sample), "--stack", "prod")
    assert result.exit_code == 1
    assert "FAIL slos_at_planned_rate: no constant or poisson step at the planned 10 QPS (rates: 2, 4)" in result.stdout


def test_the_table_shows_cut_requests_apart_and_stalled_ones_as_errors(sample, tmp_path):
    """The capture's first step with 3 requests cut at its end: at 2 QPS and a p99 latency of 20 ms the end
    explains ceil(2 x 2 x 0.020) = 1, so 2 are stalled (errors); the second step with 1 cut has none stalled."""
    data = json.loads(sample.read_text())
    data["benchmarks"][0]["metrics"]["request_totals"].update(incomplete=3)
    data["benchmarks"][1]["metrics"]["request_totals"].update(incomplete=1)
    (tmp_path / "r.json").write_text(json.dumps(data))
    result = run(str(tmp_path / "r.json"), "--stack", "dev")
    rows = [line.split("│")[1:-1] for line in result.stdout.splitlines() if line.startswith("│ constant")]
    assert [[cell.strip() for cell in row][:4] for row in rows] == [
        ["constant", "2", "0.40 (short)", "2 / 2 / 3"], ["constant", "4", "0.79 (short)", "2 / 0 / 1"]]
    assert "cut: cancelled by GuideLLM when the step's time was up, not counted against the error budget." in \
        " ".join(result.stdout.split())


def test_json_puts_measured_plan_and_simulation_side_by_side(sample):
    result = run(str(sample), "--stack", "dev", "--json")
    data = json.loads(result.stdout)
    assert set(data) == {"stack", "report", "measured", "plan", "simulation", "checks", "holds"}
    for side in ("measured", "plan", "simulation"):
        assert {"ttft_p95_ms", "tpot_p95_ms", "capacity_qps"} <= set(data[side])
    assert data["measured"]["ttft_p95_ms"] == read_report(sample).benchmarks[0].ttft_ms.p95


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing.json",
     "error: RESULTS: {tmp}/missing.json: no such file; check the path (a GuideLLM JSON report)"),
    (lambda tmp: os.mkfifo(tmp / "fifo.json") or tmp / "fifo.json",
     "error: RESULTS: {tmp}/fifo.json: is a FIFO (named pipe); give a GuideLLM JSON report (a regular file)"),
    (lambda tmp: Path("/dev/zero"),
     "error: RESULTS: /dev/zero: is a character device; give a GuideLLM JSON report (a regular file)"),
    (lambda tmp: sparse(tmp / "big.json", 5 * 2**30),
     "error: RESULTS: {tmp}/big.json: 5,368,709,120 bytes; a GuideLLM JSON report is at most 4,294,967,296"),
    (lambda tmp: (tmp / "x.json").write_text("{oops") and tmp / "x.json",
     "error: RESULTS: {tmp}/x.json: not JSON (Expecting property name enclosed in double quotes at line 1)"),
    (lambda tmp: (tmp / "y.json").write_text("[1]") and tmp / "y.json",
     "error: RESULTS: {tmp}/y.json: not a GuideLLM report (a JSON object with metadata, config, benchmarks)"),
    (lambda tmp: (tmp / "l.json").write_bytes('{"metadata": "caf\u00e9"}'.encode("latin-1")) and tmp / "l.json",
     "error: RESULTS: {tmp}/l.json: not UTF-8 text (byte 0xe9 at offset 17)"),
    (lambda tmp: (tmp / "u.json").write_text("{}", encoding="utf-16") and tmp / "u.json",
     "error: RESULTS: {tmp}/u.json: not UTF-8 text (byte 0xff at offset 0)"),
    (lambda tmp: (tmp / "d.json").write_text("[" * 100_000 + "]" * 100_000) and tmp / "d.json",
     "error: RESULTS: {tmp}/d.json: nested too deeply to be a GuideLLM report"),
    (lambda tmp: (tmp / "n.json").write_text("42") and tmp / "n.json",
     "error: RESULTS: {tmp}/n.json: not a GuideLLM report (a JSON object with metadata, config, benchmarks)"),
])
def test_bad_results_are_one_line_and_exit_code_2(tmp_path, make, message):
    result = run(str(make(tmp_path)))
    assert result.exit_code == 2
    assert result.stderr == message.format(tmp=tmp_path) + "\n"


# Other clients' result files, with the keys their pinned sources always write (no real capture of either
# is at hand: they are refused, by name). vLLM 0.29.0 vllm/benchmarks/serve.py L2226-2262 and L1271-1292:
VLLM_BENCH_SERVE = {
    "date": "20260722-060114", "endpoint_type": "openai", "backend": "openai", "label": None, "model_id": "m",
    "tokenizer_id": "m", "num_prompts": 200, "request_rate": 1.0, "burstiness": 1.0, "max_concurrency": None,
    "duration": 204.45, "completed": 199, "failed": 1, "total_input_tokens": 39800, "total_output_tokens": 25472,
    "request_throughput": 0.97, "request_goodput": None, "output_throughput": 124.6, "mean_ttft_ms": 54.6,
    "ttfts": [0.05] * 3, "itls": [[0.01, 0.01]] * 3, "generated_texts": ["x"] * 3}
# inference-perf 0.7.0 inference_perf/reportgen/base.py L389-397 (ResponsesSummary) and L694-711 (load_summary):
INFERENCE_PERF = {
    "benchmark_time_seconds": 61.2, "load_summary": {"count": 600, "schedule_delay": None, "send_duration": 59.9,
                                                     "requested_rate": 10.0, "achieved_rate": 10.0},
    "successes": {"count": 600, "latency": {}}, "failures": {"count": 0}}


@pytest.mark.parametrize("doc, message", [
    (VLLM_BENCH_SERVE, "not a GuideLLM report: this reads GuideLLM 0.8.x benchmarks.json; a vllm bench serve result "
                       "is not read yet"),
    (INFERENCE_PERF, "not a GuideLLM report: this reads GuideLLM 0.8.x benchmarks.json; an inference-perf "
                     "lifecycle-metrics report is not read yet"),
    ({"completed": 1}, "metadata: missing"),
])
def test_another_clients_result_is_refused_naming_what_this_reads(tmp_path, doc, message):
    (tmp_path / "r.json").write_text(json.dumps(doc))
    result = run(str(tmp_path / "r.json"))
    assert (result.exit_code, result.stderr) == (2, f"error: RESULTS: {tmp_path}/r.json: {message}\n")


def sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (a hole): what a 5 GB report looks like to stat."""
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


def test_a_name_over_255_bytes_is_one_line_naming_the_limit(tmp_path):
    result = run(str(tmp_path / ("r" * 300 + ".json")))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: RESULTS: ")
    assert result.stderr.endswith(": a name in it is 305 bytes; a file name is at most 255 bytes (Linux NAME_MAX); "
                                  "shorten it\n")


# -- the Job -------------------------------------------------------------------------------------------
def loadtest_resources(recording):
    return [r for r in recording.resources if r.name.startswith("load-test")]


def test_the_load_test_is_off_by_default(build_program):
    assert loadtest_resources(build_program("prod")) == []


def test_enabled_it_runs_guidellm_pinned_against_the_gateway_with_a_key(recorded, prod_plan):
    rec = recorded("prod", ENABLED)
    names = {r.type: r for r in loadtest_resources(rec)}
    assert set(names) == {"llm-serving:loadtest:LoadTest", "kubernetes:core/v1:Secret",
                          "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:PersistentVolumeClaim", JOB,
                          "kubernetes:networking.k8s.io/v1:NetworkPolicy"}
    job = names[JOB].inputs
    assert re.fullmatch(r"ghcr\.io/vllm-project/guidellm:v\d+\.\d+\.\d+", GUIDELLM_IMAGE)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == GUIDELLM_IMAGE
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    env = {e["name"]: e for e in container["env"]}
    assert env["GUIDELLM__SPEC__BACKEND__API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "api-key"
    assert env["HF_TOKEN_PATH"] == {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/hub/token"}
    assert "HF_TOKEN" not in env         # the hub token is a file, not an environment variable
    secret = names["kubernetes:core/v1:Secret"].inputs["stringData"]
    assert is_secret(secret) or all(is_secret(v) for v in secret.values())
    assert unwrap(secret)["api-key"] == "offline-preview-secret-apiKeys-team-a"
    scenario = json.loads(names["kubernetes:core/v1:ConfigMap"].inputs["data"]["scenario.json"])
    assert scenario["spec"]["backend"]["target"] == "https://llm.example.com"
    profile = scenario["spec"]["profile"]
    assert (profile["kind"], profile["rate"]) == ("poisson", loadtest_rates(prod_plan, 5))


def test_the_rates_are_the_planned_qps_the_n_plus_one_rate_then_a_sweep_up_to_the_sized_capacity(prod_plan):
    rates = loadtest_rates(prod_plan, 5)
    qps = prod_plan.request.workload.qps
    assert rates[0] == qps
    # prod: 2 replicas, 1 left after a zone loss, so the fleet must meet the SLOs at 2 x 10 QPS
    assert rates[1] == n_plus_one_qps(prod_plan) == qps * prod_plan.replicas / prod_plan.replicas_after_loss == 20
    assert rates[-1] == round(prod_plan.capacity_qps, 2)
    assert rates[2:] == sorted(rates[2:]) and len(rates) == 7


def test_a_healthy_fleet_shows_n_plus_one_at_the_rate_it_needs_not_only_at_capacity(prod_plan):
    """The step at the N+1 rate, tested and within the SLOs, is enough: the top step may miss them."""
    need = n_plus_one_qps(prod_plan)
    v = verdict(prod_plan, step(10, 120, 17), step(need, 200, 25), step(round(prod_plan.capacity_qps, 2), 900, 45))
    assert v["holds"] and v["measured"]["capacity_qps"] == need


def test_the_rendered_objects_are_valid_kubernetes(recorded):
    rec = recorded("prod", ENABLED)
    ours = {r.urn for r in loadtest_resources(rec)}
    objects = kubernetes_objects(SimpleNamespace(resources=[r for r in rec.resources if r.urn in ours]))
    assert len(objects) == 5        # Secret, ConfigMap, PVC, egress NetworkPolicy, Job
    for obj in objects:
        validate(obj, "1.33")


# -- the Job against GuideLLM 0.8.1's own source (vendor/upstream/guidellm-0.8.1, wheel members) -------
ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"


def guidellm_source(upstream_file, member: str):
    import ast
    return ast.parse(upstream_file(f"guidellm-0.8.1/{member}").read_text())


def class_fields(tree, name: str) -> set[str]:
    """The annotated fields of a pydantic model in that source."""
    import ast
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def rendered_scenario(rec) -> dict:
    config = next(r for r in loadtest_resources(rec) if r.type == "kubernetes:core/v1:ConfigMap")
    return json.loads(config.inputs["data"]["scenario.json"])


def test_guidellms_health_check_reaches_a_path_the_gateway_routes(recorded, upstream_file):
    """GuideLLM validates the target with GET {target}/{api_routes["/health"]} (http.py validate),
    our routes merged over its defaults (openai_http.py DEFAULT_API_PATHS | value); its default
    /health is not routed by the gateway (a 404: the Job exited 1), /v1/models is, keyed like the load."""
    import ast
    args = guidellm_source(upstream_file, "schemas/backends/openai_http.py")
    defaults = next(ast.literal_eval(n.value) for n in args.body if isinstance(n, ast.Assign)
                    and n.targets[0].id == "DEFAULT_API_PATHS")
    assert "DEFAULT_API_PATHS | value" in ast.unparse(args)          # ours override, the rest stay
    http = ast.unparse(guidellm_source(upstream_file, "backends/openai/http.py"))
    assert "'url': f\"{self._args.target}/{self._args.api_routes['/health']}\"" in http
    assert "headers['Authorization'] = f'Bearer {token}'" in http     # the check carries the key
    rec = recorded("prod", ENABLED)
    backend = rendered_scenario(rec)["spec"]["backend"]
    assert set(backend) <= class_fields(args, "OpenAIHTTPBackendArgs") | {"kind"}
    assert set(backend["api_routes"]) <= set(defaults)               # a key GuideLLM reads
    routes = defaults | backend["api_routes"]
    route = next(r for r in rec.resources if r.type == ROUTE)
    routed = {m["path"]["value"] for rule in route.inputs["spec"]["rules"] for m in rule["matches"]
              if m["path"]["type"] == "Exact"}
    health = "/" + routes["/health"]
    assert health == "/v1/models" and health in routed
    assert "/" + routes[backend["request_format"]] in routed          # and the load's own path
    assert "/" + defaults["/health"] not in routed                   # what it asked for before


def test_one_worker_process_so_the_arrivals_are_poisson(recorded, upstream_file):
    """Each GuideLLM process seeds its own random.Random(random_seed) and adds its gaps to one shared
    clock: with several processes every gap comes several times. The Job sets one process."""
    import ast
    strategies = guidellm_source(upstream_file, "scheduler/strategies.py")
    poisson = next(n for n in ast.walk(strategies) if isinstance(n, ast.ClassDef) and n.name == "AsyncPoissonStrategy")
    text = ast.unparse(poisson)
    assert "self._random = random.Random(self.random_seed)" in text and "self._offset.value += next_delay" in text
    settings = guidellm_source(upstream_file, "settings.py")
    assert "max_worker_processes" in class_fields(settings, "Settings")
    assert "env_prefix='GUIDELLM__'" in ast.unparse(settings)
    container = next(r for r in loadtest_resources(recorded("prod", ENABLED)) if r.type == JOB
                     ).inputs["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GUIDELLM__MAX_WORKER_PROCESSES", "value": "1"} in container["env"]


def test_each_step_is_measured_between_a_warmup_and_a_cooldown(recorded, upstream_file, prod_plan):
    """GuideLLM's own phases (profile warmup/cooldown, mode duration, in seconds): the start-of-step
    burst and the step-end cancellations fall outside the measured window."""
    import ast
    profile = guidellm_source(upstream_file, "schemas/benchmark/profiles/profile.py")
    transient = guidellm_source(upstream_file, "schemas/benchmark/transient.py")
    assert {"warmup", "cooldown"} <= class_fields(profile, "ProfileArgs")
    assert {"mode", "value"} <= class_fields(transient, "TransientPhaseConfig")
    assert "'duration'" in ast.unparse(transient)
    spec = rendered_scenario(recorded("prod", ENABLED))["spec"]
    # prod: TTFT SLO 1 s + 300 tokens x 40 ms = 13 s for a request within the SLOs, twice that
    assert spec["profile"]["warmup"] == spec["profile"]["cooldown"] == {"mode": "duration", "value": 26}
    assert 26 <= spec["constraints"][0]["seconds"] / 5


@pytest.mark.parametrize("step_s, expected", [(300, 26), (3600, 26), (100, 20), (30, 6)])
def test_the_transient_is_twice_an_slo_request_and_at_most_a_fifth_of_the_step(prod_plan, step_s, expected):
    from deployment.jobs import transient_s
    from settings.schema import LoadTestSettings
    assert transient_s(prod_plan, LoadTestSettings(stepSeconds=step_s)) == expected


def test_the_slos_are_judged_at_the_plans_statistic():
    """dev states its SLOs at p95 (the default): a step whose mean TPOT fits but whose p95 does not fails."""
    dev_plan = make_plan(stack_settings("dev").plan_request())
    assert dev_plan.request.workload.slo_statistic == "p95"
    v = verdict(dev_plan, step(2, 120, 40), step(4, 120, 20))       # TPOT p95 = 1.5 x mean = 60 ms > 50
    assert not v["checks"][0]["ok"]
    assert v["checks"][0]["detail"].startswith("at 2 QPS: p95 TTFT 180.0 ms (SLO 1000), p95 TPOT 60.0 ms (SLO 50)")
