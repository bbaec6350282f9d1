"""The planner: TP choice, N+1 placement across zones, costs, and the reasons it refuses."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sizing.planner import PlanError, PlanRequest, Pool, plan, replicas_for_n_plus_one, spread
from sizing.report import plan_to_dict
from sizing.workload import Workload

P5 = "p5.48xlarge"


def pools(*nodes_per_zone: int, itype: str = P5) -> tuple[Pool, ...]:
    return tuple(Pool(f"us-east-1{chr(97 + i)}", itype, n) for i, n in enumerate(nodes_per_zone))


@pytest.mark.parametrize("survivors,slots,expected", [
    (1, {"a": 2, "b": 2}, {"a": 1, "b": 1}),
    (2, {"a": 2, "b": 2}, {"a": 2, "b": 2}),
    (2, {"a": 2, "b": 2, "c": 2}, {"a": 1, "b": 1, "c": 1}),
    (3, {"a": 2, "b": 2}, None),                     # losing a zone leaves 2 slots
    (4, {"a": 8, "b": 2, "c": 2}, {"a": 2, "b": 2, "c": 2}),
    (5, {"a": 8, "b": 2, "c": 2}, None),             # b and c together back up at most 4
    (2, {"a": 8, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 1}),
])
def test_n_plus_one_placement(survivors, slots, expected):
    assert replicas_for_n_plus_one(survivors, slots) == expected


def test_spread_is_even_where_slots_allow():
    assert spread(5, {"a": 1, "b": 4, "c": 4}) == {"a": 1, "b": 2, "c": 2}


def test_tp_group_never_spans_nodes_and_nodes_report_idle_gpus():
    p = plan(PlanRequest(Workload(qps=30), pools=pools(2, 2), tp=4))
    assert p.nodes
    for node in p.nodes:
        assert node.gpus_used + node.gpus_idle == 8
        assert node.gpus_used % 4 == 0


def test_single_zone_falls_back_to_n_plus_one_by_node_and_says_so():
    p = plan(PlanRequest(Workload(qps=10), pools=pools(2), tp=4))
    assert p.redundancy == "node" and p.survives_failure
    assert "one zone only: the plan survives losing a node, not a zone" in p.notes


def test_single_node_has_no_redundancy_and_says_so():
    p = plan(PlanRequest(Workload(qps=2), model="llama-3-8b", pools=pools(1, itype="g6e.48xlarge")))
    assert p.redundancy == "none" and not p.survives_failure
    assert "one node only: no redundancy; losing it stops serving" in p.notes
    assert p.capacity_after_zone_loss_qps == 0 and p.replicas_after_loss == 0
    assert p.load_per_replica_qps == pytest.approx(2 / p.replicas) and p.real.stable   # figures at the full load


def test_replica_override_that_breaks_n_plus_one_is_reported():
    p = plan(PlanRequest(Workload(qps=10), replicas=1, tp=4))
    assert not p.survives_failure
    assert p.notes[0].startswith("replicas overridden to 1: N+1 does not hold")


def test_mixed_instance_types_are_refused():
    with pytest.raises(PlanError, match=r"GPU pools mix instance types \(g6e.48xlarge, p5.48xlarge\); use one type"):
        plan(PlanRequest(Workload(), pools=(Pool("us-east-1a", P5, 1), Pool("us-east-1b", "g6e.48xlarge", 1))))


def test_cost_both_ways():
    d = plan_to_dict(plan(PlanRequest(Workload(qps=10))))
    assert d["gpu_hour_price"] == pytest.approx(55.04 / 8)          # instance price / its GPUs by default
    assert d["node_cost_per_hour"] == pytest.approx(2 * 55.04)
    tokens_per_hour_m = 10 * 300 * 3600 / 1e6
    assert d["node_cost_per_million_output_tokens"] == pytest.approx(2 * 55.04 / tokens_per_hour_m, rel=1e-3)


def test_closed_loop_plan_reports_throughput():
    d = plan_to_dict(plan(PlanRequest(Workload(qps=None, concurrency=100))))
    assert d["requests_per_s"] > 0 and d["output_tokens_per_s"] == pytest.approx(300 * d["requests_per_s"], rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(qps=st.floats(0.5, 80), layout=st.lists(st.integers(1, 3), min_size=1, max_size=4),
       tp=st.sampled_from([None, 2, 4, 8]))
def test_plan_satisfies_n_plus_one_or_says_why(qps, layout, tp):
    req = PlanRequest(Workload(qps=qps), pools=pools(*layout), tp=tp)
    try:
        p = plan(req)
    except PlanError as exc:
        assert str(exc)          # a reason, never an empty refusal
        return
    per_replica = p.capacity_per_replica.qps
    if len(layout) >= 2:
        assert p.redundancy == "zone" and p.survives_failure
        worst = max(p.replicas_by_zone.values())
        assert (p.replicas - worst) * per_replica >= qps - 1e-6
        assert p.capacity_after_zone_loss_qps >= qps - 1e-6
    for node in p.nodes:
        assert 0 <= node.gpus_idle <= 8 and node.replicas * p.tp <= 8


@pytest.mark.parametrize("nodes,qps,expected_replicas", [(2, 10, 2), (3, 30, 3), (2, 30, 4)])
def test_single_zone_n_plus_one_by_node_survives_losing_the_fullest_node(nodes, qps, expected_replicas):
    p = plan(PlanRequest(Workload(qps=qps, slo_statistic="mean"), pools=pools(nodes), tp=4, profile="seed"))
    fullest = max(n.replicas for n in p.nodes)
    assert p.replicas == expected_replicas
    assert (p.replicas - fullest) * p.capacity_per_replica.qps >= qps


def test_a_fixed_replica_count_is_evaluated_as_that_fleet_all_up():
    """A stack's `replicas: N` (or `size --replicas N`): the figures of exactly that fleet at the load."""
    p = plan(PlanRequest(Workload(qps=12), replicas=3, pools=(Pool("us-east-1a", "p5.48xlarge", 1),
                                                               Pool("us-east-1b", "p5.48xlarge", 1)), tp=4))
    assert p.replicas == 3 and p.fleet.replicas == 3
    assert p.fleet.load_per_replica_qps == pytest.approx(4.0)
    assert p.fleet.real.ttft_ms == pytest.approx(p.replica_model.at(4.0).ttft_ms)
    assert plan(PlanRequest(Workload(qps=12), tp=4)).fleet is None       # planned: no fixed fleet
