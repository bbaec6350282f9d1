"""The metric contract: rules and panels read only the listed series, never a deprecated vLLM name,
and the listed vLLM names are the ones the pinned vLLM really exposes (checked against captures)."""
from __future__ import annotations

import re

import pytest

from conventions import VLLM_IMAGE
from observability import contract
from observability.contract import ContractError, check_expr, series_in
from observability.dashboard import build_dashboard
from observability.rules import AlertPolicy, check_groups, recorded_names, rule_groups
from tests.stacks import plan_for

CAPTURE_NEW = "vllm-metrics-0.29.0-inferstack.txt"
CAPTURE_OLD = "vllm-metrics-0.11.x-hardware-aware-router.txt"
STACKS = ("prod", "staging", "dev", "prod-multinode")


def exposition_types(text: str) -> dict[str, str]:
    """family -> type, from the `# TYPE` lines of a Prometheus text exposition."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def sample_names(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([A-Za-z_:][A-Za-z0-9_:]*)[{ ]", text, re.M)}


def rules_and_panels(stack: str) -> list[tuple[str, str]]:
    settings, plan = plan_for(stack)
    groups = rule_groups(plan, settings.serving.namespace)
    board = build_dashboard(plan, stack, recorded_names(groups), AlertPolicy(), inference_extension=True)
    exprs = [(f"rule {r.get('record') or r.get('alert')}", r["expr"]) for g in groups for r in g["rules"]]
    exprs += [(f"panel {p['title']}", t["expr"]) for p in board["panels"] for t in p["targets"]]
    assert any(w.startswith("rule ") for w, _ in exprs) and any(w.startswith("panel ") for w, _ in exprs)
    return exprs


# -- what rules and panels read ----------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_rules_and_panels_read_only_contract_or_recorded_series(stack):
    settings, plan = plan_for(stack)
    allowed = contract.exposed_names() | recorded_names(rule_groups(plan, settings.serving.namespace))
    for where, expr in rules_and_panels(stack):
        assert series_in(expr) <= allowed, f"{where}: {sorted(series_in(expr) - allowed)}"


def autoscaling_exprs() -> list[tuple[str, str]]:
    """The autoscaled fleet's alerts (observability.autoscaling_alerts), on a plan given a policy."""
    import dataclasses
    from observability.autoscaling_alerts import autoscaling_group
    from tests.test_autoscaling_deploy import policy_for
    settings, plan = plan_for("prod")
    group = autoscaling_group(dataclasses.replace(plan, autoscale=policy_for(plan)), settings.serving.namespace)
    return [(f"rule {r['alert']}", r["expr"]) for r in group["rules"]]


def test_every_contract_series_is_read_by_a_rule_or_panel():
    """prod's rules and panels, a multi-node stack's (its transport check is read there only), and an
    autoscaled fleet's alerts."""
    read = set().union(*(series_in(expr) for stack in ("prod", "prod-multinode")
                         for _, expr in rules_and_panels(stack)), *(series_in(expr) for _, expr in autoscaling_exprs()))
    unread = {s.name for s in contract.SERIES
              if not ({s.name} | {s.name + x for x in contract.HISTOGRAM_SUFFIXES}) & read}
    assert unread == set()


@pytest.mark.parametrize("expr, message", [
    ("rate(vllm:time_per_output_token_seconds_bucket[5m])",
     "panel: vllm:time_per_output_token_seconds_bucket is deprecated in vLLM; use vllm:inter_token_latency_seconds"),
    ("avg(vllm:gpu_cache_usage_perc)",
     "panel: vllm:gpu_cache_usage_perc is deprecated in vLLM; use vllm:kv_cache_usage_perc"),
    ("sum(vllm:num_requests_swapped)", "panel: vllm:num_requests_swapped is deprecated in vLLM and removed"),
    ("rate(vllm:gpu_prefix_cache_hits_total[5m])",
     "panel: vllm:gpu_prefix_cache_hits_total is deprecated in vLLM; use the vllm:prefix_cache_* counters"),
    ("sum(vllm:num_requests_waiting_by_reason)",
     "panel: vllm:num_requests_waiting_by_reason is not in the metric contract (observability/contract.py)"),
    ("rate(envoy_cluster_upstream_rq_total[5m])",
     "panel: envoy_cluster_upstream_rq_total is not in the metric contract (observability/contract.py)"),
])
def test_check_expr_refuses(expr, message):
    with pytest.raises(ContractError) as exc:
        check_expr(expr, where="panel")
    assert str(exc.value) == message


def test_a_rule_outside_the_contract_fails_the_rule_groups():
    groups = [{"name": "g", "rules": [{"record": "zone:kv:avg", "expr": "avg by (zone) (vllm:gpu_cache_usage_perc)"}]}]
    with pytest.raises(ContractError, match="rule zone:kv:avg: vllm:gpu_cache_usage_perc is deprecated"):
        check_groups(groups)


def test_a_recorded_series_may_be_read_only_after_it_is_recorded():
    groups = [{"name": "g", "rules": [
        {"alert": "A", "expr": "zone:kv:avg > 0.9"},
        {"record": "zone:kv:avg", "expr": "avg by (zone) (vllm:kv_cache_usage_perc)"}]}]
    with pytest.raises(ContractError, match="rule A: zone:kv:avg is not in the metric contract"):
        check_groups(groups)


@pytest.mark.parametrize("expr, names", [
    ('histogram_quantile(0.95, sum by (le, zone) (rate(vllm:time_to_first_token_seconds_bucket[5m])))',
     {"vllm:time_to_first_token_seconds_bucket"}),
    ('a:b:c > 0.5 and on (pod) x{zone="us-east-1a", le="+Inf"} or absent(y{z="1"}) or vector(0)', {"a:b:c", "x", "y"}),
    ('label_replace(k * on (namespace, pod) group_left (label_z) m, "zone", "$1", "label_z", "(.+)")', {"k", "m"}),
    ("sum by (Hostname) (DCGM_FI_DEV_FB_USED) / 1e-9", {"DCGM_FI_DEV_FB_USED"}),
])
def test_series_in_reads_the_selected_names(expr, names):
    assert series_in(expr) == names


# -- the names against what vLLM really exposes --------------------------------------------------
VLLM_SERIES = [s for s in contract.SERIES if s.source == "vllm"]


@pytest.mark.parametrize("series", VLLM_SERIES, ids=lambda s: s.name)
def test_vllm_series_is_exposed_by_the_pinned_vllm(series, upstream_file):
    text = upstream_file(f"samples/{CAPTURE_NEW}").read_text()
    types = exposition_types(text)     # a counter's TYPE line may name it with or without _total
    assert types.get(series.name, types.get(series.name.removesuffix("_total"))) == series.kind
    expected = {series.name + s for s in contract.HISTOGRAM_SUFFIXES} if series.kind == "histogram" else {series.name}
    assert expected <= sample_names(text)


def test_the_capture_matches_the_pinned_vllm_version():
    assert CAPTURE_NEW.startswith(f"vllm-metrics-{contract.VLLM_VERSION}-")


def test_the_serving_component_deploys_the_pinned_vllm():

    tag, _, digest = VLLM_IMAGE.partition("@")
    assert tag.rsplit(":", 1)[1] == f"v{contract.VLLM_VERSION}" and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)


@pytest.mark.parametrize("deprecated", sorted(contract.DEPRECATED))
def test_the_pinned_vllm_no_longer_exposes_deprecated_names(deprecated, upstream_file):
    text = upstream_file(f"samples/{CAPTURE_NEW}").read_text()
    assert not any(n.startswith(deprecated) for n in sample_names(text))


def test_the_older_capture_still_has_the_deprecated_tpot_name(upstream_file):
    """Why the refusal matters: on 0.11.x a panel on the old name still shows data; on the pinned
    version it would show "No data"."""
    text = upstream_file(f"samples/{CAPTURE_OLD}").read_text()
    assert exposition_types(text).get("vllm:time_per_output_token_seconds") == "histogram"
    assert "vllm:time_per_output_token_seconds_bucket" in sample_names(text)
    assert contract.deprecated_reason("vllm:time_per_output_token_seconds") is not None


def test_burst_scaling_queries_read_contract_series(build_program):
    recording = build_program("prod", {"serving": {"burstScaling": True}})
    queries = [t["metadata"]["query"] for r in recording.resources if r.type.endswith(":ScaledObject")
               for t in r.inputs["spec"]["triggers"] if t.get("type") == "prometheus"]
    assert queries
    for query in queries:
        check_expr(query, where="ScaledObject")


# -- label names: pinned per exporter, like the series --------------------------------------------
def series_labels(text: str, family: str) -> set[str]:
    """Label names on the samples of `family` (and its _bucket/_sum/_count) in an exposition."""
    found: set[str] = set()
    for line in text.splitlines():
        name, brace, rest = line.partition("{")
        if brace and name in {family, *(family + s for s in contract.HISTOGRAM_SUFFIXES)}:
            found.update(part.split("=", 1)[0] for part in rest.split("}", 1)[0].split(",") if "=" in part)
    return found


@pytest.mark.parametrize("series", VLLM_SERIES, ids=lambda s: s.name)
def test_vllm_labels_are_the_pinned_ones(series, upstream_file):
    text = upstream_file(f"samples/{CAPTURE_NEW}").read_text()
    assert series_labels(text, series.name) - {"le"} == set(series.labels)


@pytest.mark.parametrize("expr, legend, refused", [
    ("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}}", True),      # before dcgm-exporter PR #655
    ("avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{hostname}}", False),
    ("max by (gpu, UUID) (DCGM_FI_DEV_GPU_TEMP)", "GPU {{gpu}}", False),
    ('sum by (zone) (vllm:num_requests_running{model_name="m"})', "{{zone}}", False),
    ("sum by (model) (vllm:num_requests_running)", "", True),
])
def test_a_label_the_exporter_does_not_emit_is_refused(expr, legend, refused):
    if refused:
        with pytest.raises(contract.ContractError, match="is not on the"):
            contract.check_labels(expr, legend)
    else:
        assert contract.check_labels(expr, legend) is None


def test_gpu_panels_group_by_the_exporters_hostname_label():
    from observability.dashboard import panel_specs
    from sizing.planner import plan
    from settings import stack_settings

    specs = panel_specs(plan(stack_settings("prod").plan_request()))
    gpu = [q for s in specs for q in s.queries if "DCGM_" in q.expr]
    assert gpu and all("by (hostname)" in q.expr and q.legend == "{{hostname}}" for q in gpu)
