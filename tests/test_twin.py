"""The twin end to end: emulated replicas, a real Prometheus with the program's rules and a real
Alertmanager (Debian's packages; scripts/test installs them), on 127.0.0.1, on a clock 100 times
faster than the wall; and `check` and `calibrate` against it.

Each twin runs for seconds of wall time and is always stopped; the tests then check that its
servers are gone.
"""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.twin_runs import SLOWDOWN

# Real servers. Each twin is played once per session, in the background from the session's
# first test on (tests/twin_runs.py: what each run plays); a fixture waits for its run's result.
pytestmark = pytest.mark.servers


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/-/ready", timeout=2)
    except OSError:
        return True
    return False


# -- llmserve twin ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def zone_loss(twin_runs) -> dict:
    """`llmserve twin` of prod with us-east-1b lost from 300 s to 900 s."""
    return twin_runs.result("zone_loss")


@pytest.fixture(scope="session")
def past_capacity(twin_runs) -> dict:
    """`llmserve twin` of prod for 1200 s at 1.25 times the planned capacity."""
    return twin_runs.result("past_capacity")


def test_zone_loss_fires_the_zone_alerts_and_they_resolve_when_it_returns(zone_loss):
    report = zone_loss
    alerts = {a["alert"]: a for a in report["alerts"]}
    assert set(alerts) == {"LLMServingZoneWithoutReadyReplica", "LLMServingRedundancyLost"}
    assert alerts["LLMServingZoneWithoutReadyReplica"]["labels"]["zone"] == "us-east-1b"
    for a in alerts.values():
        assert 300 + 300 <= a["fired_s"] < 900 <= a["resolved_s"], a        # for: 5m after the loss
    assert report["ok"]


def test_the_twin_ran_real_servers_and_stopped_them(zone_loss):
    report = zone_loss
    assert report["prometheus"]["version"].startswith("prometheus, version 2.")
    assert report["alertmanager"]["version"].startswith("alertmanager, version 0.")
    assert refused(report["prometheus"]["url"]) and refused(report["alertmanager"]["url"])


def test_past_capacity_the_latency_and_load_alerts_fire(past_capacity):
    report = past_capacity
    fired = {a["alert"] for a in report["alerts"]}
    assert {"LLMServingTPOTAboveSLO", "LLMServingLoadNearCapacity", "LLMServingLoadAboveCapacityAfterLoss"} <= fired
    assert report["ok"]


# -- check and calibrate against a running twin ----------------------------------------------------
@pytest.fixture(scope="session")
def as_planned(twin_runs) -> dict:
    """`check` and `calibrate` against a twin of prod at the planned load, read at 800 s."""
    return twin_runs.result("as_planned")


@pytest.fixture(scope="session")
def slower(twin_runs) -> dict:
    """The same, of a fleet SLOWDOWN times slower than the plan's profile."""
    run = twin_runs.result("slower")
    return {**run, "profiles": Path(run["profiles"])}


def test_at_the_planned_load_nothing_fires(as_planned):
    assert as_planned["alerts"] == []


def test_check_passes_a_fleet_as_planned(as_planned):
    code, out, err = as_planned["check"]
    assert code == 0, out + err
    assert "Result: the fleet is within its plan." in out


def test_calibrate_recovers_the_plans_profile_from_a_fleet_as_planned(as_planned):
    code, out, err = as_planned["calibrate"]
    assert code == 0, err
    fitted = json.loads(out)["profile"]
    assert fitted["decode_slowdown"] == pytest.approx(1.0, abs=0.05)
    assert fitted["prefill_slowdown"] == pytest.approx(1.0, abs=0.05)


def test_check_fails_a_fleet_slower_than_planned(slower):
    code, out, err = slower["check"]
    assert code == 1, out + err
    assert "slower than the plan's profile" in out
    assert "Result: the fleet is OUTSIDE its plan." in out


def test_calibrate_measures_the_slowdown_within_5_percent(slower):
    code, out, err = slower["calibrate"]
    assert code == 0, err
    fitted = json.loads(out)["profile"]
    assert fitted["decode_slowdown"] == pytest.approx(SLOWDOWN, rel=0.05)
    assert fitted["prefill_slowdown"] == pytest.approx(SLOWDOWN, rel=0.05)


def test_calibrate_writes_a_profile_a_stack_can_select(slower):
    import yaml
    from sizing.profiles import Profile

    doc = yaml.safe_load(slower["profiles"].read_text())
    entry = doc["profiles"]["fleet-test"]
    assert set(entry) == set(Profile.__dataclass_fields__) - {"name"}
    assert {"seed", "calibrated"} <= set(doc["profiles"])


def test_calibrate_shows_the_capacity_the_slower_fleet_really_has(slower):
    plan = json.loads(slower["calibrate"][1])
    before, after = plan["plan_before"], plan["plan_after"]
    assert after["capacity_per_replica_qps"] < before["capacity_per_replica_qps"] / 1.15


def test_every_server_is_stopped_after_the_twin(as_planned, slower):
    assert refused(as_planned["url"]) and refused(slower["url"])
