"""The `tp-ep` layout (TP attention, expert-parallel MoE, data-parallel size 1: sizing.parallel):
its memory, KV copies, reads and links beside `tp` and `dp-ep`, its split rules, its refusal for
a dense model and the vLLM arguments it renders."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmserve.cli import main
from sizing import parallel
from sizing.catalog import load_catalog
from sizing.memory import Shape, memory
from sizing.planner import PlanRequest, Pool, plan
from sizing.profiles import get_profile
from sizing.step import step_comm
from sizing.workload import Workload

CAT = load_catalog()
QWEN = CAT.model("qwen3-235b-a22b")
H200_NODE = CAT.instance("p5en.48xlarge")     # 8 x H200


def _shape(layout: str) -> Shape:
    return Shape(QWEN, H200_NODE, 8, "fp8", "bf16", layout)


# Qwen3-235B-A22B: 64 attention heads, 4 KV heads, 128 routed experts (top-8), FP8 on 8 x H200.
# tp and tp-ep hold 1/8 of every byte per GPU (tp: 1/8 of each expert; tp-ep: 16 whole experts),
# and split the 4 KV heads 8 ways (2 copies each); dp-ep keeps attention and dense weights on
# every GPU and each sequence's KV on one.
@pytest.mark.parametrize("layout,weights_per_gpu_gb,kv_copies,kv_cache_tokens,args", [
    ("tp", 29.55, 2.0, 2_149_408, {"tensor_parallel_size": 8, "data_parallel_size": 1, "enable_expert_parallel": False}),
    ("tp-ep", 29.55, 2.0, 2_149_408, {"tensor_parallel_size": 8, "data_parallel_size": 1, "enable_expert_parallel": True}),
    ("dp-ep", 37.68, 1.0, 3_960_944, {"tensor_parallel_size": 1, "data_parallel_size": 8, "enable_expert_parallel": True}),
])
def test_qwen3_235b_fp8_on_8_h200_by_layout(layout, weights_per_gpu_gb, kv_copies, kv_cache_tokens, args):
    shape = _shape(layout)
    mem = memory(shape, Workload(), get_profile("calibrated"))
    assert round(mem.weights_per_gpu_gb, 2) == weights_per_gpu_gb
    assert parallel.kv_copies(shape) == kv_copies
    assert mem.kv_cache_tokens == kv_cache_tokens
    assert parallel.serving_args(shape) == args


@pytest.mark.parametrize("batch", [1, 8, 64, 512])
def test_tp_ep_reads_the_busiest_gpus_expected_experts(batch):
    """E/N (1 - (1 - k/E)^B) touched experts per GPU (16 of 128 on 8 GPUs at most), each read
    whole: N times that is the replica's touched experts, so the read equals tp's."""
    ep, tp = _shape("tp-ep"), _shape("tp")
    a = QWEN.arch
    per_gpu = parallel.experts_touched_per_gpu(ep, batch)
    assert per_gpu == pytest.approx(128 / 8 * (1 - (1 - 8 / 128) ** batch)) and per_gpu <= 16
    assert parallel.decode_read_bytes(ep, batch) == pytest.approx(parallel.decode_read_bytes(tp, batch))
    experts_read = parallel.decode_read_bytes(ep, batch) - QWEN.decode_read_bytes("fp8", 0.0)
    assert experts_read == pytest.approx(8 * per_gpu * QWEN.expert_weight_bytes("fp8") / a.num_experts)


def test_tp_ep_runs_the_all_reduces_tp_runs():
    """vLLM 0.29.0 at DP=1 runs no dispatch or combine: the MoE output is all-reduced over the TP
    group (fused_moe/runner/moe_runner.py:503-509), as under tp; dp-ep's all-to-alls differ."""
    profile = get_profile("calibrated")
    assert step_comm(_shape("tp-ep"), profile) == step_comm(_shape("tp"), profile)
    assert step_comm(_shape("dp-ep"), profile) != step_comm(_shape("tp"), profile)


def _moe(heads: int, experts: int, intermediate: int) -> SimpleNamespace:
    arch = SimpleNamespace(is_moe=True, num_experts=experts, moe_intermediate_size=intermediate)
    return SimpleNamespace(id="m", heads=heads, arch=arch)


@pytest.mark.parametrize("model,tp,layout,why", [
    (_moe(64, 128, 1536), 8, "tp-ep", ""),
    (_moe(64, 128, 1000), 16, "tp", "tensor parallel 16 does not divide the experts' intermediate size 1000 of m"),
    (_moe(64, 128, 1000), 16, "tp-ep", ""),      # experts stay whole: their width does not matter
    (_moe(64, 8, 14336), 16, "tp", ""),
    (_moe(64, 8, 14336), 16, "tp-ep", "expert parallel 16 does not divide the 8 routed experts of m"),
    (_moe(48, 128, 1536), 32, "tp-ep", "tensor parallel 32 does not divide the 48 attention heads of m"),
])
def test_fits_tp_splits_experts_by_layout(model, tp, layout, why):
    assert parallel.fits_tp(model, tp, layout) == why


def test_the_planner_tries_tp_ep_only_where_tp_cannot_split_the_experts():
    """tp-ep costs what tp costs, so where tp splits the model the planner keeps tp."""
    from sizing.planner import _candidates
    req = PlanRequest(Workload(qps=10), model="qwen3-235b-a22b", weights="fp8",
                      pools=(Pool("us-east-1a", "p5en.48xlarge", 1),))
    tried = _candidates(req, QWEN, H200_NODE, get_profile("seed"))
    assert {layout for layout, _, _ in tried} == {"tp", "dp-ep"}
    forced = _candidates(PlanRequest(Workload(qps=10), model="qwen3-235b-a22b", layout="tp-ep",
                                     pools=req.pools), QWEN, H200_NODE, get_profile("seed"))
    assert forced == [("tp-ep", 1, 1), ("tp-ep", 2, 1), ("tp-ep", 4, 1), ("tp-ep", 8, 1)]


@pytest.mark.parametrize("layout", ["tp-ep", "dp-ep"])
@pytest.mark.parametrize("tp", [[], ["--tp", "8"]])
def test_expert_parallelism_on_a_dense_model_is_refused_naming_the_flag(capsys, layout, tp):
    code = main(["size", "--model", "llama-3.1-8b", "--layout", layout, *tp])
    assert code == 2
    assert capsys.readouterr().err.strip() == ("error: --layout: expert parallelism does not apply to llama-3.1-8b: "
                                               "a dense model has no experts")


def test_tp_ep_renders_tp_n_with_expert_parallel_and_no_data_parallel():
    from tests.stacks import vllm_args_of
    p = plan(PlanRequest(Workload(qps=10), model="qwen3-235b-a22b", weights="fp8", tp=8, layout="tp-ep",
                         pools=(Pool("us-east-1a", "p5en.48xlarge", 1), Pool("us-east-1b", "p5en.48xlarge", 1))))
    a = p.engine_args
    assert (p.layout, a.tensor_parallel_size, a.data_parallel_size, a.enable_expert_parallel) == ("tp-ep", 8, 1, True)
    args = vllm_args_of(p, 30)
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert "--enable-expert-parallel" in args and "--data-parallel-size" not in args    # DP 1: vLLM's default


def test_the_stack_key_takes_tp_ep():
    from settings import settings_from_config
    from tests.test_settings import prod_with
    s = settings_from_config("prod", prod_with(
        model={"id": "qwen3-235b-a22b", "weights": "fp8", "kvCacheDtype": "bf16", "layout": "tp-ep"},
        gpuPools=[{"zone": "us-east-1a", "instanceType": "p5en.48xlarge"},
                  {"zone": "us-east-1b", "instanceType": "p5en.48xlarge"}]))
    assert s.model.layout == "tp-ep"
