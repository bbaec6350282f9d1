"""The analytic model beyond the reference: memory, KV limits, closed loop, p95, TP communication."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from sizing.catalog import load_catalog
from sizing.checks import check_shape
from sizing.memory import Shape, memory
from sizing.model import ReplicaModel
from sizing.profiles import get_profile
from sizing.queueing import erlang_c_wait, md1_wait, poisson_quantile
from sizing.workload import SizingError, Workload

CAT = load_catalog()
REF = get_profile("seed")


def rm(model="llama-3-70b", instance="p5.48xlarge", tp=4, weights="fp8", kv="bf16", real=True, profile=REF, **w):
    """A replica under the seed profile with mean SLOs (the seed's mechanics) unless told."""
    shape = Shape(CAT.model(model), CAT.instance(instance), tp, weights, kv)
    return ReplicaModel(shape, Workload(**{"slo_statistic": "mean", **w}), profile, real=real)


def test_fixed_point_is_exact():
    """TPOT from the closed form satisfies Little's law and the step formula together."""
    r = rm()
    tpot = r.tpot_s(10)
    n = r.in_flight(10, tpot)
    assert tpot == pytest.approx(r.step_s(n) / (1 - 10 * r.share_per_request_s), rel=1e-12)


def test_iterating_the_fixed_point_converges_to_the_closed_form():
    r = rm()
    tpot = 0.0
    for _ in range(200):
        tpot = r.step_s(r.in_flight(10, tpot)) / (1 - 10 * r.share_per_request_s)
    assert tpot == pytest.approx(r.tpot_s(10), rel=1e-9)


def test_capacity_is_where_tpot_meets_the_slo():
    r = rm()
    cap = r.tpot_capacity_qps(0.040)
    assert r.tpot_s(cap) == pytest.approx(0.040, rel=1e-9)


@pytest.mark.parametrize("model,instance,tp,weights,field,message", [
    ("llama-3-70b", "p5.48xlarge", 1, "fp8", "weights", "fp8 weights of llama-3-70b need 70.6 GB per GPU at TP=1, more than the 68.0 GB usable on a h100-sxm (raise TP or use a larger GPU)"),
    ("llama-3.1-405b", "p5.48xlarge", 8, "bf16", "weights", "bf16 weights of llama-3.1-405b need 101.5 GB per GPU at TP=8, more than the 68.0 GB usable on a h100-sxm (use fp8 weights or a larger GPU)"),
    ("llama-3-70b", "p5.48xlarge", 16, "fp8", "tp", "tensor parallel 16 exceeds the 8 GPUs of one p5.48xlarge node (a TP group never spans nodes); use at most 8"),
    ("llama-3-70b", "p5.48xlarge", 3, "fp8", "tp", "tensor parallel 3 does not divide the 64 attention heads of llama-3-70b; use one of 1, 2, 4, 8"),
])
def test_shapes_that_cannot_run(model, instance, tp, weights, field, message):
    shape = Shape(CAT.model(model), CAT.instance(instance), tp, weights, "bf16")
    with pytest.raises(SizingError) as exc:
        check_shape(shape, Workload(), REF)
    assert (exc.value.field, str(exc.value)) == (field, message)


def test_405b_fp8_fits_on_one_p5_node():
    shape = Shape(CAT.model("llama-3.1-405b"), CAT.instance("p5.48xlarge"), 8, "fp8", "bf16")
    check_shape(shape, Workload(), REF)          # raises SizingError if it does not fit
    mem = memory(shape, Workload(), REF)
    assert mem.weights_per_gpu_gb < mem.usable_per_gpu_gb and mem.max_seqs_kv >= 1


def test_kv_limit_binds_when_sequences_no_longer_fit():
    r = rm(input_tokens=8000, output_tokens=2000, tpot_slo_s=0.2, qps=1)
    cap = r.capacity()
    assert cap.binding == "kv"
    assert r.in_flight(cap.qps, r.tpot_s(cap.qps)) == pytest.approx(r.memory.max_seqs, rel=1e-6)


def test_past_the_kv_limit_requests_queue_and_ttft_grows():
    r = rm(input_tokens=8000, output_tokens=2000, tpot_slo_s=0.2, qps=1)
    kv_cap = r.capacity().by_constraint["kv"]
    below, near, past = r.at(0.5 * kv_cap), r.at(0.98 * kv_cap), r.at(1.02 * kv_cap)
    assert below.stable and near.stable and not past.stable
    assert near.ttft_ms > below.ttft_ms and near.queue_ms > below.queue_ms
    assert math.isinf(past.ttft_ms)


def test_p95_is_above_the_mean():
    p = rm().at(10)
    assert p.ttft_p95_ms > p.ttft_ms and p.tpot_p95_ms > p.tpot_ms


@pytest.mark.parametrize("clients", [1, 10, 50, 200])
def test_closed_loop_obeys_littles_law(clients):
    r = rm(qps=None, concurrency=clients)
    c = r.closed_loop(clients)
    per_request_s = c["ttft_ms"] / 1e3 + 299 * c["tpot_ms"] / 1e3
    assert c["requests_per_s"] * per_request_s == pytest.approx(clients, rel=1e-6)
    assert c["output_tokens_per_s"] == pytest.approx(300 * c["requests_per_s"])


def test_closed_loop_beyond_the_kv_limit_queues():
    r = rm(qps=None, concurrency=2000)
    c = r.closed_loop(2000)
    assert c["running"] == r.memory.max_seqs
    assert c["waiting"] == 2000 - r.memory.max_seqs and c["queue_ms"] > 0


def test_tp_communication_pcie_costs_more_than_nvlink():
    """TP=8 on L40S (PCIe) pays all-reduce time that TP=8 on H100 (NVSwitch) does not."""
    nvlink = rm(model="llama-3-8b", instance="p5.48xlarge", tp=8)
    pcie = rm(model="llama-3-8b", instance="g6e.48xlarge", tp=8)
    assert nvlink.prefill_comm_s == 0 and nvlink.branches[1][0] == 0
    assert pcie.prefill_comm_s > 0 and pcie.branches[1][0] > 0
    # Scale out the GPU difference: PCIe TP=8 gains less from TP than its bandwidth alone predicts.
    pcie_tp1 = rm(model="llama-3-8b", instance="g6e.48xlarge", tp=1)
    assert pcie.step_s(32) > pcie_tp1.step_s(32) / 8 * 1.5


def test_fp8_weights_on_a100_run_with_bf16_math():
    a100 = CAT.gpu("a100-40gb")
    assert a100.peak_tflops("fp8") == a100.bf16_tflops


def test_md1_and_erlang_c_limits():
    assert md1_wait(0.0, 1.0) == (0.0, 0.0)
    assert md1_wait(0.5, 1.0)[0] == pytest.approx(0.5)          # rho D / (2 (1 - rho))
    assert math.isinf(md1_wait(1.0, 1.0)[0])
    mean, _ = erlang_c_wait(1, 0.5, 1.0)                        # M/M/1: rho / (mu - lambda)
    assert mean == pytest.approx(1.0)
    assert poisson_quantile(50, 0.95) == 62                     # table value of the Poisson(50) 95th percentile


# -- properties --------------------------------------------------------------------------------
loads = st.floats(min_value=0.1, max_value=12.0)


@settings(max_examples=60, deadline=None)
@given(q1=loads, q2=loads)
def test_tpot_rises_with_qps(q1, q2):
    r = rm()
    lo, hi = sorted((q1, q2))
    assert r.tpot_s(lo) <= r.tpot_s(hi)


@settings(max_examples=40, deadline=None)
@given(out1=st.integers(50, 3000), out2=st.integers(50, 3000))
def test_capacity_falls_as_outputs_lengthen(out1, out2):
    short, long = sorted((out1, out2))
    assert rm(output_tokens=long).capacity().qps <= rm(output_tokens=short).capacity().qps + 1e-9


@settings(max_examples=40, deadline=None)
@given(slo1=st.floats(0.012, 0.2), slo2=st.floats(0.012, 0.2))
def test_capacity_rises_with_a_looser_tpot_slo(slo1, slo2):
    tight, loose = sorted((slo1, slo2))
    r = rm()
    assert r.tpot_capacity_qps(tight) <= r.tpot_capacity_qps(loose)


@settings(max_examples=40, deadline=None)
@given(clients=st.integers(1, 3000))
def test_closed_loop_throughput_never_exceeds_the_open_loop_kv_capacity(clients):
    r = rm(qps=None, concurrency=clients)
    assert r.closed_loop(clients)["requests_per_s"] <= r.qps_at_batch(r.memory.max_seqs) + 1e-9


# -- properties of the one step model, open and closed loop, both profiles ------------------------
PROFILES = ("seed", "calibrated")
shapes = st.sampled_from([("llama-3-70b", "p5.48xlarge", 4), ("llama-3-70b", "p5.48xlarge", 2),
                          ("llama-3-8b", "p5.48xlarge", 1), ("llama-3-70b", "p5e.48xlarge", 1)])
lengths = st.tuples(st.integers(100, 8000), st.integers(20, 2000))
statistics = st.sampled_from(["mean", "p50", "p90", "p95", "p99"])


def model_for(shape, length, statistic, profile):
    model, instance, tp = shape
    return rm(model=model, instance=instance, tp=tp, profile=get_profile(profile), input_tokens=length[0],
              output_tokens=length[1], slo_statistic=statistic)


def at_full_chunk_ceiling(r, p) -> bool:
    """The point's TPOT at its statistic is the full-budget step at the batch's quantile."""
    from sizing.queueing import QUANTILES, poisson_quantile_smooth
    tpot, u = r._tpot_and_share(p.qps)
    n = r.in_flight(p.qps, tpot)
    nq = poisson_quantile_smooth(n, QUANTILES[p.statistic])
    ceiling = max(r.step.step_s(nq, max(r.batched_tokens - nq, 0.0)), r.step_s(n) / (1 - u))
    return math.isclose(1e3 * ceiling, p.tpot_at_statistic_ms, rel_tol=1e-9)


@settings(max_examples=80, deadline=None)
@given(shape=shapes, length=lengths, statistic=statistics, profile=st.sampled_from(PROFILES),
       f1=st.floats(0.01, 1.2), f2=st.floats(0.01, 1.2))
def test_ttft_and_tpot_rise_with_the_load_and_stay_finite_while_stable(shape, length, statistic, profile, f1, f2):
    r = model_for(shape, length, statistic, profile)
    top = r.qps_at_batch(r.memory.max_seqs)
    lo, hi = (r.at(f * top) for f in sorted((f1, f2)))
    for p in (lo, hi):
        if p.stable:
            figures = (p.ttft_ms, p.ttft_p95_ms, p.tpot_ms, p.tpot_p95_ms, p.ttft_at_statistic_ms, p.tpot_at_statistic_ms)
            assert all(math.isfinite(x) and x > 0 for x in figures)
        else:
            assert p.unstable_reason
    if lo.stable and hi.stable:
        assert lo.ttft_at_statistic_ms <= hi.ttft_at_statistic_ms * (1 + 1e-9)
        # One exception, exact: at a tail statistic the step can reach its ceiling, a full step of
        # max_num_batched_tokens; more load puts more (cheaper) decode tokens and fewer prompt tokens
        # in that fixed budget, so the ceiling itself can fall a little. Then both are at it.
        if lo.tpot_at_statistic_ms > hi.tpot_at_statistic_ms * (1 + 1e-9):
            assert all(at_full_chunk_ceiling(r, p) for p in (lo, hi)), (lo, hi)
        assert lo.ttft_ms <= hi.ttft_ms * (1 + 1e-9) and lo.tpot_ms <= hi.tpot_ms * (1 + 1e-9)
    if hi.stable:
        assert lo.stable                      # stability never returns at a higher load


@settings(max_examples=60, deadline=None)
@given(shape=shapes, length=lengths, profile=st.sampled_from(PROFILES),
       c1=st.integers(1, 3000), c2=st.integers(1, 3000))
def test_closed_loop_ttft_and_tpot_rise_with_the_clients_and_stay_finite(shape, length, profile, c1, c2):
    r = model_for(shape, length, "p95", profile)
    lo, hi = (r.closed_point(c) for c in sorted((c1, c2)))
    for p in (lo, hi):
        assert p.stable and all(math.isfinite(x) and x > 0 for x in (p.ttft_ms, p.ttft_p95_ms, p.tpot_ms))
    assert lo.ttft_ms <= hi.ttft_ms * (1 + 1e-6) and lo.tpot_ms <= hi.tpot_ms * (1 + 1e-6)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, length=lengths, profile=st.sampled_from(PROFILES))
def test_capacity_at_a_percentile_is_at_most_the_mean_capacity(shape, length, profile):
    r = model_for(shape, length, "mean", profile)
    assert r.capacity("p95").qps <= r.capacity("mean").qps * (1 + 1e-3)


def test_the_mixed_step_reads_the_weights_once():
    """A decode batch rides along a prompt chunk: the mixed step is less than the sum of its parts
    (the H200 measurements: 0.64-1.0 x the sum)."""
    step = rm(profile=get_profile("calibrated")).step
    for n, c in ((8, 256), (32, 512), (64, 984), (128, 2048)):
        ratio = step.step_s(n, c) / (step.decode_s(n) + step.prefill_s(c))
        assert 0.5 <= ratio < 1.0


def test_the_reference_step_is_the_seeds_sum():
    step = rm().step
    assert step.step_s(51, 512) == pytest.approx(step.decode_s(51) + 512 * step.e, rel=1e-12)


@pytest.mark.parametrize("field,value,message", [
    ("qps", math.nan, "must be a finite number greater than 0 (got nan)"),
    ("qps", math.inf, "must be a finite number greater than 0 (got inf)"),
    ("ttft_slo_s", -1.0, "must be a finite number greater than 0 (got -1.0)"),
    ("input_tokens", math.inf, "must be a finite number greater than 0 (got inf)"),
    ("slo_statistic", "p42", "unknown statistic 'p42'; choose one of: mean, p50, p90, p95, p99"),
])
def test_non_finite_sizing_inputs_are_refused_naming_the_field(field, value, message):
    with pytest.raises(SizingError) as exc:
        Workload(**{field: value})
    assert (str(exc.value), exc.value.field) == (message, f"workload.{field}")


def test_kv_capacity_is_counted_the_way_vllm_counts_it():
    r = rm(profile=get_profile("calibrated"))
    mem = r.memory
    assert mem.kv_cache_tokens % 16 == 0                                   # whole blocks of 16 tokens
    # Paged: a running sequence holds the blocks of its tokens so far, on average its context
    # over the decode steps (1,000 + 300 / 2) plus half a block; one block is vLLM's null block.
    assert mem.max_seqs_kv == int((mem.kv_cache_tokens // 16 - 1) // (1150 / 16 + 0.5))
    # vLLM sees the H100's 79.11 GiB, not 80 GB, and takes 0.9 of it (request_memory).
    assert mem.usable_per_gpu_gb == pytest.approx(79.11 * 2**30 * 0.9 / 1e9 - 1.0 - mem.activation_gb - 1.0)
    assert mem.activation_gb > 0 and mem.cuda_graph_gb == 1.0
    assert mem.max_concurrency == pytest.approx(mem.kv_cache_tokens / 1300)


# -- the API server (profile request_overhead_ms) ----------------------------------------------------
def with_overhead(ms: float):
    from dataclasses import replace
    return replace(REF, request_overhead_ms=ms)


def test_no_request_overhead_leaves_every_figure_as_it_was():
    plain, zero = rm(), rm(profile=with_overhead(0.0))
    assert zero.at(10) == plain.at(10)
    assert zero.capacity() == plain.capacity()
    assert "server" not in plain.capacity().by_constraint


@pytest.mark.parametrize("qps", [10.0, 100.0, 190.0])
def test_ttft_adds_the_api_servers_md1_time(qps):
    """D + rho D / (2 (1 - rho)) at rho = QPS x D, D = 5 ms."""
    d = 0.005
    rho = qps * d
    plain, slow = rm(input_tokens=16, output_tokens=2), rm(input_tokens=16, output_tokens=2, profile=with_overhead(5.0))
    assert plain.at(qps).stable          # every load of the table within the engine's own steady state
    extra_ms = slow.at(qps).ttft_ms - plain.at(qps).ttft_ms
    assert extra_ms == pytest.approx(1e3 * (d + rho * d / (2 * (1 - rho))), rel=1e-9)


def test_capacity_binds_at_the_api_server_for_tiny_answers():
    """Tiny prompts and answers: the engine carries far more than 1000 / 5 ms = 200 requests/s."""
    w = {"input_tokens": 16, "output_tokens": 2, "ttft_slo_s": 1.0, "tpot_slo_s": 0.05}
    engine = rm(**w).capacity()
    cap = rm(profile=with_overhead(5.0), **w).capacity()
    assert engine.qps > 200
    assert (cap.binding, cap.qps) == ("server", pytest.approx(200.0))
    assert cap.by_constraint["server"] == pytest.approx(200.0)
    assert not rm(profile=with_overhead(5.0), **w).at(200.0).stable
