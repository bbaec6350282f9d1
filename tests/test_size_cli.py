"""`llmserve size`: exit codes, exact error lines, JSON keys, plot and sweep."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llmserve.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


REQUIRED_KEYS = [
    "prefill_ms", "prefill_share", "prefill_saturation_qps", "ttft_ms", "tpot_ms", "in_flight", "kv_cache_gb",
    "weights_gb", "weights_per_gpu_gb", "memory_used_gb", "memory_total_gb", "capacity_qps", "capacity_per_replica_qps",
    "kv_cache_tokens", "max_concurrency", "utilization",
    "replicas", "gpus_used", "cost_per_hour", "cost_per_million_output_tokens", "node_cost_per_hour",
    "node_cost_per_million_output_tokens", "binding_constraint",
]


def test_json_has_every_documented_key(capsys):
    code, out, _ = run(capsys, "size", "--json", "--gpu-hour-price", "2.5")
    assert code == 0
    d = json.loads(out)
    assert [k for k in REQUIRED_KEYS if k not in d] == []
    figures = {"ideal", "real", "p95", "at_statistic"}
    assert set(d["ttft_ms"]) == figures and set(d["tpot_ms"]) == figures
    assert set(d["in_flight"]) == {"ideal", "real"} and set(d["capacity_per_replica_qps"]) == {"ideal", "real"}
    assert d["capacity_qps"] == pytest.approx(d["replicas"] * d["capacity_per_replica_qps"]["real"], rel=1e-3)
    assert d["cost_per_hour"] == pytest.approx(d["gpus_used"] * 2.5)       # the GPUs the replicas use


def test_concurrency_adds_throughput_keys(capsys):
    code, out, _ = run(capsys, "size", "--json", "--concurrency", "64")
    d = json.loads(out)
    assert code == 0 and d["requests_per_s"] > 0 and d["output_tokens_per_s"] > 0


def test_mean_slos_give_the_reference_table(capsys):
    code, out, _ = run(capsys, "size", "--gpu-hour-price", "2.5", "--slo-statistic", "mean", "--profile", "seed")
    assert code == 0
    assert "prefill time per 1,000-token prompt" in out and "36 ms" in out
    assert "Binding constraint: per replica, mean TPOT reaches the 40 ms SLO" in out
    assert "$20.00/h" in out and "$1.85" in out


def test_stack_option_reads_the_workload(capsys):
    code, out, _ = run(capsys, "size", "--stack", "staging", "--json")
    d = json.loads(out)
    assert code == 0 and d["workload"]["qps"] == 4 and set(d["replicas_by_zone"]) == {"us-east-1a", "us-east-1c"}


def test_explicit_option_overrides_the_stack(capsys):
    code, out, _ = run(capsys, "size", "--stack", "staging", "--qps", "8", "--json")
    assert code == 0 and json.loads(out)["workload"]["qps"] == 8


BAD_INPUT = [
    (["--model", "llama-9"], "error: --model: unknown model 'llama-9'; choose a key (deepseek-r1, deepseek-v3.2, glm-4.5-air, gpt-oss-120b, gpt-oss-20b, kimi-k2, kimi-k2.5, llama-3-70b, llama-3-8b, llama-3.1-405b, llama-3.1-8b, llama-3.3-70b, minimax-m2.5, mixtral-8x7b, nemotron-3-nano-30b-a3b, qwen3-235b-a22b, qwen3-30b-a3b, qwen3-32b) or a Hugging Face id (docs/models.md), or give --model-config PATH"),
    (["--gpu", "h300"], "error: --gpu: unknown GPU 'h300'; choose one of: a100-40gb, b200, h100-sxm, h200, l40s"),
    (["--weights", "int3"], "error: --weights: unknown precision 'int3'; choose one of: fp8, bf16, fp16, fp4, int4"),
    (["--kv-dtype", "int8"], "error: --kv-dtype: unknown precision 'int8'; choose one of: fp8, bf16, fp16"),
    (["--profile", "fast"], "error: --profile: unknown profile 'fast'; choose one of: seed, calibrated, measured"),
    (["--tp", "16"], "error: --tp: tensor parallel 16 exceeds the 8 GPUs of one p5.48xlarge node (a TP group never spans nodes); use at most 8"),
    (["--tp", "3"], "error: --tp: tensor parallel 3 does not divide the 64 attention heads of llama-3-70b; use one of 1, 2, 4, 8"),
    (["--model", "llama-3.1-405b", "--weights", "bf16", "--tp", "8"],
     "error: --weights: bf16 weights of llama-3.1-405b need 101.5 GB per GPU at TP=8, more than the 68.0 GB usable on a h100-sxm (use fp8 weights or a larger GPU)"),
    (["--qps", "0"], "error: --qps: must be greater than 0 (got 0)"),
    (["--qps", "nan"], "error: --qps: nan is not a finite number; give a finite value"),
    (["--qps", "inf"], "error: --qps: inf is not a finite number; give a finite value"),
    (["--ttft-slo", "inf"], "error: --ttft-slo: inf is not a finite number; give a finite value"),
    (["--gpu-hour-price", "nan"], "error: --gpu-hour-price: nan is not a finite number; give a finite value"),
    (["--replicas", "0"], "error: --replicas: must be 'auto' or an integer of at least 1 (got 0)"),
    (["--slo-statistic", "p42"], "error: --slo-statistic: unknown statistic 'p42'; choose one of: mean, p50, p90, p95, p99"),
    (["--qps", "5", "--concurrency", "5"], "error: --qps and --concurrency: give exactly one of qps (open loop) or concurrency (closed loop)"),
    (["--tpot-slo", "0.004"], "error: --tpot-slo: no TP degree works; at TP=8, the most capable: one replica cannot meet the SLOs even unloaded: one decode step takes 4.2 ms with a single sequence, above the 4 ms TPOT SLO"),
    (["--qps", "40", "--tp", "4", "--slo-statistic", "mean"], "error: --qps: after losing us-east-1a, 2 TP=4 replica slots remain, carrying 31.9 QPS; 40 QPS needs 3 replicas of 15.9 QPS each (add nodes or zones, or lower the load)"),
    (["--stack", "nope"], None),
    (["--qps", "abc"], "error: Invalid value for '--qps': 'abc' is not a valid float. (see `llmserve size --help`)"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    # The figures in the messages are the seed profile's (fixed); the default's follow its op tables.
    seed = () if "--profile" in args or "--stack" in args else ("--profile", "seed")
    code, out, err = run(capsys, "size", *args, *seed)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    if message is not None:
        assert err.strip() == message
    else:
        assert err.startswith("error: --stack nope: ") and "no such stack file" in err


# One door: a bad value gets the same message from a flag as from a stack file; only the name in
# front differs: the flag the user typed, or (after the file) the stack key. The stack side is prod
# (the reference pools) with whole keys replaced, in YAML as a user writes them.
SAME_MESSAGE = [
    (["--qps", "0"], "workload: {qps: 0}", "workload.qps", "must be greater than 0 (got 0)"),
    (["--qps", "nan"], "workload: {qps: .nan}", "workload.qps", "nan is not a finite number; give a finite value"),
    (["--ttft-slo", "-1"], "workload: {qps: 10, ttftSeconds: -1}", "workload.ttftSeconds",
     "must be greater than 0 (got -1)"),
    (["--slo-statistic", "p42"], "workload: {qps: 10, sloStatistic: p42}", "workload.sloStatistic",
     "unknown statistic 'p42'; choose one of: mean, p50, p90, p95, p99"),
    (["--tp", "16"], "model: {tensorParallel: 16}", "model.tensorParallel",
     "tensor parallel 16 exceeds the 8 GPUs of one p5.48xlarge node (a TP group never spans nodes); use at most 8"),
    (["--tp", "3"], "model: {tensorParallel: 3}", "model.tensorParallel",
     "tensor parallel 3 does not divide the 64 attention heads of llama-3-70b; use one of 1, 2, 4, 8"),
    (["--weights", "int3"], "model: {weights: int3}", "model.weights",
     "unknown precision 'int3'; choose one of: fp8, bf16, fp16, fp4, int4"),
    (["--model", "llama-9"], "model: {id: llama-9}", "model.id",
     "unknown model 'llama-9'; choose a key (deepseek-r1, deepseek-v3.2, glm-4.5-air, gpt-oss-120b, gpt-oss-20b, kimi-k2, kimi-k2.5, llama-3-70b, llama-3-8b, llama-3.1-405b, llama-3.1-8b, llama-3.3-70b, minimax-m2.5, mixtral-8x7b, nemotron-3-nano-30b-a3b, qwen3-235b-a22b, qwen3-30b-a3b, qwen3-32b) or a Hugging Face id (docs/models.md), or give --model-config PATH"),
    (["--profile", "fast"], "sizing: {profile: fast}", "sizing.profile",
     "unknown profile 'fast'; choose one of: seed, calibrated, measured"),
    (["--gpu-hour-price", "0"], "sizing: {gpuHourPrice: 0}", "sizing.gpuHourPrice", "must be greater than 0 (got 0)"),
    (["--replicas", "0"], "replicas: 0", "replicas", "must be 'auto' or an integer of at least 1 (got 0)"),
    (["--nodes-per-zone", "65"], "gpuPools: [{zone: us-east-1a, nodes: 65}]", "gpuPools[0].nodes",
     "must be at most 64 (got 65)"),
    (["--zones", "us-east-1a,eu-west-1b"], "gpuPools: [{zone: us-east-1a}, {zone: eu-west-1b}]", "gpuPools[1].zone",
     "'eu-west-1b' is not a zone of the region us-east-1; use a zone such as us-east-1a"),
    (["--input-tokens", "p50=800,p95=300,max=9000"], "workload: {qps: 10, inputTokens: {p50: 800, p95: 300, max: 9000}}",
     "workload.inputTokens", "p95: 300 is below p50 800; a p95 is at least the median"),
    (["--output-tokens", "p50=200,p95=700,max=500"], "workload: {qps: 10, outputTokens: {p50: 200, p95: 700, max: 500}}",
     "workload.outputTokens", "max: 500 is below p95 700; the longest is at least the p95"),
    (["--input-tokens", "0"], "workload: {qps: 10, inputTokens: 0}", "workload.inputTokens",
     "expected a whole number of tokens from 1 to 1,000,000, or {p50: N, p95: N, max: N} (got '0')"),
    (["--max-model-len", "200000"], "workload: {qps: 10, maxModelLen: 200000}", "workload.maxModelLen",
     "max_model_len 200,000 is above the 131,072-token context of llama-3-70b (max_position_embeddings); state a "
     "maximum of at most 131,072 (longer requests are refused)"),
    # refused by the plan, not the settings: named by the field the sizing gives (SizingError.field)
    (["--qps", "40", "--tp", "4", "--slo-statistic", "mean"], "{workload: {qps: 40, sloStatistic: mean, maxModelLen: 8192}, "
     "model: {tensorParallel: 4}}", "workload.qps", "after losing us-east-1a, 2 TP=4 replica slots remain, "
     "carrying 31.9 QPS; 40 QPS needs 3 replicas of 15.9 QPS each (add nodes or zones, or lower the load)"),
    (["--tpot-slo", "0.004"], "workload: {qps: 10, tpotSeconds: 0.004, maxModelLen: 8192}", "workload.tpotSeconds",
     "no TP degree works; at TP=8, the most capable: one replica cannot meet the SLOs even unloaded: one decode "
     "step takes 4.2 ms with a single sequence, above the 4 ms TPOT SLO"),
]


@pytest.mark.parametrize("flags,stack_keys,key,message", SAME_MESSAGE, ids=[" ".join(f) for f, *_ in SAME_MESSAGE])
def test_a_bad_value_reads_the_same_from_a_flag_and_from_the_stack(capsys, tmp_path, flags, stack_keys, key, message):
    import yaml

    from tests.stacks import stack_config, with_overrides

    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(yaml.safe_dump({"config": with_overrides(stack_config("prod"), yaml.safe_load(stack_keys))}))
    seed = () if "--profile" in flags else ("--profile", "seed")     # the messages' figures are the seed's
    assert run(capsys, "size", *flags, *seed)[::2] == (2, f"error: {flags[0]}: {message}\n")
    assert run(capsys, "size", "--stack", "x", "--config", str(path))[::2] == (
        2, f"error: --config {path}: llm-serving:{key}: {message}\n")


def test_plot_writes_a_png(capsys, tmp_path):
    path = tmp_path / "size.png"
    code, out, _ = run(capsys, "size", "--plot", str(path))
    assert code == 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Plot written to {path}." in out


def model_config(tmp_path) -> str:
    """A config.json given by path: the shipped Llama 3.1 8B's (sizing/data/models/), a model that is
    not the request's default `llama-3-70b`."""
    path = tmp_path / "Llama-3.1-8B" / "config.json"
    path.parent.mkdir()
    path.write_text((Path(__file__).parent.parent / "sizing/data/models/llama-3.1-8b.json").read_text())
    return str(path)


@pytest.mark.parametrize("name", [[], ["--model", "my-llama"]], ids=["no-name", "named"])
def test_plot_of_a_model_config_writes_a_png(capsys, tmp_path, name):
    """The plot draws the replica the plan sized: a name beside the config (not a catalog key) is
    not looked up again."""
    path = tmp_path / "p.png"
    code, out, err = run(capsys, "size", "--model-config", model_config(tmp_path), *name, "--plot", str(path))
    assert (code, err) == (0, "") and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Plot written to {path}." in out


def test_plot_curves_of_a_model_config_are_its_models(tmp_path):
    """Both curves of a config.json plan are those of the same model from the catalog (before, the
    ideal curve was the default llama-3-70b's)."""
    from llmserve.plots import latency_curves
    from sizing.planner import PlanRequest, plan
    from sizing.workload import Workload

    def curves(**model) -> dict:
        c = latency_curves(plan(PlanRequest(workload=Workload(), **model)), points=20)
        return {kind: {k: [round(x, 9) if math.isfinite(x) else None for x in v] for k, v in figures.items()}
                for kind, figures in c.items() if kind != "qps"}

    assert curves(model_config=model_config(tmp_path)) == curves(model="llama-3.1-8b") != curves(model="llama-3-70b")


@pytest.mark.parametrize("argv,model", [
    ([], "llama-3-70b"),
    (["--model", "meta-llama/Llama-3.1-8B-Instruct"], "llama-3.1-8b"),     # a Hugging Face id: the catalog key
    (["--stack", "prod-deepseek-r1"], "deepseek-r1"),
])
def test_json_model_names_the_catalog_model_sized(capsys, argv, model):
    code, out, _ = run(capsys, "size", *argv, "--json")
    assert code == 0 and json.loads(out)["model"] == model


@pytest.mark.parametrize("name", [[], ["--model", "my-llama"]], ids=["no-name", "named"])
def test_json_model_names_the_model_config_sized(capsys, tmp_path, name):
    """`--model-config`: the model sized is the file's (`config:PATH`), whatever `--model` says
    (before, the default llama-3-70b, or the name given)."""
    path = model_config(tmp_path)
    code, out, _ = run(capsys, "size", "--model-config", path, *name, "--json")
    d = json.loads(out)
    assert code == 0 and d["model"] == f"config:{path}"
    assert d["weights_gb"] < 10       # the 8B's weights at fp8 (9.1 GB), not the 70B's (70.6 GB)


def test_sweep_ranks_feasible_options_by_cost(capsys):
    code, out, _ = run(capsys, "size", "--sweep", "--json")
    assert code == 0
    options = json.loads(out)["options"]
    feasible = [o for o in options if o["feasible"]]
    costs = [o["node_cost_per_million"] for o in feasible if o["node_cost_per_million"] is not None]
    assert costs == sorted(costs) and len(feasible) >= 10
    assert {"instance": "p5.48xlarge", "tp": 4, "weights": "fp8"}.items() <= next(
        o for o in feasible if o["instance"] == "p5.48xlarge" and o["tp"] == 4 and o["weights"] == "fp8").items()
    assert any(not o["feasible"] and "TP=1" in o["reason"] for o in options)


def test_size_does_not_import_pulumi_or_matplotlib():
    import subprocess
    import sys
    code = ("import sys; from llmserve.cli import main; main(['size', '--json']); "
            "bad = [m for m in ('pulumi', 'matplotlib', 'boto3') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_b200_is_sized_on_p6_b200_which_has_no_price_in_the_catalog(capsys):
    code, out, _ = run(capsys, "size", "--gpu", "b200", "--json")
    d = json.loads(out)
    assert code == 0 and d["instance_type"] == "p6-b200.48xlarge" and d["cost_per_hour"] is None
    assert "p6-b200.48xlarge has no price in the catalog: costs need --gpu-hour-price" in d["notes"]


def test_ttft_that_no_configuration_meets_names_the_prefill(capsys):
    code, _, err = run(capsys, "size", "--ttft-slo", "0.02", "--profile", "seed")
    assert code == 2
    assert err.strip().endswith("prefill of a 1,000-token prompt takes 0.03 s, above the 0.02 s TTFT SLO")


def test_one_slot_left_reads_in_the_singular(capsys):
    code, _, err = run(capsys, "size", "--qps", "40", "--slo-statistic", "mean", "--profile", "seed")
    assert code == 2 and "after losing us-east-1a, 1 TP=8 replica slot remains, carrying 34.3 QPS" in err


# -- a given fleet (--replicas) --------------------------------------------------------------------
def test_replicas_evaluates_exactly_that_fleet_at_the_load(capsys):
    code, out, _ = run(capsys, "size", "--replicas", "3", "--qps", "12", "--tp", "4", "--zones", "3", "--json")
    d = json.loads(out)
    assert code == 0 and d["replicas"] == 3
    assert d["fleet"]["replicas"] == 3 and d["fleet"]["load_per_replica_qps"] == pytest.approx(4.0)
    assert d["fleet"]["stable"] and d["fleet"]["ttft_ms"]["at_statistic"] >= d["fleet"]["ttft_ms"]["mean"]


def test_replicas_with_concurrency_report_each_replicas_share_of_the_clients(capsys):
    code, out, _ = run(capsys, "size", "--replicas", "2", "--concurrency", "100", "--tp", "4", "--json")
    fleet = json.loads(out)["fleet"]
    assert code == 0 and fleet["clients_per_replica"] == 50 and fleet["closed_loop"]["clients"] == 50


def test_a_fleet_past_its_capacity_is_unstable_and_says_why(capsys):
    code, out, _ = run(capsys, "size", "--replicas", "1", "--qps", "100", "--tp", "4", "--zones", "1")
    assert code == 0
    assert "Fleet of 1 replicas, all up: 100 QPS per replica: unstable (" in out.replace("\n", "")


def test_replicas_line_in_the_table_output(capsys):
    code, out, _ = run(capsys, "size", "--replicas", "4", "--qps", "20", "--tp", "4", "--slo-statistic", "mean")
    assert code == 0 and "Fleet of 4 replicas, all up: 5 QPS per replica" in out.replace("\n", "")


@pytest.mark.parametrize("statistic", ["mean", "p50", "p90", "p95", "p99"])
def test_slo_statistic_is_the_capacitys(capsys, statistic):
    code, out, _ = run(capsys, "size", "--slo-statistic", statistic, "--json", "--profile", "seed")   # TPOT-bound
    d = json.loads(out)
    assert code == 0 and d["workload"]["slo_statistic"] == statistic
    assert d["binding_constraint"].startswith(f"per replica, {statistic} ")


def test_a_tighter_statistic_never_raises_the_capacity(capsys):
    caps = []
    for statistic in ("p50", "p90", "p95", "p99"):
        _, out, _ = run(capsys, "size", "--slo-statistic", statistic, "--tp", "4", "--json")
        caps.append(json.loads(out)["capacity_per_replica_qps"]["real"])
    assert caps == sorted(caps, reverse=True)


def test_closed_loop_ttft_past_the_kv_cache_is_finite_and_grows_with_the_clients(capsys):
    """The issue's case: 100 clients of 5,000-token prompts on TP=2 H100s (was 6.04e17 ms)."""
    ttfts = []
    for clients in ("50", "100", "200"):
        code, out, _ = run(capsys, "size", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--weights", "fp8",
                           "--kv-dtype", "fp8", "--tp", "2", "--concurrency", clients, "--input-tokens", "5000",
                           "--output-tokens", "500", "--zones", "1", "--ttft-slo", "1000", "--tpot-slo", "10",
                           "--json")
        assert code == 0
        ttfts.append(json.loads(out)["ttft_ms"]["real"])
    assert all(t is not None and 0 < t < 1e6 for t in ttfts) and ttfts == sorted(ttfts)


def test_a_ttft_slo_below_the_idle_chunked_prefill_names_the_chunks(capsys):
    # The step budget is at least vLLM's max_num_seqs (1,024 on an H100): a 20,000-token prompt takes
    # 20 chunks, slower than its prefill alone.
    code, _, err = run(capsys, "size", "--profile", "calibrated", "--ttft-slo", "0.95", "--tp", "4",
                       "--input-tokens", "20000")
    assert code == 2
    assert err.strip() == ("error: --ttft-slo: one replica cannot meet the SLOs even unloaded: at the lightest load the p95 "
                           "TTFT is 1.00 s (a 20,000-token prompt in chunks of up to 1,024 tokens, each step shared "
                           "with the decodes), above the 0.95 s TTFT SLO")


def test_a_load_without_a_steady_state_says_unstable_and_why(capsys):
    code, out, _ = run(capsys, "size", "--qps", "30", "--replicas", "2", "--tp", "4", "--json", "--profile", "seed")
    d = json.loads(out)
    assert code == 0 and d["stable"] is False and d["ttft_ms"]["real"] is None
    assert d["unstable_reason"] == "prefill alone needs 108% of the replica"
    code, out, _ = run(capsys, "size", "--qps", "30", "--replicas", "2", "--tp", "4", "--profile", "seed")
    assert "Unstable at 30 QPS per replica: prefill alone needs 108% of the replica." in out


# -- the request's one table: stack keys, sizing fields and `size` flags --------------------------
# `size` options that choose where the request comes from or what is printed: not request fields.
NOT_REQUEST_OPTIONS = {"--stack", "--config", "--json", "--plot", "--sweep"}


def test_every_size_option_fills_the_request_or_is_declared_not_to():
    """An option without a FLAGS row would be silently ignored."""
    import typer.main
    from llmserve.cli import app
    from llmserve.serving_flags import FIELD_FLAGS
    from llmserve.size_flags import FLAGS
    from llmserve.size_cmd import SPECULATIVE_OPTIONS       # size_cmd reads these into PlanRequest.speculative
    options = {p.opts[0] for p in typer.main.get_command(app).commands["size"].params}
    assert options - NOT_REQUEST_OPTIONS - set(SPECULATIVE_OPTIONS.values()) - set(FIELD_FLAGS.values()) == set(FLAGS)
    assert not NOT_REQUEST_OPTIONS & set(FLAGS)


def test_the_flags_the_request_keys_and_plan_request_come_from_one_table():
    import dataclasses
    from llmserve.size_flags import FLAGS, POOL_FLAGS
    from settings.schema import REQUEST_KEYS, REQUEST_TABLE
    from sizing.planner import PlanRequest
    from sizing.workload import Workload
    assert REQUEST_KEYS == {row.field: row.key for row in REQUEST_TABLE}
    assert {f: FLAGS[f].key for f in FLAGS if f not in POOL_FLAGS} == {r.flag: r.key for r in REQUEST_TABLE if r.flag}
    assert all(flag.key.startswith(f"{REQUEST_KEYS['pools']}.") for flag in POOL_FLAGS.values())
    # pool_layout: an explicit prefill/decode layout is a what-if of `size` (llmserve/serving_flags.py), no stack key
    request_fields = {f.name for f in dataclasses.fields(PlanRequest)} - {"workload", "nodes_per_replica", "pool_layout"}
    assert {r.field for r in REQUEST_TABLE if not r.field.startswith("workload.")} == request_fields
    workload_fields = {f.name for f in dataclasses.fields(Workload)}
    assert {r.field.removeprefix("workload.") for r in REQUEST_TABLE if r.field.startswith("workload.")} <= workload_fields


def test_plan_request_reads_every_table_row_from_the_stack():
    """A value set under each key reaches its request field (pools and replicas converted)."""
    from settings.load import request_from_body
    from settings.schema import REQUEST_TABLE
    settings = request_from_body({"region": "us-east-1", "workload": {"qps": 4.0},
                                  "model": {"id": "llama-3.1-8b", "weights": "bf16", "kvCacheDtype": "fp8", "tensorParallel": 2},
                                  "sizing": {"profile": "calibrated", "gpuHourPrice": 3.0, "instancePrice": 90.0},
                                  "gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b"}]})
    req = settings.plan_request()
    assert (req.model, req.weights, req.kv_dtype, req.tp, req.profile) == ("llama-3.1-8b", "bf16", "fp8", 2, "calibrated")
    for row in REQUEST_TABLE:
        if row.field.startswith("workload.") or row.field in ("pools", "replicas"):
            continue
        assert getattr(req, row.field) == settings._setting(row.key), row.key
