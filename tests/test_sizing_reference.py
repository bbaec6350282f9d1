"""Golden figures: the reference sizing table (../shared/reference/sizing-reference.md), within 3%.

The reference figures are means, so the reference case states `slo_statistic="mean"` (the default
for new stacks and the CLI is p95)."""
from __future__ import annotations

import pytest

from sizing.catalog import load_catalog
from sizing.memory import Shape
from sizing.model import ReplicaModel
from sizing.planner import PlanRequest, plan
from sizing.profiles import get_profile
from sizing.report import plan_to_dict
from sizing.workload import Workload

TOL = 0.03


def replica(tp=4, output_tokens=300, real=True) -> ReplicaModel:
    c = load_catalog()
    shape = Shape(c.model("llama-3-70b"), c.instance("p5.48xlarge"), tp, "fp8", "bf16")
    return ReplicaModel(shape, Workload(output_tokens=output_tokens, slo_statistic="mean"), get_profile("seed"),
                        real=real)


@pytest.fixture(scope="module")
def ref() -> dict:
    return plan_to_dict(plan(PlanRequest(Workload(qps=10, slo_statistic="mean"), gpu_hour_price=2.50, profile="seed")))


def at(d: dict, path: str):
    for part in path.split("."):
        d = d[part]
    return d


# (figure in the reference table, json path, reference value)
REFERENCE_TABLE = [
    ("prefill time per 1,000-token prompt (ms)", "prefill_ms", 36),
    ("prefill share of the replica at 10 QPS", "prefill_share", 0.36),
    ("QPS at which prefill alone saturates the replica", "prefill_saturation_qps", 27.8),
    ("TPOT at 10 QPS, ideal (ms)", "tpot_ms.ideal", 9.5),
    ("TPOT at 10 QPS, real (ms)", "tpot_ms.real", 16.8),
    ("sequences in flight, ideal", "in_flight.ideal", 29),
    ("sequences in flight, real", "in_flight.real", 51),
    ("KV cache at that point (GB)", "kv_cache_gb", 21.7),
    ("memory used of the replica (GB)", "memory_used_gb", 92),
    ("replica memory (GB)", "memory_total_gb", 320),
    ("weights (GB)", "weights_gb", 70.6),
    ("capacity, ideal (QPS)", "capacity_per_replica_qps.ideal", 19.5),
    ("capacity, real (QPS)", "capacity_per_replica_qps.real", 15.9),
    ("utilisation of one replica at 10 QPS", "utilization", 0.63),
    ("replicas for N+1 across two failure domains", "replicas", 2),
    ("GPUs", "gpus_used", 8),
    ("cost at $2.50 per GPU-hour ($/h)", "cost_per_hour", 20),
    ("cost per 1M output tokens ($)", "cost_per_million_output_tokens", 1.85),
]


@pytest.mark.parametrize("figure,path,expected", REFERENCE_TABLE, ids=[r[0] for r in REFERENCE_TABLE])
def test_reference_figure(ref, figure, path, expected):
    assert at(ref, path) == pytest.approx(expected, rel=TOL)


def test_reference_binding_constraint_is_tpot(ref):
    assert ref["binding_constraint"].startswith("per replica, mean TPOT reaches the 40 ms SLO")


def test_reference_leaves_half_the_gpus_idle(ref):
    assert ref["gpus_total"] == 16 and ref["gpus_used"] == 8
    assert [n["gpus_idle"] for n in ref["nodes"]] == [4, 4]
    assert any(note.startswith("8 of 16 GPUs stay idle") for note in ref["notes"])


def test_follow_up_tp2_fits_but_prefill_takes_72_percent():
    rm = replica(tp=2)
    assert rm.memory.weights_per_gpu_gb == pytest.approx(35.3, rel=TOL)
    assert rm.at(10).prefill_share == pytest.approx(0.72, rel=TOL)
    assert rm.tpot_capacity_qps(0.040) == pytest.approx(5.8, rel=TOL)


def test_follow_up_1000_output_tokens_triples_decode_work():
    short, long = replica(output_tokens=300), replica(output_tokens=1000)
    # Time in the system per request (prefill + decode steps) at a light load roughly triples.
    def time_in_system(rm):
        return rm.in_flight(2, rm.tpot_s(2)) / 2
    assert 3 <= time_in_system(long) / time_in_system(short) <= 4   # 3.3x the tokens, longer contexts
    assert long.tpot_capacity_qps(0.040) == pytest.approx(8.3, rel=TOL)


def test_follow_up_1000_output_tokens_needs_two_replicas_per_zone():
    p = plan(PlanRequest(Workload(qps=10, output_tokens=1000, slo_statistic="mean"), tp=4, profile="seed"))
    assert p.replicas_by_zone == {"us-east-1a": 2, "us-east-1b": 2}
    assert sum(n.gpus_idle for n in p.nodes) == 0          # exactly fills two 8-GPU p5 nodes


def test_20_qps_needs_four_replicas_and_fits():
    p = plan(PlanRequest(Workload(qps=20, slo_statistic="mean"), tp=4))
    assert p.replicas == 4 and p.survives_failure


def test_40_qps_cannot_survive_a_zone_loss_and_is_refused():
    from sizing.planner import PlanError
    with pytest.raises(PlanError, match="after losing us-east-1a"):
        plan(PlanRequest(Workload(qps=40, slo_statistic="mean"), tp=4))


def test_kv_bytes_per_token_match_the_hardware_notes():
    c = load_catalog()
    assert c.model("llama-3-70b").kv_bytes_per_token("bf16") == 320 * 1024
    assert c.model("llama-3-70b").kv_bytes_per_token("fp8") == 160 * 1024
    assert c.model("llama-3-8b").kv_bytes_per_token("bf16") == 128 * 1024
    assert c.model("llama-3.1-405b").kv_bytes_per_token("bf16") == 504 * 1024
