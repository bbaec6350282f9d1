"""The twin end to end: emulated replicas, a real Prometheus with the program's rules and a real
Alertmanager (Debian's packages; scripts/test installs them), on 127.0.0.1, on a clock 100 times
faster than the wall; and `check` and `calibrate` against it.

Each twin runs for seconds of wall time and is always stopped; the tests then check that its
servers are gone.
"""
from __future__ import annotations

import io
import json
import re
import urllib.request
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from llmserve.cli import main
from tests.stacks import plan_for
from twin.scenario import Twin

SCALE = "100"              # simulated seconds per wall second
CHECK_AT_S = 800           # simulated: when check and calibrate read the twin
WINDOW = "6s"              # wall: 600 simulated seconds at SCALE
SLOWDOWN = 1.2
# Real servers. The twins are session fixtures: an xdist worker interleaves tests of other modules,
# which would tear a module fixture down and start its twin again; this way once per worker at most.
pytestmark = pytest.mark.servers


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/-/ready", timeout=2)
    except OSError:
        return True
    return False


def twin_json(*argv: str) -> dict:
    code, out, err = run_cli("twin", "--stack", "prod", "--time-scale", SCALE, "--json", *argv)
    assert code == 0, out + err
    return json.loads(out)


# -- llmserve twin ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def zone_loss() -> dict:
    return twin_json("--fail-zone", "us-east-1b@300:900")


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


def test_past_capacity_the_latency_and_load_alerts_fire():
    _, plan = plan_for("prod")
    report = twin_json("--qps", str(round(1.25 * plan.capacity_qps, 1)), "--duration", "1200")
    fired = {a["alert"] for a in report["alerts"]}
    assert {"LLMServingTPOTAboveSLO", "LLMServingLoadNearCapacity", "LLMServingLoadAboveCapacityAfterLoss"} <= fired
    assert report["ok"]


# -- check and calibrate against a running twin ----------------------------------------------------
def _against_twin(slowdown: float, profiles: Path) -> dict:
    settings, plan = plan_for("prod")
    namespace = settings.serving.namespace
    with Twin(plan, namespace, duration_s=1200, scale=float(SCALE), slowdown=slowdown) as twin:
        twin.wait_until(CHECK_AT_S)
        url = twin.prometheus_url
        check = run_cli("check", "--stack", "prod", "--prometheus", url, "--window", WINDOW)
        calibrate = run_cli("calibrate", "--stack", "prod", "--prometheus", url, "--window", WINDOW,
                            "--name", "fleet-test", "--profiles-file", str(profiles), "--json")
        alerts = twin.alert_events()
    return {"check": check, "calibrate": calibrate, "alerts": alerts, "url": url}


def _profiles_copy(folder: Path) -> Path:
    """calibrate writes here, not into the project's profiles."""
    from sizing.catalog import DATA_DIR
    path = folder / "profiles.yaml"
    path.write_text((DATA_DIR / "profiles.yaml").read_text())
    return path


@pytest.fixture(scope="session")
def as_planned(tmp_path_factory):
    return _against_twin(1.0, _profiles_copy(tmp_path_factory.mktemp("planned")))


@pytest.fixture(scope="session")
def slower(tmp_path_factory):
    path = _profiles_copy(tmp_path_factory.mktemp("slower"))
    return {**_against_twin(SLOWDOWN, path), "profiles": path}


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
    assert {"reference", "calibrated"} <= set(doc["profiles"])


def test_calibrate_shows_the_capacity_the_slower_fleet_really_has(slower):
    plan = json.loads(slower["calibrate"][1])
    before, after = plan["plan_before"], plan["plan_after"]
    assert after["capacity_per_replica_qps"] < before["capacity_per_replica_qps"] / 1.15


def test_every_server_is_stopped_after_the_twin(as_planned, slower):
    assert refused(as_planned["url"]) and refused(slower["url"])
