"""The per-operation step model (the default profile, `measured`): its pieces, its floors, and that
the analytic engine and the simulator read the same step."""
from __future__ import annotations

import pytest

from simulator.replica import Replica
from sizing import ops
from sizing.catalog import load_catalog
from sizing.memory import Shape
from sizing.model import ReplicaModel
from sizing.planner import PlanRequest, Pool, plan
from sizing.profiles import get_profile
from sizing.workload import Workload

CAT = load_catalog()
MEASURED = get_profile("measured")

SHAPES = [   # (model, instance, tp, weights, layout)
    ("llama-3-70b", "p5.48xlarge", 4, "fp8", "tp"),
    ("llama-3.1-8b", "p5.48xlarge", 8, "bf16", "tp"),
    ("deepseek-r1", "p5en.48xlarge", 8, "fp8", "tp"),
    ("deepseek-r1", "p5en.48xlarge", 8, "fp8", "dp-ep"),
    ("qwen3-235b-a22b", "p5en.48xlarge", 8, "fp8", "tp-ep"),
    ("gpt-oss-120b", "p5.48xlarge", 8, "fp4", "tp"),
    ("nemotron-3-nano-30b-a3b", "p5en.48xlarge", 1, "bf16", "tp"),
    ("deepseek-v3.2", "p5en.48xlarge", 8, "fp8", "tp"),
]


def _replica(model, instance, tp, weights, layout, workload=None) -> ReplicaModel:
    shape = Shape(CAT.model(model), CAT.instance(instance), tp, weights, "bf16", layout)
    return ReplicaModel(shape, workload or Workload(qps=2), MEASURED)


def _sum_of_maxes(step, n: float) -> float:
    """A decode-only step evaluated operation by operation, independently of decode_branches."""
    total = step.a1 + step.b1 * n
    for needs, pieces in step.terms:
        if needs != "c":
            total += max(a + b * n for a, b, _ in pieces)
    for floor, read, compute, per_token, _e, _miss, ta, tb in step.moe:
        touched = ta + tb * n
        total += max(floor, read * touched, compute * touched + per_token * n)
    return total


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{s[4]}")
def test_decode_branches_are_the_sum_of_the_operations_exactly(shape):
    step = _replica(*shape).step
    for n in (1, 2, 7, 33, 128, 511, 1024):
        assert max(a + b * n for a, b in step.decode_branches()) == pytest.approx(_sum_of_maxes(step, n), rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{s[4]}")
def test_a_step_grows_with_its_decodes_and_its_chunk(shape):
    step = _replica(*shape).step
    decodes = [step.decode_s(n) for n in (1, 8, 64, 256)]
    chunks = [step.step_s(8, c) for c in (256, 1024, 4096)]
    assert decodes == sorted(decodes) and chunks == sorted(chunks) and chunks[0] > decodes[1]


def test_a_small_dense_model_at_tp8_pays_its_kernels_floors():
    """Llama 3.1 8B on 8 H100s, one client, 4,096-token prompts: 32 layers of kernels and two
    all-reduces each cost more than the bytes (the roofline alone plans well under 1 ms)."""
    rm = _replica("llama-3.1-8b", "p5.48xlarge", 8, "bf16", "tp",
                  Workload(concurrency=1, input_tokens=4096, output_tokens=300, qps=None))
    weight_read_s = CAT.model("llama-3.1-8b").weight_bytes("bf16") / (8 * 3.35e12)
    assert rm.step.decode_s(1) > 3 * weight_read_s
    assert rm.closed_loop(1)["tpot_ms"] > 1.5


def test_deepseek_r1_at_four_clients_on_h200_is_floor_bound():
    """8 x H200, 4 clients: the MLA modules and the fused-MoE kernels' floors, not the bytes, set the
    step (AIConfigurator's own per-op estimate is about 16 ms; the roofline's 4.5)."""
    rm = _replica("deepseek-r1", "p5en.48xlarge", 8, "fp8", "tp",
                  Workload(concurrency=4, input_tokens=1000, output_tokens=1000, qps=None))
    assert 10e-3 < rm.step.decode_s(4) < 20e-3


@pytest.mark.parametrize("model, gpu, kernel", [
    ("gpt-oss-120b", "h200", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"),
    ("gpt-oss-120b", "h100-sxm", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"),
    ("gpt-oss-120b", "b200", "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic"),
])
def test_mxfp4_experts_are_priced_by_the_mxfp4_kernel_vllm_runs(model, gpu, kernel):
    """gpt-oss's MXFP4 experts: the `moe/mxfp4` rows (vLLM's MXFP4 oracle: OAI Triton on Hopper,
    FlashInfer TRT-LLM MXFP4 x BF16 on Blackwell), never the BF16 Triton kernel at 4-bit bytes."""
    arch, gpu_ops = ops.arch_of(CAT.model(model)), ops.gpu_costs(gpu)
    w = arch.bytes_by_group("fp4")["experts"] / arch.params_by_group()["experts"]
    assert ops._moe_dtype(arch, gpu_ops, w) == "mxfp4"
    assert gpu_ops["moe"]["mxfp4"]["kernel"] == kernel


@pytest.mark.parametrize("model, weights, dtype", [
    ("qwen3-235b-a22b", "fp8", "fp8_block"), ("qwen3-235b-a22b", "bf16", "bf16")])
def test_experts_that_are_not_mxfp4_keep_their_kernel(model, weights, dtype):
    arch, gpu_ops = ops.arch_of(CAT.model(model)), ops.gpu_costs("h200")
    w = arch.bytes_by_group(weights)["experts"] / arch.params_by_group()["experts"]
    assert ops._moe_dtype(arch, gpu_ops, w) == dtype


# SemiAnalysis InferenceX, gpt-oss-120b FP4 on 8 x H100, vLLM TP=8, 1k/1k, mean TPOT by concurrency
# (its experimental sweep: https://github.com/SemiAnalysisAI/InferenceX/issues/828, "1k/1k" table).
INFERENCEX_H100_TP8_TPOT_MS = {4: 3.72, 16: 4.83, 32: 5.82, 64: 7.36}


@pytest.mark.parametrize("clients", sorted(INFERENCEX_H100_TP8_TPOT_MS))
def test_gpt_oss_on_h100_tp8_is_within_25_percent_of_inferencex(clients):
    rm = _replica("gpt-oss-120b", "p5.48xlarge", 8, "fp4", "tp",
                  Workload(concurrency=clients, input_tokens=1024, output_tokens=1024, qps=None))
    measured = INFERENCEX_H100_TP8_TPOT_MS[clients]
    assert abs(rm.closed_loop(clients)["tpot_ms"] / measured - 1) <= 0.25


def test_the_simulator_runs_the_same_decode_steps():
    rm = _replica("deepseek-r1", "p5en.48xlarge", 8, "fp8", "tp")
    rep = Replica("r", "z", rm.step, 8192, 256, 10**6, on_done=lambda *a: None)
    assert all(rep._dec[n] == rm.step.decode_s(n) for n in (1, 10, 100, 256))


def test_a_fleets_factors_scale_the_step():
    base = _replica("llama-3-70b", "p5.48xlarge", 4, "fp8", "tp")
    from dataclasses import replace
    slow = ReplicaModel(base.shape, base.workload, replace(MEASURED, ops_decode_factor=1.5, ops_prefill_factor=2.0))
    assert slow.step.decode_s(16) == pytest.approx(1.5 * base.step.decode_s(16))
    assert slow.step.prefill_token_s() == pytest.approx(2.0 * base.step.prefill_token_s())


def test_a_gpu_without_tables_is_extrapolated_and_the_plan_says_so():
    p = plan(PlanRequest(Workload(qps=2), model="llama-3.1-8b", weights="bf16",
                         pools=(Pool("us-east-1a", "p4d.24xlarge", 1), Pool("us-east-1b", "p4d.24xlarge", 1))))
    assert "no per-operation measurements for a100-40gb: its step is priced from the h100-sxm's tables " \
           "scaled by the datasheets (extrapolated)" in p.notes


def test_the_seed_profile_keeps_the_seeds_step():
    seed = ReplicaModel(Shape(CAT.model("llama-3-70b"), CAT.instance("p5.48xlarge"), 4, "fp8", "bf16"),
                        Workload(qps=10, slo_statistic="mean"), get_profile("seed"))
    assert not seed.step.terms and seed.step.prefill_s(1000) == pytest.approx(0.036, rel=0.03)
