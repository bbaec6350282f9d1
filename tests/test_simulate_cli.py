"""`llmserve simulate`: exit codes, JSON keys, one-line errors, and the plot."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llmserve.cli import app

LATENCY_KEYS = ("ttft_ms", "tpot_ms", "queue_ms", "e2e_ms")
STAT_KEYS = {"mean", "p50", "p90", "p95", "p99"}


def run(*args: str):
    return CliRunner().invoke(app, ["simulate", *args])


def test_json_has_every_key_the_issue_lists():
    result = run("--stack", "prod", "--duration", "60", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    for key in LATENCY_KEYS:
        assert set(data[key]) == STAT_KEYS
    assert {"goodput", "requests", "requests_lost", "replicas"} <= set(data)
    assert "windows" not in data
    assert [r["zone"] for r in data["replicas"]] == ["us-east-1a", "us-east-1b"]


def test_a_zone_failure_adds_the_same_keys_per_window():
    result = run("--stack", "prod", "--duration", "120", "--fail-zone", "us-east-1b@40:80", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert list(data["windows"]) == ["before", "during", "after"]
    for window in data["windows"].values():
        for key in LATENCY_KEYS:
            assert set(window[key]) == STAT_KEYS
        assert {"goodput", "requests", "requests_lost"} <= set(window)
    assert data["requests_lost"] == 0
    assert data["failure"]["replicas_lost"] == ["us-east-1b-p5/node-0/0"]


def test_losing_requests_exits_1():
    """dev has one zone: losing it loses requests, and a script can tell from the exit code."""
    result = run("--stack", "dev", "--duration", "60", "--fail-zone", "us-east-1a@30", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["requests_lost"] > 0


def test_the_same_seed_prints_the_same_json():
    first = run("--stack", "prod", "--duration", "60", "--seed", "5", "--arrivals", "gamma", "--json").stdout
    again = run("--stack", "prod", "--duration", "60", "--seed", "5", "--arrivals", "gamma", "--json").stdout
    assert first == again


def test_the_text_report_names_the_windows_and_the_analytic_figures():
    result = run("--stack", "prod", "--duration", "120", "--fail-zone", "us-east-1a@40:80")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Zone us-east-1a lost at 40 s, back at 80 s (us-east-1a-p5/node-0/0):" in out
    assert "Analytic engine at 5 QPS per replica:" in out


@pytest.mark.parametrize("args, message", [
    (["--duration", "0"], "error: --duration: must be a finite number greater than 0 (got 0)"),
    (["--qps", "-2"], "error: --qps: must be a finite number greater than 0 (got -2)"),
    # the work is bounded up front: these are refused at once, with the number and the limit
    (["--duration", "inf"], "error: --duration: must be a finite number greater than 0 (got inf)"),
    (["--qps", "inf"], "error: --qps: must be a finite number greater than 0 (got inf)"),
    (["--qps", "nan"], "error: --qps: must be a finite number greater than 0 (got nan)"),
    (["--burstiness", "nan"], "error: --burstiness: must be a finite number greater than 0 (got nan)"),
    (["--burstiness", "inf"], "error: --burstiness: must be a finite number greater than 0 (got inf)"),
    (["--burstiness", "50"], "error: --burstiness: 50 is above the limit of 10"),
    (["--qps", "1e6"], "error: --qps: 1e+06 QPS for 600 s is 6e+08 requests, above the limit of 1,000,000 "
                       "(lower --qps or --duration)"),
    (["--duration", "1e9"], "error: --duration: 1e+09 s is above the limit of 604,800 s (a week)"),
    (["--router", "random"], "error: --router: unknown value 'random'; choose one of: round-robin, "
                             "least-outstanding, least-pending-tokens"),
    (["--arrivals", "uniform"], "error: --arrivals: unknown value 'uniform'; choose one of: poisson, gamma"),
    (["--stack", "prod", "--fail-zone", "us-east-1c@10"],
     "error: --fail-zone: zone us-east-1c holds no replica of this plan (zones: us-east-1a, us-east-1b)"),
    (["--fail-zone", "us-east-1a"],
     "error: --fail-zone: 'us-east-1a': expected ZONE@T or ZONE@T:T2 in seconds, e.g. us-east-1b@600:1200"),
    (["--stack", "prod", "--max-num-batched-tokens", "100"],
     "error: --max-num-batched-tokens: 100 is below max_num_seqs 512 (vLLM refuses this too)"),
    (["--stack", "nosuch"], "error: --stack nosuch: "),
    (["--concurrency", "0"], "error: --concurrency: must be a whole number greater than 0 (got 0)"),
    (["--concurrency", "-3"], "error: --concurrency: must be a whole number greater than 0 (got -3)"),
    (["--concurrency", "2000000"], "error: --concurrency: 2,000,000 is above the limit of 1,000,000"),
    (["--burst", "-1"], "error: --burst: must be a whole number greater than 0 (got -1)"),
    (["--burst", "0"], "error: --burst: must be a whole number greater than 0 (got 0)"),
    (["--concurrency", "8", "--qps", "5"],
     "error: --concurrency: give either --qps (an open loop) or --concurrency (a closed loop), not both"),
    (["--burst", "8", "--qps", "5"],
     "error: --burst: give either --qps (an open loop) or --burst (N prompts at t = 0), not both"),
    (["--burst", "8", "--concurrency", "5"],
     "error: --burst: give either --concurrency (a closed loop) or --burst (N prompts at t = 0), not both"),
    (["--concurrency", "8", "--duration", "1e9"],
     "error: --duration: 1e+09 s is above the limit of 604,800 s (a week)"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "timeline.png"
    result = run("--stack", "prod", "--duration", "120", "--fail-zone", "us-east-1b@40:80", "--plot", str(path))
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_closed_loop_says_so_and_reports_its_throughput():
    result = run("--stack", "prod", "--duration", "60", "--concurrency", "32", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["arrivals"], data["clients"], data["qps"], data["measured_from_s"]) == ("closed-loop", 32, None, 0.0)
    assert data["throughput"]["requests_per_s"] > 0 and data["throughput"]["output_tokens_per_s"] > 0
    assert data["analytic"]["clients_per_replica"] == 16
    for key in LATENCY_KEYS:
        assert set(data[key]) == STAT_KEYS


def test_a_burst_reports_its_makespan():
    result = run("--stack", "prod", "--burst", "100", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["arrivals"], data["burst"], data["requests"], data["duration_s"]) == ("burst", 100, 100, None)
    assert data["makespan_s"] == data["simulated_until_s"] > 0
    assert data["throughput"]["output_tokens_per_s"] > 0


@pytest.mark.parametrize("args, line", [
    (["--concurrency", "16", "--duration", "30"],
     "Simulated prod: 2 replicas, 16 closed-loop clients, 1000 in / 300 out (fixed), router least-outstanding, "
     "seed 0, 30 s of sending (measured from t = 0, no warm-up left out)."),
    (["--burst", "20"], "Simulated prod: 2 replicas, a burst of 20 prompts at t = 0, 1000 in / 300 out (fixed), "
                        "router least-outstanding, seed 0."),
])
def test_the_text_report_names_the_closed_loop_or_the_burst(args, line):
    result = run("--stack", "prod", *args)
    assert result.exit_code == 0, result.stderr
    assert " ".join(result.stdout.split()).startswith(line)
    assert "requests/s" in result.stdout and "output tokens/s" in result.stdout
