"""The simulator's compiled build (simulator/native.py): used only when built from the current
sources, switched off by LLM_SERVING_NATIVE=0, and giving exactly the results of the sources."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import native

ROOT = Path(__file__).resolve().parent.parent

# Seeded runs that reach every path of the hot modules: a zone lost and back with every routing
# decision recorded, bursty arrivals with drawn lengths under least-pending-tokens, a KV cache
# small enough to preempt thousands of times, round-robin under a small max_num_seqs, a
# multi-node replica losing one node, a closed loop with an API-server cost through a zone loss,
# a burst, speculative decoding, a disaggregated plan losing a prefill replica mid-transfer and a
# decode zone; each run's report, and every request's and replica's record.
RUNS = r"""
import hashlib, json, sys
from dataclasses import replace
from settings import stack_settings
from simulator import ZoneFailure, config_from_plan, native, simulate, to_dict
from sizing.planner import plan
sys.path.insert(0, "tests")
from test_simulator import tight_cache_config
import pd_plans
from simulator.disagg import PrefillLoss, simulate_disaggregated
from simulator.plan import disagg_config_from_plan
from simulator.report import disagg_to_dict

def record(name, cfg):
    routes = []
    result = simulate(cfg, on_route=lambda t, reps, chosen: routes.append((t, chosen and chosen.name)))
    digest = hashlib.sha256(repr(routes).encode())
    for r in result.requests:
        digest.update(repr((r.id, r.arrival, r.prompt, r.out, r.gen, r.t_sched, r.t_first, r.t_done, r.attempts,
                            r.preemptions, r.lost, r.replica)).encode())
    for rep in result.replicas:
        digest.update(repr((rep.name, rep.busy_s, rep.prefill_s, rep.batch_s, rep.up_s, rep.served)).encode())
    return name, {"report": to_dict(result), "records": digest.hexdigest(), "requests": len(result.requests)}

def record_disaggregated(name, cfg):
    result = simulate_disaggregated(cfg)
    digest = hashlib.sha256()
    for r in result.requests:
        digest.update(repr((r.id, r.gen, r.t_sched, r.t_first, r.t_done, r.attempts, r.preemptions, r.lost,
                            r.replica)).encode())
    for rep in result.replicas:
        digest.update(repr((rep.name, rep.busy_s, rep.prefill_s, rep.batch_s, rep.up_s, rep.served,
                            rep.spec_accepted)).encode())
    return name, {"report": disagg_to_dict(result), "records": digest.hexdigest(), "requests": len(result.requests)}

prod = plan(stack_settings("prod").plan_request())
zone = prod.nodes[0].zone
multinode = plan(stack_settings("prod-multinode").plan_request())
node = multinode.nodes[0]
tight = tight_cache_config(failure=ZoneFailure("z2", 40.0, 80.0))
runs = dict([
    record("zone lost and back", config_from_plan(prod, 600.0, failure=ZoneFailure(zone, 200.0, 400.0))),
    record("bursty, drawn lengths", config_from_plan(prod, 300.0, router="least-pending-tokens", arrivals="gamma",
                                                     lengths="lognormal", seed=3)),
    record("preemption", tight),
    record("round-robin, small max_num_seqs", config_from_plan(prod, 300.0, router="round-robin", max_num_seqs=16,
                                                               max_num_batched_tokens=512, seed=5)),
    record("a node of a multi-node replica lost", config_from_plan(
        multinode, 300.0, qps=multinode.request.workload.qps,
        failure=ZoneFailure(node.zone, 100.0, 200.0, node=f"{node.pool}/node-{node.node}"))),
    record("closed loop, API server cost, a zone lost", replace(config_from_plan(
        prod, 120.0, concurrency=48, lengths="lognormal", failure=ZoneFailure(zone, 40.0, 80.0)),
        request_overhead_s=0.004)),
    record("burst", config_from_plan(prod, 60.0, burst=300, router="least-pending-tokens")),
    record("speculative", config_from_plan(replace(prod, speculative=pd_plans.speculative()), 120.0)),
    record_disaggregated("disaggregated, speculative, a prefill lost mid-transfer", disagg_config_from_plan(
        replace(pd_plans.disaggregated(prod, transfer=pd_plans.kv_transfer(prod, fixed_ms=300.0)),
                speculative=pd_plans.speculative()), 90.0, prefill_loss=PrefillLoss(30.0),
        failure=ZoneFailure(zone, 50.0, 70.0), failure_pools=("decode",))),
])
json.dump({"compiled": native.in_use(), "runs": runs}, sys.stdout)
"""


def simulated(compiled: bool) -> dict:
    env = {**os.environ, native.SWITCH_ENV: "1" if compiled else "0"}
    done = subprocess.run([sys.executable, "-c", RUNS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# Skipped only where no build is possible (no mypyc, compiler or Python headers): scripts/test
# installs them, and where they are present a missing build fails the test below.
UNBUILDABLE = native.unbuildable()


@pytest.mark.skipif(UNBUILDABLE is not None,
                    reason=f"the simulator cannot be compiled here: {UNBUILDABLE} (scripts/test installs "
                           "what it needs)")
def test_the_compiled_simulator_gives_exactly_the_results_of_its_sources():
    assert native.build_dir().is_dir(), "no build of the current sources: run scripts/build_native.py to see why"
    compiled, interpreted = simulated(True), simulated(False)
    assert (compiled["compiled"], interpreted["compiled"]) == (True, False)
    assert compiled["runs"] == interpreted["runs"]
    assert sum(replica["preemptions"] for replica in compiled["runs"]["preemption"]["report"]["replicas"]) > 100


def copy_sources(tmp_path: Path) -> Path:
    package = tmp_path / "simulator"
    package.mkdir()
    for name in native.COMPILED:
        (package / name).write_bytes((native.PACKAGE_DIR / name).read_bytes())
    return package


def test_the_build_key_changes_with_any_compiled_source(tmp_path, monkeypatch):
    package = copy_sources(tmp_path)
    monkeypatch.setattr(native, "PACKAGE_DIR", package)
    keys = {native.build_key()}
    for name in native.COMPILED:
        source = package / name
        source.write_bytes(source.read_bytes() + b"\n")
        keys.add(native.build_key())
    assert len(keys) == len(native.COMPILED) + 1


@pytest.mark.parametrize("built, switch, used", [
    (True, None, True),
    (True, "1", True),
    (True, "0", False),
    (False, None, False),
], ids=["built", "built, switched on", "built, switched off", "not built for these sources"])
def test_the_build_goes_ahead_of_the_sources_only_when_built_and_not_switched_off(tmp_path, monkeypatch, built,
                                                                                   switch, used):
    monkeypatch.setattr(native, "PACKAGE_DIR", copy_sources(tmp_path))
    monkeypatch.setattr(native, "BUILD_ROOT", tmp_path / "build")
    if built:
        (native.build_dir() / "simulator").mkdir(parents=True)
    if switch is None:
        monkeypatch.delenv(native.SWITCH_ENV, raising=False)
    else:
        monkeypatch.setenv(native.SWITCH_ENV, switch)
    path = ["sources"]
    assert native.enable(path) is used
    assert path == ([str(native.build_dir() / "simulator"), "sources"] if used else ["sources"])
