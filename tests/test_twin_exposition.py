"""The emulated replicas' /metrics against a real vLLM 0.29.0 capture, and the timeline behind it.

The capture (`samples/vllm-metrics-0.29.0-inferstack.txt`, fetched by scripts/fetch-upstream) is
read here only: the twin carries its own family table (twin/vllm_metrics.py), and these tests hold
the two equal.
"""
from __future__ import annotations

import re

import pytest

from observability import contract
from tests.stacks import plan_for
from twin import vllm_metrics as vm

SAMPLE = "samples/vllm-metrics-0.29.0-inferstack.txt"
LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# Families of the capture the twin does not serve, and why (the simulator has no such figure).
NOT_EMULATED = {
    "vllm:cache_config_info": "engine configuration labels of the captured server",
    "vllm:estimated_flops_per_gpu_total": "vLLM's own MFU estimate; the simulator has no FLOP counter",
    "vllm:estimated_read_bytes_per_gpu_total": "vLLM's own bandwidth estimate",
    "vllm:estimated_write_bytes_per_gpu_total": "vLLM's own bandwidth estimate",
    "vllm:external_prefix_cache_queries_total": "no KV connector",
    "vllm:external_prefix_cache_hits_total": "no KV connector",
    "vllm:mm_cache_queries_total": "no multi-modal inputs",
    "vllm:mm_cache_hits_total": "no multi-modal inputs",
    "vllm:prompt_tokens_cached_total": "no prefix caching in the simulator",
}


def parse(text: str) -> dict:
    """family -> {"type", "help", "samples": [(name, labels)]}; the `*_created` families included."""
    fams: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            current = fams.setdefault(name, {"samples": []})
            current["help"] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            fams.setdefault(name, {"samples": []})["type"] = kind
        elif line and not line.startswith("#"):
            m = LINE.match(line)
            assert m, f"unparsable sample line: {line}"
            current["samples"].append((m["name"], dict(LABEL.findall(m["labels"] or ""))))
    return fams


@pytest.fixture
def sample(upstream_file) -> dict:
    return parse(upstream_file(SAMPLE).read_text())


@pytest.fixture
def emulated() -> dict:
    return parse(vm.render("llama-3-70b", {}, 1.7e9))


def vllm_families(fams: dict) -> set[str]:
    return {n for n in fams if n.startswith("vllm:") and not n.endswith("_created")}


def test_every_family_served_is_in_the_capture(sample, emulated):
    assert vllm_families(emulated) <= vllm_families(sample)


def test_every_family_of_the_capture_is_served_or_listed_as_not_emulated(sample, emulated):
    assert vllm_families(sample) - vllm_families(emulated) == set(NOT_EMULATED)


def test_every_contract_vllm_series_is_served(emulated):
    served = vllm_families(emulated)
    assert {s.name for s in contract.SERIES if s.source == "vllm"} <= served


@pytest.mark.parametrize("family", [f.name for f in vm.FAMILIES])
def test_type_and_help_match_the_capture(sample, emulated, family):
    assert (emulated[family]["type"], emulated[family]["help"]) == (sample[family]["type"], sample[family]["help"])


@pytest.mark.parametrize("family", [f.name for f in vm.FAMILIES if f.kind == "histogram"])
def test_histogram_buckets_match_the_capture(sample, emulated, family):
    def bounds(fams):
        return [labels["le"] for name, labels in fams[family]["samples"] if name == family + "_bucket"]
    assert bounds(emulated) == bounds(sample)


@pytest.mark.parametrize("family", [f.name for f in vm.FAMILIES])
def test_series_and_label_names_match_the_capture(sample, emulated, family):
    def series(fams):
        return sorted((name, tuple(sorted(k for k in labels if k != "model_name")),
                       tuple(sorted((k, v) for k, v in labels.items() if k not in ("model_name", "le"))))
                      for name, labels in fams[family]["samples"])
    assert series(emulated) == series(sample)


@pytest.mark.parametrize("family", [f.name for f in vm.FAMILIES if f.kind in ("counter", "histogram")])
def test_counters_and_histograms_carry_a_created_gauge(sample, emulated, family):
    created = (family.removesuffix("_total") if vm.by_name()[family].kind == "counter" else family) + "_created"
    assert emulated[created]["type"] == sample[created]["type"] == "gauge"


@pytest.mark.promtool
def test_promtool_finds_nothing_in_the_exposition_it_does_not_find_in_vllms(upstream_file, metrics_lints):
    ours = metrics_lints(vm.render("llama-3-70b", {}, 1.7e9))
    theirs = metrics_lints(upstream_file(SAMPLE).read_text())
    assert ours and ours <= theirs


# -- the timeline that drives the exposition ------------------------------------------------------
@pytest.fixture(scope="module")
def zone_loss_timeline():
    from simulator import config_from_plan, parse_fail_zone
    from twin import timeline

    _, plan = plan_for("prod")
    cfg = config_from_plan(plan, 600, failure=parse_fail_zone("us-east-1b@200:400", 600))
    return timeline.build(cfg)


def test_a_lost_zone_is_down_exactly_while_it_is_lost(zone_loss_timeline):
    rep = next(r for r in zone_loss_timeline.replicas if r.zone == "us-east-1b")
    down = [k for k, up in enumerate(rep.up) if not up]
    assert (down[0], down[-1]) == (200, 399)


def test_counters_and_histogram_counts_never_decrease(zone_loss_timeline):
    from twin.timeline import values_at

    rep = zone_loss_timeline.replicas[0]
    before, after = values_at(rep, 100), values_at(rep, 500)
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert 0 < before[name] < after[name]
    hist = "vllm:time_to_first_token_seconds"
    assert 0 < before[hist].count < after[hist].count
    assert after[hist].counts == sorted(after[hist].counts) and after[hist].counts[-1] == after[hist].count


def test_every_request_served_is_counted_once(zone_loss_timeline):
    from twin.timeline import values_at

    tl = zone_loss_timeline
    last = len(tl.offered) - 1
    served = sum(values_at(r, last)["vllm:request_success_total"]["length"] for r in tl.replicas)
    assert served == sum(1 for r in tl.result.requests if not r.lost) == tl.answered_2xx[-1]
    assert tl.offered[-1] == len(tl.result.requests)


def test_an_accelerated_clock_divides_every_count_by_its_scale(zone_loss_timeline):
    from twin.timeline import values_at

    rep = zone_loss_timeline.replicas[0]
    plain, scaled = values_at(rep, 300), values_at(rep, 300, per=60.0)
    hist = "vllm:request_time_per_output_token_seconds"
    assert scaled["vllm:generation_tokens_total"] == pytest.approx(plain["vllm:generation_tokens_total"] / 60)
    assert scaled[hist].total / scaled[hist].count == pytest.approx(plain[hist].total / plain[hist].count)
    assert scaled["vllm:num_requests_running"] == plain["vllm:num_requests_running"]      # gauges stay


def test_a_slowdown_multiplies_every_step(zone_loss_timeline):
    from twin.timeline import slowed

    cost = zone_loss_timeline.config.cost
    slow = slowed(cost, 1.2)
    for n, c in ((1, 0), (40, 0), (20, 500)):
        assert slow.step_s(n, c) == pytest.approx(1.2 * cost.step_s(n, c))
