"""The autoscaling policy the plan derives (sizing/autoscale.py) and the cold start it leads by
(sizing/coldstart.py): one named check per rule, on the prod-like fixture planned with the
default (`measured`) profile for a day compressed into 6 h, 2 -> 14 -> 2 QPS."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from sizing.load_curve import parse_curve_csv
from tests.stacks import plan_for

DAY_6H = "t_s,qps\n0,2\n10800,14\n21600,2\n"


@pytest.fixture(scope="module")
def day_plan():
    """prod's workload, model and pools (Llama 3 70B FP8, 1000/300, p5.48xlarge, 2 zones), the
    default profile, planned for the curve's peak with its policy."""
    from sizing.planner import plan
    _, p = plan_for("prod", {"sizing": {"profile": "measured"}})
    curve = parse_curve_csv(DAY_6H, "day.csv")
    return plan(replace(p.request, workload=replace(p.request.workload, qps=curve.peak_qps), traffic=curve))


def test_the_plan_is_the_fleet_for_the_peak(day_plan):
    a = day_plan.autoscale
    assert (a.peak_qps, a.trough_qps, day_plan.request.workload.qps) == (14.0, 2.0, 14.0)
    assert a.ceiling_by_zone == day_plan.replicas_by_zone


def test_the_floor_is_the_n_plus_one_plan_for_the_trough(day_plan):
    from sizing.planner import plan_aggregated
    req = day_plan.request
    trough = plan_aggregated(replace(req, workload=replace(req.workload, qps=2.0), traffic=None, tp=day_plan.tp))
    a = day_plan.autoscale
    assert a.floor_by_zone == trough.replicas_by_zone
    assert trough.survives_failure
    assert sum(a.floor_by_zone.values()) < sum(a.ceiling_by_zone.values())


def test_each_zone_alone_carries_the_fleet_at_every_load(day_plan):
    """Each zone's ScaledObject divides the fleet's rate by (zones - 1) x the capacity per replica,
    less the HPA's 10% tolerance (it scales only past 1.1 x the threshold)."""
    a = day_plan.autoscale
    zones = len(a.floor_by_zone)
    assert a.zone_threshold == pytest.approx((zones - 1) * day_plan.capacity_per_replica.qps / 1.1, rel=1e-3)
    assert a.target_per_replica == pytest.approx(day_plan.capacity_per_replica.qps, rel=1e-3)
    for z in a.ceiling_by_zone:
        assert a.ceiling_by_zone[z] * a.zone_threshold >= a.peak_qps


def test_scale_ups_lead_by_the_cold_start_they_wait_on(day_plan):
    """Every scale-up fits the floor's node in each zone: the lead is the warm-node cold start."""
    a = day_plan.autoscale
    assert a.nodes_floor_by_zone == a.nodes_ceiling_by_zone
    assert a.lead_s == a.cold_start.replica_on_warm_node_s
    assert a.lead_query.endswith(f", {math.ceil(a.lead_s)})")


def test_a_cold_start_takes_at_least_the_model_load_and_a_minute_for_70b_fp8(day_plan):
    cold = day_plan.autoscale.cold_start
    load = next(t.seconds for t in cold.terms if t.name == "model_load")
    assert cold.replica_on_warm_node_s >= max(load, 60.0)
    assert cold.replica_on_new_node_s > cold.replica_on_warm_node_s


def test_every_cold_start_term_is_cited_or_named_an_assumption(day_plan):
    for term in day_plan.autoscale.cold_start.terms:
        assert re.search(r"https://\S+", term.source) or term.source.startswith("assumption"), term.name


def test_the_steps_inside_the_container_fit_the_startup_probe_budget(day_plan):
    """The probe starts counting once the container starts: after the node and the image."""
    from deployment.serving import startup_budget_s
    cold = day_plan.autoscale.cold_start
    in_container = sum(t.seconds for t in cold.terms if t.name not in ("node_provision", "image_pull"))
    assert in_container <= startup_budget_s(day_plan.weights_gb)


def test_scale_down_waits_longer_than_a_drain_and_a_cold_start(day_plan):
    from deployment.drain import drain_timing, longest_request_s
    a = day_plan.autoscale
    grace = drain_timing(longest_request_s(day_plan)).grace_period_s
    assert a.scale_down_stabilization_s >= max(300, grace, a.lead_s + longest_request_s(day_plan))


def test_the_queries_use_vllm_0_29_0_series_and_parse(day_plan, tmp_path):
    """The metric is a vLLM 0.29.0 counter of the metric contract, and promtool parses both queries."""
    from observability.contract import SERIES
    a = day_plan.autoscale
    names = {s.name: s.kind for s in SERIES}
    for query in (a.query, a.lead_query):
        used = set(re.findall(r"vllm:[a-z_]+", query))
        assert used == {"vllm:request_success_total"} and names["vllm:request_success_total"] == "counter"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/test does)")
    rules = tmp_path / "rules.yaml"
    import yaml
    rules.write_text(yaml.safe_dump({"groups": [{"name": "autoscale", "rules": [
        {"record": "llm:fleet_requests_per_s", "expr": a.query},
        {"record": "llm:fleet_requests_per_s_ahead", "expr": a.lead_query}]}]}))
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_plan_json_reports_the_peak_the_trough_and_their_fleets(day_plan):
    from sizing.report import plan_to_dict
    d = plan_to_dict(day_plan)["autoscale"]
    assert (d["peak"]["qps"], d["trough"]["qps"]) == (14.0, 2.0)
    assert d["peak"]["replicas_by_zone"] == day_plan.replicas_by_zone
    assert d["trough"]["gpus"] == day_plan.tp * sum(d["floor_by_zone"].values())
    assert {t["name"] for t in d["cold_start"]["terms"]} == {"node_provision", "image_pull", "model_download",
                                                             "compile", "model_load", "engine_start"}


def test_without_traffic_the_plan_has_no_policy():
    _, p = plan_for("prod")
    from sizing.report import plan_to_dict
    assert p.autoscale is None and "autoscale" not in plan_to_dict(p)


@pytest.mark.parametrize("change, field, message", [
    ({"qps": 10.0}, "workload.qps", "10 QPS is below the traffic's peak of 14: the plan is the fleet for the peak; "
                                    "raise it or leave it unset"),
    ({"qps": None, "concurrency": 64}, "traffic", "a load over time is a request rate: give workload.qps (or leave "
                                                  "it to the curve's peak), not concurrency"),
])
def test_a_request_the_policy_cannot_follow_is_refused(change, field, message):
    from sizing.planner import plan
    from sizing.placement import PlanError
    _, p = plan_for("prod", {"sizing": {"profile": "measured"}})
    req = replace(p.request, workload=replace(p.request.workload, **change), traffic=parse_curve_csv(DAY_6H, "d"))
    with pytest.raises(PlanError) as exc:
        plan(req)
    assert (str(exc.value), exc.value.field) == (message, field)


def test_multi_node_groups_scale_as_whole_groups():
    """A replica over several nodes is a LeaderWorkerSet group: the policy counts groups and nodes."""
    from sizing.planner import plan
    _, p = plan_for("prod-multinode")
    assert p.nodes_per_replica > 1
    w = p.request.workload
    curve = parse_curve_csv(f"t_s,qps\n0,{w.qps / 4:g}\n3600,{w.qps:g}\n", "d")
    a = plan(replace(p.request, traffic=curve)).autoscale
    assert a.scales == "groups"
    assert all(a.nodes_ceiling_by_zone[z] == a.ceiling_by_zone[z] * p.nodes_per_replica for z in a.ceiling_by_zone)
    assert any("LeaderWorkerSet" in n for n in a.notes)
