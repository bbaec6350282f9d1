"""The twin's parts without running servers: the time-scaled rules and configurations, the
expectations and their judgement, the plan-versus-live rules of `check`, the profile file of
`calibrate`, and every input boundary of the three commands."""
from __future__ import annotations

import io
import re
import subprocess
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml

from llmserve.cli import main
from tests.stacks import plan_for
from observability.rules import rule_groups
from twin.promapi import FleetLive, ReplicaLive
from twin.scenario import AlertEvent, Expectation, expectations, judge
from twin.servers import alertmanager_config, free_port, prometheus_config, scaled_rules, seconds

NAMESPACE = "llm-serving"


@pytest.fixture(scope="module")
def prod():
    return plan_for("prod")[1]


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# -- time scaling ---------------------------------------------------------------------------------
def test_scaled_rules_divide_every_duration_and_change_nothing_else(prod):
    groups = rule_groups(prod, NAMESPACE)
    scaled = scaled_rules(groups, 60.0)
    for group, twin_group in zip(groups, scaled):
        for rule, twin_rule in zip(group["rules"], twin_group["rules"]):
            assert {k: v for k, v in rule.items() if k not in ("expr", "for")} == \
                   {k: v for k, v in twin_rule.items() if k not in ("expr", "for")}
            if "for" in rule:
                assert seconds(twin_rule["for"]) == pytest.approx(seconds(rule["for"]) / 60, abs=1e-3)
            windows = re.findall(r"\[([^\]]+)\]", rule["expr"])
            twin_windows = re.findall(r"\[([^\]]+)\]", twin_rule["expr"])
            assert [seconds(w) / 60 for w in windows] == pytest.approx([seconds(w) for w in twin_windows])
            assert re.sub(r"\[[^\]]+\]", "[]", rule["expr"]) == re.sub(r"\[[^\]]+\]", "[]", twin_rule["expr"])


def test_an_unscaled_twin_gets_the_rules_exactly(prod):
    groups = rule_groups(prod, NAMESPACE)
    assert scaled_rules(groups, 1.0) == groups


def test_the_twin_scrapes_at_the_programs_interval():
    from components.monitoring import SCRAPE_INTERVAL
    from twin.servers import SCRAPE_INTERVAL_S
    assert SCRAPE_INTERVAL_S == seconds(SCRAPE_INTERVAL)


@pytest.mark.promtool
def test_promtool_accepts_the_scaled_rule_file(prod, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": scaled_rules(rule_groups(prod, NAMESPACE), 60.0)}, sort_keys=False))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# -- configurations: loopback only, labels as the program's scrape sets them ------------------------
def test_prometheus_scrapes_and_alerts_on_loopback_only():
    from twin.exporters import Target
    targets = [Target("vllm", 1001, "/metrics", {"namespace": NAMESPACE, "pod": "vllm-us-east-1a-twin-0",
                                                  "zone": "us-east-1a"}),
               Target("kube-state-metrics", 1002, "/metrics", {})]
    cfg = prometheus_config(targets, 1003, 60.0)
    addresses = [a for job in cfg["scrape_configs"] for sc in job["static_configs"] for a in sc["targets"]]
    addresses += [a for am in cfg["alerting"]["alertmanagers"] for sc in am["static_configs"] for a in sc["targets"]]
    assert addresses and all(a.startswith("127.0.0.1:") for a in addresses)
    vllm = next(j for j in cfg["scrape_configs"] if j["job_name"] == "vllm")
    assert vllm["static_configs"][0]["labels"] == {"namespace": NAMESPACE, "pod": "vllm-us-east-1a-twin-0",
                                                   "zone": "us-east-1a"}
    assert next(j for j in cfg["scrape_configs"] if j["job_name"] == "kube-state-metrics")["honor_labels"]


def test_alertmanager_sends_firing_and_resolved_to_the_twin():
    receiver = alertmanager_config("http://127.0.0.1:1/alerts", 60.0)["receivers"][0]["webhook_configs"][0]
    assert receiver == {"url": "http://127.0.0.1:1/alerts", "send_resolved": True}


@pytest.mark.servers
def test_a_server_that_fails_to_start_stops_the_other(tmp_path, monkeypatch, prod):
    import twin.servers as servers
    spawned = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        spawned.append(real_popen(*args, **kwargs))
        return spawned[-1]
    monkeypatch.setattr(servers, "ALERTMANAGER_BINARIES", ("false",))       # exits at once
    monkeypatch.setattr(servers.subprocess, "Popen", popen)
    with pytest.raises(servers.TwinError, match="alertmanager did not become ready"):
        with servers.Servers(tmp_path, rule_groups(prod, NAMESPACE), [], 60.0):
            pass
    assert len(spawned) == 2 and all(p.poll() is not None for p in spawned)


# -- what the plan expects, and the judgement --------------------------------------------------------
def names(required) -> set[str]:
    return {e.name for e in required}


def test_at_the_planned_load_every_alert_is_forbidden(prod):
    from observability.rules import AlertPolicy
    required, forbidden = expectations(prod, 10.0, 1200, None, AlertPolicy(), NAMESPACE)
    alerts = {r["alert"] for g in rule_groups(prod, NAMESPACE) for r in g["rules"] if "alert" in r}
    assert required == [] and forbidden == alerts


@pytest.mark.parametrize("outage, expected", [
    ("us-east-1b@300:900", {"LLMServingZoneWithoutReadyReplica", "LLMServingRedundancyLost"}),
    ("us-east-1b@300:1500", {"LLMServingZoneWithoutReadyReplica", "LLMServingRedundancyLost",
                             "LLMServingReplicasBelowPlan"}),              # 20 minutes: past its 15m too
    ("us-east-1b@300:500", set()),                                          # shorter than any for + lag
])
def test_a_zone_loss_expects_the_alerts_whose_for_it_outlasts(prod, outage, expected):
    from observability.rules import AlertPolicy
    from simulator import parse_fail_zone
    required, forbidden = expectations(prod, 10.0, 1800, parse_fail_zone(outage, 1800), AlertPolicy(), NAMESPACE)
    assert names(required) == expected
    assert {"LLMServingTTFTAboveSLO", "LLMServingTPOTAboveSLO", "LLMServingLoadAboveCapacityAfterLoss"} <= forbidden


def test_past_capacity_the_binding_latency_alert_and_the_load_alerts_are_expected(prod):
    from observability.rules import AlertPolicy
    required, _ = expectations(prod, 1.25 * prod.capacity_qps, 1200, None, AlertPolicy(), NAMESPACE)
    assert names(required) == {"LLMServingTPOTAboveSLO", "LLMServingLoadNearCapacity",
                               "LLMServingLoadAboveCapacityAfterLoss"}


ZONE = Expectation("LLMServingZoneWithoutReadyReplica", "us-east-1b", resolve_after_s=900.0)


def event(name: str, fired: float, resolved: float | None, **labels) -> AlertEvent:
    return AlertEvent(name, {"alertname": name, **labels}, fired, resolved)


@pytest.mark.parametrize("events, ok, problem", [
    ([event(ZONE.name, 620, 920, zone="us-east-1b")], True, ""),
    ([], False, "did not fire"),
    ([event(ZONE.name, 620, None, zone="us-east-1b")], False, "did not resolve after the zone came back"),
    ([event(ZONE.name, 620, 920, zone="us-east-1a")], False, "did not fire"),     # the wrong zone
    ([event(ZONE.name, 620, 920, zone="us-east-1b"), event("LLMServingTPOTAboveSLO", 700, None)], False, ""),
])
def test_judge(events, ok, problem):
    verdict = judge(events, [ZONE], {"LLMServingTPOTAboveSLO"})
    assert verdict.ok is ok
    assert verdict.required[0][1] == problem


def test_alerts_neither_expected_nor_forbidden_are_listed_not_judged():
    verdict = judge([event("LLMServingQueueBeyondPlan", 400, 500)], [], set())
    assert verdict.ok and [e.name for e in verdict.not_judged] == ["LLMServingQueueBeyondPlan"]


# -- check: plan versus live ---------------------------------------------------------------------------
def fleet(prod, *, per_replica_qps: float = 5.0, tpot_factor: float = 1.0, slo_tpot_s: float = 0.02,
          offered: float | None = None, ready=None) -> FleetLive:
    """Two replicas; the service's TTFT (0.1 s) and TPOT (slo_tpot_s) at the SLO statistic."""
    from observability.rules import slo_alerts
    from simulator import replica_model
    rm = replica_model(prod)
    reps = [ReplicaLive(z, f"vllm-{z}-0", qps=per_replica_qps, tpot_mean_s=tpot_factor * rm.tpot_s(per_replica_qps),
                        ttft_mean_s=0.06, ttft_p95_s=0.1, tpot_p95_s=0.02, kv_usage_avg=0.04, kv_usage_max=0.06,
                        running_avg=17.0, waiting_avg=0.0) for z in ("us-east-1a", "us-east-1b")]
    ttft, tpot = slo_alerts(prod)
    return FleetLive("10m", reps, offered if offered is not None else 2 * per_replica_qps,
                     ready if ready is not None else {"us-east-1a": 1.0, "us-east-1b": 1.0},
                     {ttft.name: 0.1, tpot.name: slo_tpot_s})


@pytest.mark.parametrize("change, problem", [
    ({}, None),
    ({"tpot_factor": 1.08}, None),                                      # within the 10% tolerance
    ({"tpot_factor": 1.2}, "slower than the plan's profile"),
    ({"offered": 17.0}, "N+1 by zone no longer holds"),
    ({"ready": {"us-east-1a": 1.0, "us-east-1b": 0.0}}, "losing the zone holding the most"),
    ({"slo_tpot_s": 0.045}, "mean TPOT 45.0 ms is above its 40.0 ms SLO"),     # prod's SLOs are means
])
def test_check(prod, change, problem):
    from twin.check import check
    result = check(prod, fleet(prod, **change))
    if problem is None:
        assert result.ok, result.problems
    else:
        assert any(problem in p for p in result.problems), result.problems


def test_check_with_no_vllm_series_is_outside_the_plan(prod):
    from twin.check import check
    result = check(prod, FleetLive("10m", [], None, {}))
    assert not result.ok and "no vLLM series" in result.problems[0]


# -- calibrate's profile file ---------------------------------------------------------------------------
def test_a_written_profile_keeps_the_others_and_the_header(tmp_path):
    from sizing.catalog import DATA_DIR
    from sizing.profiles import get_profile
    from twin import efficiency
    from twin.calibrate import write_profile

    path = tmp_path / "profiles.yaml"
    original = (DATA_DIR / "profiles.yaml").read_text()
    path.write_text(original)
    write_profile(path, efficiency.with_efficiencies(get_profile("seed"), 0.4, 1.9, name="fleet-x"))
    doc = yaml.safe_load(path.read_text())
    assert doc["profiles"]["fleet-x"]["mfu"] == 0.4 and doc["profiles"]["fleet-x"]["real_factor"] == 1.9
    assert doc["profiles"]["seed"] == yaml.safe_load(original)["profiles"]["seed"]
    assert path.read_text().startswith("#")


def test_a_profile_is_selectable_only_inside_plan_under(prod):
    from sizing.profiles import get_profile, load_profiles
    from twin import efficiency
    from twin.calibrate import plan_under

    slower = efficiency.with_efficiencies(get_profile("seed"), 0.4, 1.9, name="fleet-y")
    after = plan_under(prod.request, slower)
    assert after.capacity_per_replica.qps < prod.capacity_per_replica.qps
    assert "fleet-y" not in load_profiles()


# -- input boundaries: one line, naming the option, exit 2 --------------------------------------------
BAD = [
    (("twin", "--stack", "prod", "--time-scale", "0"), "--time-scale"),
    (("twin", "--stack", "prod", "--time-scale", "1000"), "--time-scale"),
    (("twin", "--stack", "prod", "--duration", "-5"), "--duration"),
    (("twin", "--stack", "prod", "--fail-zone", "us-east-1c@100"), "--fail-zone"),
    (("twin", "--stack", "prod", "--fail-zone", "soon"), "--fail-zone"),
    (("twin", "--stack", "nope"), "--stack nope"),
    (("check", "--stack", "prod", "--prometheus", "ftp://host"), "--prometheus"),
    (("check", "--stack", "prod", "--prometheus", "http://127.0.0.1:9090", "--window", "ten"), "--window"),
    (("check", "--stack", "prod", "--prometheus", "http://127.0.0.1:9090", "--tolerance", "2"), "--tolerance"),
    (("calibrate", "--prometheus", "http://127.0.0.1:9090", "--name", "seed"), "--name"),
    (("calibrate", "--prometheus", "http://127.0.0.1:9090", "--name", "Bad Name"), "--name"),
    (("calibrate", "--prometheus", "http://127.0.0.1:9090", "--profiles-file", "/nonexistent.yaml"),
     "--profiles-file"),
]


@pytest.mark.parametrize("argv, option", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_bad_input_is_one_line_naming_the_option(argv, option):
    code, out, err = run_cli(*argv)
    assert code == 2
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {option}")


@pytest.mark.parametrize("command", [("check", "--stack", "prod"), ("calibrate",)])
def test_an_unreachable_prometheus_is_one_line_and_exit_1(command):
    code, out, err = run_cli(*command, "--prometheus", f"http://127.0.0.1:{free_port()}", "--window", "1m")
    assert code == 1
    assert err.startswith("error: cannot reach Prometheus at http://127.0.0.1:") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("profile, field", [("seed", "real_factor"), ("calibrated", "decode_bw_fraction")])
def test_the_decode_step_factor_round_trips_through_either_step_model(profile, field):
    from sizing.profiles import get_profile
    from twin import efficiency

    base = get_profile(profile)
    changed = efficiency.with_efficiencies(base, 0.4, 1.25 * efficiency.decode_factor(base))
    assert efficiency.decode_field(base) == field
    assert efficiency.decode_factor(changed) == pytest.approx(1.25 * efficiency.decode_factor(base), rel=1e-3)
    assert efficiency.prefill_efficiency(changed) == 0.4


def test_a_run_too_short_for_an_alerts_for_expects_nothing_of_it(prod):
    from observability.rules import AlertPolicy
    from simulator import parse_fail_zone
    required, _ = expectations(prod, 1.25 * prod.capacity_qps, 600, parse_fail_zone("us-east-1b@300", 600),
                               AlertPolicy(), NAMESPACE)
    assert required == []        # 10m latency and 15m load alerts, and a 5-minute outage to the end
