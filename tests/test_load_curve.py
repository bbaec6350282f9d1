"""Load over time (sizing/load_curve.py, `workload.traffic`): the forms, the figures a plan reads
from them, and every refusal naming its key or line without echoing what the file holds."""
from __future__ import annotations

import pytest

from sizing.load_curve import LoadCurveError, by_hour, hourly, parse_curve_csv

DAY_6H = "t_s,qps\n0,2\n10800,14\n21600,2\n"


def test_a_file_curve_is_straight_lines_between_its_points():
    c = parse_curve_csv(DAY_6H, "day.csv")
    assert (c.span_s, c.at(5400), c.at(10800), c.at(16200)) == (21600, 8.0, 14.0, 8.0)
    assert (c.peak_qps, c.peak_at_s, c.trough_qps, c.trough_at_s, c.mean_qps) == (14, 10800, 2, 0, 8.0)


def test_an_hourly_curve_spans_a_day_and_returns_to_its_first_hour():
    rates = [2.0] * 6 + [8.0] * 6 + [14.0] * 6 + [4.0] * 6
    c = hourly(rates)
    assert (c.span_s, c.at(0), c.at(86_400), c.at(12 * 3600), c.peak_qps, c.trough_qps) == (86_400, 2, 2, 14, 14, 2)


def test_rates_by_hour_wrap_midnight():
    c = by_hour({6: 2.0, 18: 14.0})
    assert (c.at(6 * 3600), c.at(18 * 3600), c.at(0), c.at(86_400)) == (2.0, 14.0, 8.0, 8.0)


@pytest.mark.parametrize("text, message", [
    ("", "day.csv: is empty; give a header t_s,qps and one point per line"),
    ("time,rate\n0,1\n", "day.csv: line 1: the header must be exactly t_s,qps (got 2 columns)"),
    ("t_s,qps\n5,1\n9,2\n", "day.csv: line 2: t_s: the first point must be at 0 s"),
    ("t_s,qps\n0,1\n0,2\n", "day.csv: line 3: t_s: times must rise strictly from one line to the next"),
    ("t_s,qps\n0,1\n", "day.csv: needs at least 2 points (a start at t_s 0 and an end)"),
    ("t_s,qps\n0,0\n10,1\n", "day.csv: line 2: qps: must be a finite rate above 0; the floor is planned for the "
                             "trough (got 0)"),
    ("t_s,qps\n0,nan\n10,1\n", "day.csv: line 2: qps: must be a finite rate above 0; the floor is planned for the "
                               "trough (got not a finite number)"),
    ("t_s,qps\n0,1\n10,hunter2\n", "day.csv: line 3: qps: expected a rate in requests per second (got text of 7 "
                                   "characters)"),
    ("t_s,qps\n0,1,3\n", "day.csv: line 2: expected 2 fields, t_s and qps (got 3)"),
    ("t_s,qps\n0,1\n700000,1\n", "day.csv: line 3: t_s: is past 604,800 s (a week), the longest curve planned"),
    ("t_s,qps\n0,1\n10,2e6\n", "day.csv: line 3: qps: is above 1,000,000 requests per second; check the unit"),
])
def test_a_bad_file_is_refused_naming_its_line(text, message):
    with pytest.raises(LoadCurveError) as exc:
        parse_curve_csv(text, "day.csv")
    assert str(exc.value) == message


@pytest.mark.parametrize("traffic, message", [
    ([1.0] * 5, "traffic: an hourly curve has 24 rates, one per hour from 0:00 (got a list of 5)"),
    ([1.0] * 23 + [-1.0], "traffic[23]: must be a finite rate above 0; the floor is planned for the trough (got a "
                          "negative number)"),
    ({"24": 1.0}, "traffic: an hour is a whole number from 0 to 23 (got text of 2 characters)"),
    ({"file": "day.csv", "rate": 1}, "traffic.file: give {file: PATH} alone, PATH a CSV of t_s,qps"),
    ("busy", "traffic: an hourly curve has 24 rates, one per hour from 0:00 (got text of 4 characters)"),
])
def test_a_bad_stack_curve_is_refused_naming_the_key(traffic, message):
    from settings.load import SettingsError, request_from_body
    body = {"region": "us-east-1", "workload": {"traffic": traffic},
            "gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b"}]}
    with pytest.raises(SettingsError) as exc:
        request_from_body(body)
    assert str(exc.value) == f"llm-serving:workload: {message}"


def test_qps_defaults_to_the_peak_and_may_not_be_below_it():
    from settings.load import SettingsError, request_from_body
    body = {"region": "us-east-1", "workload": {"traffic": {"6": 2.0, "18": 14.0}},
            "gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b"}]}
    req = request_from_body(body).plan_request()
    assert (req.workload.qps, req.traffic.peak_qps, req.traffic.source) == (14.0, 14.0, "by-hour")
    body["workload"]["qps"] = 10.0
    with pytest.raises(SettingsError) as exc:
        request_from_body(body)
    assert str(exc.value) == ("llm-serving:workload: qps: 10 is below the traffic's peak of 14; the plan is the fleet "
                              "for the peak: raise qps or leave it unset (then it is the peak)")


def test_a_stack_file_names_its_traffic_file_from_its_own_folder(tmp_path, monkeypatch):
    import yaml
    from settings import stack_settings
    from tests.stacks import stack_config
    (tmp_path / "day.csv").write_text(DAY_6H)
    config = stack_config("prod")
    config["llm-serving:workload"] = {k: v for k, v in config["llm-serving:workload"].items() if k != "qps"}
    config["llm-serving:workload"]["traffic"] = {"file": "day.csv"}
    (tmp_path / "Pulumi.day.yaml").write_text(yaml.safe_dump({"config": config}))
    monkeypatch.setenv("LLM_SERVING_STACKS", str(tmp_path))
    req = stack_settings("day").plan_request()
    assert (req.workload.qps, req.traffic.span_s, req.traffic.source) == (14.0, 21600, "file")


def test_a_file_that_is_not_a_curve_is_refused_without_its_content(tmp_path):
    """A secret file named by mistake: the error says what kind of field it found, not what it says."""
    from typer.testing import CliRunner
    from llmserve.cli import app
    secret = tmp_path / "env"
    secret.write_text("t_s,qps\n0,AKIAABCDEFGHIJKLMNOP\n")
    result = CliRunner().invoke(app, ["simulate", "--traffic", str(secret), "--autoscale"])
    assert result.exit_code == 2
    assert "AKIA" not in result.output
    assert result.output.strip().endswith("line 2: qps: expected a rate in requests per second (got text of 20 characters)")
