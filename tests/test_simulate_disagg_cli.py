"""`llmserve simulate` on a disaggregated plan: its JSON's pool and KV-transfer sections, the
failure options, exact one-line errors; and the same options refused on an aggregated plan."""
from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import pd_plans
from llmserve import simulate_cmd
from llmserve.cli import app
from settings import stack_settings
from sizing.planner import plan as make_plan


@pytest.fixture(scope="module")
def prod():
    return make_plan(stack_settings("prod").plan_request())


@pytest.fixture
def disaggregated(prod, monkeypatch):
    """`--stack pd` loads a disaggregated plan (two pools, one replica each per zone; a slow
    transfer, so a prefill lost at any instant has some in flight); speculative decode pool."""
    plan = replace(pd_plans.disaggregated(prod, transfer=pd_plans.kv_transfer(prod, fixed_ms=300.0)),
                   speculative=pd_plans.speculative())
    real = simulate_cmd.load
    monkeypatch.setattr(simulate_cmd, "load", lambda stack, plan_=None, **kw: SimpleNamespace(plan=plan)
                        if stack == "pd" else real(stack, **kw))
    return plan


def run(*args: str):
    return CliRunner().invoke(app, ["simulate", *args])


def test_the_json_has_a_section_per_pool_and_one_for_the_transfer(disaggregated):
    result = run("--stack", "pd", "--duration", "30", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["serving_mode"] == "disaggregated"
    assert list(data["pools"]) == ["prefill", "decode"]
    assert [r["zone"] for r in data["pools"]["decode"]["replicas"]] == ["us-east-1a", "us-east-1b"]
    assert {"transfers", "transfer_ms", "planned_transfer_ms", "failed_transfers", "recomputed_prefills",
            "kv_load_failure_policy"} <= set(data["kv_transfer"])
    assert data["kv_transfer"]["planned_transfer_ms"] == pytest.approx(disaggregated.kv_transfer.transfer_ms, abs=1e-3)
    assert data["speculative"]["num_drafts"] > 0


def test_the_aggregated_json_has_no_pool_or_transfer_section():
    data = json.loads(run("--stack", "prod", "--duration", "30", "--json").stdout)
    assert not {"serving_mode", "pools", "kv_transfer", "speculative"} & set(data)


@pytest.mark.parametrize("policy, code", [("recompute", 0), ("fail", 1)])
def test_a_prefill_lost_mid_transfer_recomputes_or_fails_by_the_policy(disaggregated, policy, code):
    result = run("--stack", "pd", "--duration", "40", "--kill-prefill-at", "20", "--kv-load-failure-policy", policy,
                 "--json")
    assert result.exit_code == code, result.stderr
    data = json.loads(result.stdout)
    kv = data["kv_transfer"]
    assert kv["failed_transfers"] > 0 and kv["kv_load_failure_policy"] == policy
    assert data["requests_failed"] == (kv["failed_transfers"] if policy == "fail" else 0)
    assert kv["recomputed_prefills"] == (kv["failed_transfers"] if policy == "recompute" else 0)


@pytest.mark.parametrize("pool, lost", [
    ("decode", ["decode-us-east-1a-0"]),
    ("prefill", ["prefill-us-east-1a-0"]),
    (None, ["prefill-us-east-1a-0", "decode-us-east-1a-0"]),
])
def test_a_zone_lost_in_one_pool_or_both(disaggregated, pool, lost):
    args = ["--stack", "pd", "--duration", "60", "--fail-zone", "us-east-1a@20:40", "--json"]
    result = run(*args, *(["--fail-pool", pool] if pool else []))
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["failure"]["replicas_lost"] == lost and data["requests_lost"] == 0


def test_the_text_report_names_the_pools_and_the_transfer(disaggregated):
    result = run("--stack", "pd", "--duration", "30")
    assert result.exit_code == 0, result.stderr
    assert "Simulated pd disaggregated: 2 prefill and 2 decode replicas, 10 QPS, 30 s of arrivals." in result.stdout
    assert "KV transfer:" in result.stdout and "Speculative decoding: k=3" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--fail-pool", "both"], "error: --fail-pool: unknown value 'both'; choose one of: prefill, decode"),
    (["--fail-pool", "decode"],
     "error: --fail-pool: it names the pool --fail-zone takes down; give --fail-zone ZONE@T[:T2] too"),
    (["--kill-prefill-at", "nan"], "error: --kill-prefill-at: nan s is outside the 60 s run"),
    (["--kv-load-failure-policy", "retry"],
     "error: --kv-load-failure-policy: unknown value 'retry'; choose one of: recompute, fail"),
    (["--kill-prefill-at", "90"], "error: --kill-prefill-at: 90 s is outside the 60 s run"),
    (["--concurrency", "4"], "error: --concurrency: not simulated for a disaggregated plan (its pools have their own "
                             "engine arguments and an open loop of arrivals); leave it out"),
    (["--fail-node", "x/node-0@10"], "error: --fail-node: not simulated for a disaggregated plan (its pools have their "
                                     "own engine arguments and an open loop of arrivals); leave it out"),
    (["--fail-zone", "us-east-1c@10"],
     "error: --fail-zone: zone us-east-1c holds no replica of this plan (zones: us-east-1a, us-east-1b)"),
])
def test_disaggregated_errors_are_one_line(disaggregated, args, message):
    result = run("--stack", "pd", "--duration", "60", *args)
    assert (result.exit_code, result.stderr.strip()) == (2, message)


@pytest.mark.parametrize("option, value", [("--kill-prefill-at", "10"), ("--fail-pool", "decode"),
                                           ("--kv-load-failure-policy", "fail")])
def test_an_aggregated_plan_refuses_the_disaggregated_options(option, value):
    result = run("--stack", "prod", "--duration", "60", option, value)
    assert (result.exit_code, result.stderr.strip()) == (
        2, f"error: {option}: the plan is aggregated (one pool); this option needs serving.mode: disaggregated")
