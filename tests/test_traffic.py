"""Real traffic (issue 17): lengths as distributions, the served context limit, vLLM's paged KV
cache and defaults, prefix caching, and one distribution in the simulator and the load test."""
from __future__ import annotations

import json
import math
import random
import time

import pytest

from sizing.catalog import load_catalog
from sizing.checks import check_shape
from sizing.memory import Shape, memory
from sizing.model import ReplicaModel
from sizing.planner import PlanRequest, plan
from sizing.profiles import get_profile
from sizing.step import build_step
from sizing.traffic import LengthsError, Percentiles, fixed, from_pairs, from_percentiles, parse_lengths_text
from sizing.vllm_engine import batch_defaults
from sizing.workload import SizingError, Workload

CATALOG = load_catalog()


def shape(tp=2, instance="p5.48xlarge", kv="fp8", model="llama-3-70b"):
    return Shape(CATALOG.model(model), CATALOG.instance(instance), tp, "fp8", kv)


# -- reading lengths -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,message", [
    ("", "f.csv: is empty; give one row per request with input_tokens and output_tokens"),
    ("   \n", "f.csv: is empty; give one row per request with input_tokens and output_tokens"),
    ("input_tokens,output_tokens\n", "f.csv: no requests in it; give one row per request with input_tokens and "
                                     "output_tokens"),
    ("prompt,completion\n1,2\n", "f.csv: row 1: the header (2 columns) has no input_tokens or output_tokens column; "
                                 "row 1 names the columns, e.g. input_tokens,output_tokens"),
    # What the file holds is never quoted (a secret pointed at by mistake): the row, the field, the kind.
    ("API_KEY=sk-live-0123456789\n", "f.csv: row 1: the header (1 column) has no input_tokens or output_tokens "
                                     "column; row 1 names the columns, e.g. input_tokens,output_tokens"),
    ("input_tokens,output_tokens\n10,sk-live-0123\n",
     "f.csv: row 2: output_tokens: expected a whole number of tokens (got text of 12 characters)"),
    ("input_tokens,output_tokens\n10,20\n0,5\n", "f.csv: row 3: input_tokens: must be above 0 (got 0)"),
    ("input_tokens,output_tokens\n-4,5\n", "f.csv: row 2: input_tokens: must be above 0 (got a negative number)"),
    ("input_tokens,output_tokens\n7\n", "f.csv: row 2: 1 field; the header names column 2"),
    ("input_tokens,output_tokens,input_tokens\n1,2,3\n",
     "f.csv: row 1: columns 1 and 3 are both input_tokens; name each column once"),
    ("id,input_tokens,id,output_tokens\n1,2,3,4\n", "f.csv: row 1: columns 1 and 3 are both the same name; "
                                                     "name each column once"),
    ("input_tokens,output_tokens\n\u0661\u0662,5\n",      # Arabic-Indic digits: int() would read 12
     "f.csv: row 2: input_tokens: expected a whole number of tokens (got text of 2 characters)"),
    ("input_tokens,output_tokens\n1" + "0" * 5000 + ",5\n",      # int() of 5,000 digits raises
     "f.csv: row 2: input_tokens: is above 10,000,000 tokens; check the unit"),
    ("input_tokens,output_tokens\n" + "1" * 140_000 + ",5\n",   # csv's field limit is 131,072
     "f.csv: row 2: not CSV (a field over 131,072 characters, a NUL byte or an unclosed quote)"),
    ('{"input_tokens": 5, "output_tokens": -3}\n', "f.csv: line 1: output_tokens: must be above 0 (got a negative number)"),
    ('{"input_tokens": 5}\n', "f.csv: line 1: output_tokens: missing"),
    ('{"input_tokens": 5, "output_tokens": 2}\n{oops\n',
     'f.csv: line 2: not a JSON object; one object per line, e.g. {"input_tokens": 812, "output_tokens": 240}'),
    ('{"input_tokens": 2.5, "output_tokens": 2}\n',
     "f.csv: line 1: input_tokens: expected a whole number of tokens (got a number with a fraction)"),
    ('{"input_tokens": 5, "output_tokens": 2, "input_tokens": 9}\n',
     "f.csv: line 1: input_tokens: given twice in one object; give each field once"),
    ('{"input_tokens": 1' + "0" * 5000 + ', "output_tokens": 2}\n',
     "f.csv: line 1: input_tokens: is above 10,000,000 tokens; check the unit"),
    ('{"input_tokens": "\\ud800", "output_tokens": 2}\n',     # a lone surrogate, never printed
     "f.csv: line 1: input_tokens: expected a whole number of tokens (got text of 1 character)"),
])
def test_a_bad_lengths_file_gets_one_error_naming_the_row_and_field(text, message):
    with pytest.raises(LengthsError) as exc:
        parse_lengths_text(text, "f.csv")
    assert str(exc.value) == message


@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
def test_csv_rows_end_with_lf_crlf_or_cr_alike(line_end):
    d = parse_lengths_text(line_end.join(["input_tokens,output_tokens", "100,20", "300,40"]) + line_end, "f.csv")
    assert (d.inputs, d.outputs) == ((100, 300), (20, 40))


@pytest.mark.parametrize("p50,p95,top,message", [
    (800, 300, 900, "inputTokens.p95: 300 is below p50 800; a p95 is at least the median"),
    (800, 3000, 2000, "inputTokens.max: 2000 is below p95 3000; the longest is at least the p95"),
    (0, 10, 20, "inputTokens.p50: must be a whole number of tokens above 0 (got 0)"),
])
def test_percentiles_out_of_order_are_refused_naming_the_field(p50, p95, top, message):
    with pytest.raises(LengthsError) as exc:
        from_percentiles(Percentiles(p50, p95, top), Percentiles(300, 300, 300))
    assert str(exc.value) == message


def test_ten_thousand_observed_rows_parse_in_well_under_a_second():
    rng = random.Random(7)
    rows = "\n".join(f"{rng.randint(50, 4000)},{rng.randint(10, 800)}" for _ in range(10_000))
    start = time.perf_counter()
    d = parse_lengths_text("input_tokens,output_tokens\n" + rows + "\n", "logs.csv")
    w = Workload.with_lengths(d, qps=1)
    plan(PlanRequest(w, profile="calibrated"))
    assert time.perf_counter() - start < 0.5
    assert len(d.inputs) == 10_000 and d.form == "observed" and d.paired


def test_csv_and_jsonl_read_the_same_pairs_and_other_columns_are_ignored():
    csv_text = "request_id,input_tokens,latency_ms,output_tokens\na,100,5.0,20\nb,300,7.5,40\n"
    jsonl = '{"input_tokens": 100, "output_tokens": 20, "id": "a"}\n\n{"input_tokens": 300, "output_tokens": 40}\n'
    a, b = parse_lengths_text(csv_text, "x.csv"), parse_lengths_text(jsonl, "x.jsonl")
    assert (a.inputs, a.outputs) == (b.inputs, b.outputs) == ((100, 300), (20, 40))


# -- what the model takes from a distribution ------------------------------------------------------
def test_fixed_lengths_reduce_to_the_seeds_formulas():
    d = fixed(1000, 300)
    assert d.decode_context_tokens == 1150 and d.prompt_attention_tokens == 1000 and d.max_request_tokens == 1300


def test_observed_pairs_keep_their_correlation_in_the_decode_context():
    # Long prompts with long outputs decode over more context than the means alone say.
    d = from_pairs([(100, 10), (4000, 1000)])
    assert d.decode_context_tokens == pytest.approx((10 * 105 + 1000 * 4500) / 1010)
    assert d.decode_context_tokens > d.mean_input + d.mean_output / 2


def test_an_moe_step_finds_its_operating_batch_at_the_decode_context_not_the_means():
    # Paired lengths decode over 2,625 tokens of context on average (the means say 2,100); the
    # experts-touched tangent is taken where the step's own KV read puts the batch: exactly the
    # step of fixed lengths decoding over the same 2,625 tokens.
    moe = shape(tp=8, model="deepseek-ai/DeepSeek-R1", instance="p5e.48xlarge")
    drawn = Workload.with_lengths(from_pairs([(1000, 100), (3000, 300)]))
    same_context = Workload(input_tokens=2475, output_tokens=300)
    assert drawn.decode_context_tokens == same_context.decode_context_tokens == 2625
    profile = get_profile("calibrated")
    a, b = build_step(moe, drawn, profile), build_step(moe, same_context, profile)
    assert (a.a1, a.b1) == (b.a1, b.b1)


def test_the_plan_says_the_form_and_the_percentiles_it_sized_for():
    from sizing.report import plan_to_dict
    d = from_percentiles(Percentiles(800, 3000, 7000), Percentiles(250, 700, 1000))
    out = plan_to_dict(plan(PlanRequest(Workload.with_lengths(d, qps=4), profile="calibrated")))
    lengths = out["workload"]["lengths"]
    assert lengths["form"] == "percentiles" and lengths["input_tokens"]["max"] == 7000
    assert abs(lengths["input_tokens"]["p50"] - 800) <= 10 and abs(lengths["input_tokens"]["p95"] - 3000) <= 60
    assert out["workload"]["served_max_model_len"] == out["engine_args"]["max_model_len"] == 8000
    assert out["workload"]["stated_max_model_len"] is None      # none stated: the longest request the form allows


def test_long_prompts_raise_the_p95_ttft_beyond_the_means_workload():
    mix = Workload.with_lengths(from_percentiles(Percentiles(700, 3000, 6000), Percentiles(200, 700, 1000)), qps=4)
    mean_only = Workload(input_tokens=mix.input_tokens, output_tokens=mix.output_tokens, qps=4)
    s, prof = shape(tp=4, kv="bf16"), get_profile("calibrated")
    assert ReplicaModel(s, mix, prof).at(4).ttft_p95_ms > 1.2 * ReplicaModel(s, mean_only, prof).at(4).ttft_p95_ms


# -- the served context limit -----------------------------------------------------------------------
@pytest.mark.parametrize("workload,served", [
    (Workload(), 1300),
    (Workload(stated_max_model_len=8192), 8192),
    (Workload.with_lengths(from_percentiles(Percentiles(800, 3000, 7000), Percentiles(250, 700, 1000))), 8000),
    (Workload.with_lengths(from_pairs([(1000, 300), (5100, 900)])), 6144),      # the longest, rounded up
])
def test_max_model_len_is_the_stated_or_longest_request_never_the_mean(workload, served):
    assert workload.served_max_model_len == served


@pytest.mark.parametrize("model,max_len,message", [
    ("llama-3-8b", 9000, "max_model_len 9,000 is above the 8,192-token context of llama-3-8b "
                         "(max_position_embeddings); state a maximum of at most 8,192 (longer requests are refused)"),
    ("llama-3-70b", 131072, "no room for one request of max_model_len 131,072 tokens: the KV cache beside the weights "
                            "holds 32,896 tokens at TP=2 on l40s, and vLLM refuses to start (raise TP, use fp8 "
                            "KV, or lower the stated maximum)"),
])
def test_a_served_limit_the_model_or_the_kv_cache_cannot_hold_is_refused(model, max_len, message):
    s = (shape(tp=2, instance="g6e.48xlarge", kv="bf16") if model == "llama-3-70b"
         else shape(tp=1, kv="bf16", model=model))
    with pytest.raises(SizingError) as exc:
        check_shape(s, Workload(stated_max_model_len=max_len), get_profile("calibrated"))
    assert str(exc.value) == message and exc.value.field == "workload.stated_max_model_len"


def test_prod_serves_at_least_4096_tokens_and_keeps_the_reference_means(capsys):
    from llmserve.cli import main
    code = main(["size", "--stack", "prod", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code in (0, None)
    assert d["engine_args"]["max_model_len"] >= 4096
    assert (d["workload"]["input_tokens"], d["workload"]["output_tokens"]) == (1000, 300)


# -- vLLM's paged KV cache and defaults ----------------------------------------------------------------
def test_at_saturation_the_batch_follows_the_resident_tokens_not_whole_requests():
    """Llama 3.3 70B FP8, FP8 KV, TP=2 H100, 5,000/500: vLLM runs about 86 at saturation; reserving
    whole requests said 72."""
    w = Workload(input_tokens=5000, output_tokens=500, concurrency=100)
    grow = memory(shape(), w, get_profile("calibrated"), 8192)
    from dataclasses import replace
    whole = memory(shape(), w, replace(get_profile("calibrated"), kv_reservation="whole"), 8192)
    assert grow.max_seqs_kv == int((grow.kv_cache_tokens // 16 - 1) // (5250 / 16 + 0.5))
    assert whole.max_seqs_kv == (whole.kv_cache_tokens // 16 - 1) // math.ceil(5500 / 16)
    assert abs(grow.max_seqs_kv / 86 - 1) < 0.1 and whole.max_seqs_kv < grow.max_seqs_kv


@pytest.mark.parametrize("gpu,defaults", [("h100-sxm", (8192, 1024)), ("h200", (8192, 1024)),
                                          ("a100-40gb", (2048, 256)), ("l40s", (2048, 256))])
def test_vllm_batch_defaults_by_gpu_class(gpu, defaults):
    assert batch_defaults(CATALOG.gpu(gpu)) == defaults


def test_the_plan_leaves_max_num_seqs_to_vllm_and_never_budgets_below_it():
    p = plan(PlanRequest(Workload(qps=4), profile="calibrated"))
    assert p.engine_args.max_num_seqs == 1024
    assert p.engine_args.max_num_batched_tokens >= p.engine_args.max_num_seqs


# -- prefix caching --------------------------------------------------------------------------------------
def test_a_shared_prefix_shows_ttft_and_capacity_with_and_without_and_enables_the_cache():
    from tests.stacks import vllm_args_of as vllm_args
    w = Workload(qps=4, input_tokens=3000, output_tokens=300, shared_prefix_tokens=2000)
    p = plan(PlanRequest(w, profile="calibrated"))
    pc = p.prefix_caching
    assert pc["cached_prompt_tokens"] == 2000
    assert pc["with"]["ttft_ms"] < pc["without"]["ttft_ms"]
    assert pc["with"]["capacity_per_replica_qps"] > pc["without"]["capacity_per_replica_qps"]
    assert p.engine_args.enable_prefix_caching and "--enable-prefix-caching" in vllm_args(p, 60)
    bare = plan(PlanRequest(w.without_prefix_cache(), profile="calibrated"))
    assert bare.prefix_caching is None and "--enable-prefix-caching" not in vllm_args(bare, 60)


@pytest.mark.parametrize("field,value,cached", [("shared_prefix_tokens", 1000, 992),   # whole 16-token blocks
                                                 ("prefix_hit_fraction", 0.5, 496),
                                                 ("shared_prefix_tokens", 5000, 992)])   # never the last token
def test_the_cache_serves_whole_blocks_only(field, value, cached):
    assert Workload(input_tokens=1000, **{field: value}).cached_prompt_tokens == cached


def test_the_picker_scores_prefixes_only_when_the_plan_counts_on_per_conversation_reuse():
    from components.endpoint_picker import PICKER_CONFIG, PREFIX_AWARE_CONFIG
    assert "prefix-cache-scorer" not in PICKER_CONFIG
    assert "- pluginRef: prefix-cache-scorer\n    weight: 3" in PREFIX_AWARE_CONFIG


# -- one distribution everywhere -------------------------------------------------------------------------
def test_the_simulator_draws_from_the_plans_distribution():
    from simulator.plan import config_from_plan
    from simulator.workload import generate
    d = from_pairs([(100, 10), (4000, 900)])
    p = plan(PlanRequest(Workload.with_lengths(d, qps=2), profile="calibrated"))
    reqs = generate(config_from_plan(p, duration_s=300, replicas=1, seed=3).workload)
    assert {(r.prompt, r.out) for r in reqs} == {(100, 10), (4000, 900)}      # pairs kept together


def test_the_load_test_carries_the_distribution_as_guidellm_synthetic_options():
    from deployment.jobs import synthetic_data
    d = from_pairs([(1000, 100), (3000, 300)])
    data = synthetic_data(Workload.with_lengths(d, qps=1, shared_prefix_tokens=512))
    assert data == {"kind": "synthetic_text", "prompt_tokens": 1488, "prompt_tokens_stdev": 1000,
                    "prompt_tokens_min": 488, "prompt_tokens_max": 2488, "output_tokens": 200,
                    "output_tokens_stdev": 100, "output_tokens_min": 100, "output_tokens_max": 300,
                    "prefix_tokens": 512, "prefix_count": 1}
    assert synthetic_data(Workload()) == {"kind": "synthetic_text", "prompt_tokens": 1000, "output_tokens": 300}
