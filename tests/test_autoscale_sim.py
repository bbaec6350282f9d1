"""`simulate --traffic FILE --autoscale`: the issue's day compressed into 6 h (2 -> 14 -> 2 QPS) on
the prod-like fixture (Llama 3 70B FP8, 1000/300, p5.48xlarge in 2 zones, the default profile),
with the plan's policy in the loop; then a zone lost at the peak. Two runs of ~170,000 requests,
shared by the checks (about 3 s each compiled)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llmserve.cli import app

DAY_6H = "t_s,qps\n0,2\n10800,14\n21600,2\n"


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """run(*args) -> the CLI result of `simulate --stack day ARGS` ("{curve}" in an argument is the
    curve's path), with a tmp stack `day`: prod's config at the default profile."""
    import yaml
    from tests.stacks import stack_config
    folder = tmp_path_factory.mktemp("autoscale")
    curve = folder / "day.csv"
    curve.write_text(DAY_6H)
    config = stack_config("prod")
    config["llm-serving:sizing"] = {"profile": "measured"}
    (folder / "Pulumi.day.yaml").write_text(yaml.safe_dump({"config": config}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLM_SERVING_STACKS", str(folder))
        yield lambda *args: CliRunner().invoke(app, ["simulate", "--stack", "day",
                                                      *[a.replace("{curve}", str(curve)) for a in args]])


@pytest.fixture(scope="module")
def autoscaled(day):
    result = day("--traffic", "{curve}", "--autoscale", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def zone_lost_at_peak(day):
    result = day("--traffic", "{curve}", "--autoscale", "--fail-zone", "us-east-1b@10800", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_json_has_every_key_the_issue_lists(autoscaled):
    assert {"gpu_hours", "gpu_hours_static", "goodput", "cold_starts", "cold_start_s", "floor_held"} <= set(autoscaled)
    assert autoscaled["traffic"] == {"source": autoscaled["traffic"]["source"], "span_s": 21600.0, "peak_qps": 14.0,
                                     "trough_qps": 2.0, "mean_qps": 8.0}


def test_the_autoscaled_fleet_uses_fewer_gpu_hours_than_the_static_plan_for_the_peak(autoscaled):
    assert autoscaled["gpu_hours"] < autoscaled["gpu_hours_static"]


def test_goodput_is_at_least_0_99(autoscaled):
    assert autoscaled["requests_lost"] == 0
    assert autoscaled["goodput"] >= 0.99


def test_the_floor_never_drops_under_n_plus_one_by_zone(autoscaled):
    assert autoscaled["floor_held"] and autoscaled["floor_breaches"] == []
    assert autoscaled["min_serving_by_zone"] == autoscaled["floor_by_zone"]
    assert all(n >= 1 for n in autoscaled["floor_by_zone"].values())


def test_the_fleet_follows_the_curve_with_cold_starts_of_at_least_a_minute(autoscaled):
    assert autoscaled["cold_starts"] > 0
    assert autoscaled["cold_start_s"]["warm_node"] >= 60
    peak = max(autoscaled["timeline"], key=lambda row: row["curve_qps"])
    assert peak["serving"] == autoscaled["ceiling_by_zone"]


def test_a_zone_lost_at_the_peak_keeps_goodput_at_least_0_95(zone_lost_at_peak):
    assert zone_lost_at_peak["requests_lost"] == 0
    assert zone_lost_at_peak["goodput"] >= 0.95
    assert zone_lost_at_peak["failure"]["during"]["goodput"] >= 0.95
    assert zone_lost_at_peak["floor_held"]        # in the zone that is up


@pytest.mark.parametrize("args, message", [
    (["--autoscale"], "error: --autoscale: needs a load over time: --traffic FILE (a CSV of t_s,qps) or the stack's "
                      "workload.traffic"),
    (["--traffic", "{curve}", "--qps", "3"], "error: --qps: not with --traffic/--autoscale (the curve sets the rate "
                                            "and the run's length; the plan sets the engine)"),
    (["--traffic", "{curve}", "--fail-node", "us-east-1a-p5/node-0@60"],
     "error: --fail-node: a node failure is not simulated with a load curve; lose a zone with --fail-zone ZONE@T[:T2]"),
    (["--traffic", "{curve}", "--fail-zone", "us-east-1c@60"],
     "error: --fail-zone: zone us-east-1c holds no replica (zones: us-east-1a, us-east-1b)"),
    (["--traffic", "{curve}", "--fail-zone", "us-east-1a@30000"],
     "error: --fail-zone: 'us-east-1a@30000': the failure starts at 30000 s, after the 21600 s run"),
])
def test_options_a_load_curve_cannot_take_exit_2_with_one_line(day, args, message):
    result = day(*args)
    assert result.exit_code == 2
    assert result.output.strip() == message


def test_a_zone_back_from_a_loss_serves_again_after_a_new_node_cold_start(day, tmp_path):
    """An hour at 8 QPS, us-east-1b lost from 600 s to 900 s: its replicas come back on new nodes,
    serving one new-node cold start after the first poll that sees it back, not sooner."""
    curve = tmp_path / "hour.csv"
    curve.write_text("t_s,qps\n0,8\n3600,8\n")
    result = day("--traffic", str(curve), "--autoscale", "--fail-zone", "us-east-1b@600:900", "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    back = [row["t_s"] for row in d["timeline"] if row["t_s"] >= 900 and row["serving"]["us-east-1b"] > 0]
    assert back and back[0] >= 900 + d["cold_start_s"]["new_node"]
    assert d["cold_starts_on_new_nodes"] >= 1 and d["requests_lost"] == 0 and d["floor_held"]


def test_a_zone_lost_during_a_scale_up_loses_its_starting_replicas_and_the_rest_carry(day, tmp_path):
    """2 -> 14 QPS in an hour, us-east-1a lost at 960 s while its second replica is still starting
    (the ramp passes 1.1 x the zone threshold, 5.15 QPS, at 930 s): that start is lost with the
    zone and us-east-1b alone scales to the peak, the SLOs holding at the plan's statistic (prod's
    is the mean) while the zone is down."""
    curve = tmp_path / "ramp.csv"
    curve.write_text("t_s,qps\n0,2\n3600,14\n")
    result = day("--traffic", str(curve), "--autoscale", "--fail-zone", "us-east-1a@960", "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    before = [row for row in d["timeline"] if row["t_s"] < 960]
    assert before[-1]["replicas"]["us-east-1a"] > before[-1]["serving"]["us-east-1a"]    # one still starting
    assert d["requests_lost"] == 0 and d["floor_held"]
    assert d["timeline"][-1]["serving"] == {"us-east-1a": 0, "us-east-1b": d["ceiling_by_zone"]["us-east-1b"]}
    during = d["failure"]["during"]
    assert during["ttft_ms"]["mean"] <= d["slo"]["ttft_ms"] and during["tpot_ms"]["mean"] <= d["slo"]["tpot_ms"]
