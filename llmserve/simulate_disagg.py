"""`simulate` on a disaggregated plan: the two-stage queue of `simulator.disagg`, its own
failure options (`--fail-pool`, `--kill-prefill-at`, `--kv-load-failure-policy`) and a report
with a section per pool and one for the KV transfer. An aggregated plan's run never comes here
(its output is unchanged), and refuses these options."""
from __future__ import annotations

from pathlib import Path

import typer

from .errors import fail
from .sim_tables import emit, latency_table, ms as _ms
from .stack_arg import zone_failure

FAIL_POOLS = ("prefill", "decode")
# `simulate`'s options for a disaggregated plan (an aggregated plan refuses them)
FAIL_POOL = typer.Option(None, "--fail-pool", help="Disaggregated plans: the pool --fail-zone takes down, prefill "
                         "or decode (default: both).")
KILL_PREFILL_AT = typer.Option(None, "--kill-prefill-at", help="Disaggregated plans: lose the prefill replica with "
                               "the most KV transfers in flight at S s.")
KV_LOAD_FAILURE_POLICY = typer.Option(None, "--kv-load-failure-policy", help="Disaggregated plans: recompute "
                                      "(vLLM's default) or fail, for a KV load that fails.")
OPTION_NAMES = {"fail_pool": "--fail-pool", "kill_prefill_at": "--kill-prefill-at",
                "kv_load_failure_policy": "--kv-load-failure-policy"}


def dispatch(plan, duration: float) -> bool:
    """Run `simulate` on a disaggregated plan (True: done), with the command's own parameters
    (click's current context); on an aggregated one refuse the disaggregated options and return
    False (the aggregated run goes on, unchanged)."""
    import click

    params = click.get_current_context().params
    if not is_disaggregated(plan):
        refuse_on_aggregated({OPTION_NAMES[k]: params.get(k) for k in OPTION_NAMES})
        return False
    p = params
    run(plan, p["stack"], duration=duration, qps=p["qps"], concurrency=p["concurrency"], burst=p["burst"],
        router=p["router"], arrivals=p["arrivals"], burstiness=p["burstiness"], lengths=p["lengths"],
        length_cv=p["length_cv"], seed=p["seed"], fail_zone=p["fail_zone"], fail_node=p["fail_node"],
        as_json=p["as_json"], plot=p["plot"],
        overrides={"--max-num-batched-tokens": p["max_num_batched_tokens"], "--max-num-seqs": p["max_num_seqs"]},
        fail_pool=p["fail_pool"], kill_prefill_at=p["kill_prefill_at"],
        kv_load_failure_policy=p["kv_load_failure_policy"])
    return True


def is_disaggregated(plan) -> bool:
    from simulator.plan import is_disaggregated as disaggregated
    return disaggregated(plan)


def refuse_on_aggregated(options: dict) -> None:
    """The disaggregated-only options, given to an aggregated plan: one line naming the first."""
    for name, value in options.items():
        if value is not None:
            fail(f"{name}: the plan is aggregated (one pool); this option needs serving.mode: disaggregated")


def _check(plan, *, duration, qps, concurrency, burst, fail_zone, fail_node, plot, overrides, fail_pool,
           kill_prefill_at, kv_load_failure_policy) -> None:
    from simulator.disagg import KV_LOAD_FAILURE_POLICIES

    for name, value in (("--concurrency", concurrency), ("--burst", burst), ("--fail-node", fail_node),
                        ("--plot", plot), *overrides.items()):
        if value is not None:
            fail(f"{name}: not simulated for a disaggregated plan (its pools have their own engine arguments "
                 "and an open loop of arrivals); leave it out")
    if qps is None and plan.request.workload.qps is None:
        fail("--qps: a disaggregated plan is simulated as an open loop; give --qps")
    if fail_pool is not None and fail_pool not in FAIL_POOLS:
        fail(f"--fail-pool: unknown value '{fail_pool}'; choose one of: {', '.join(FAIL_POOLS)}")
    if fail_pool is not None and fail_zone is None:
        fail("--fail-pool: it names the pool --fail-zone takes down; give --fail-zone ZONE@T[:T2] too")
    if kv_load_failure_policy is not None and kv_load_failure_policy not in KV_LOAD_FAILURE_POLICIES:
        fail(f"--kv-load-failure-policy: unknown value '{kv_load_failure_policy}'; choose one of: "
             f"{', '.join(KV_LOAD_FAILURE_POLICIES)}")
    if kill_prefill_at is not None and not 0 <= kill_prefill_at < duration:
        fail(f"--kill-prefill-at: {kill_prefill_at:g} s is outside the {duration:g} s run")


def run(plan, stack, *, duration: float, qps, concurrency, burst, router: str, arrivals: str, burstiness: float,
        lengths: str, length_cv: float, seed: int, fail_zone, fail_node, as_json: bool, plot: Path | None,
        overrides: dict, fail_pool, kill_prefill_at, kv_load_failure_policy) -> None:
    from simulator.disagg import POOLS, PrefillLoss, simulate_disaggregated
    from simulator.plan import disagg_config_from_plan
    from simulator.report import disagg_to_dict

    _check(plan, duration=duration, qps=qps, concurrency=concurrency, burst=burst, fail_zone=fail_zone,
           fail_node=fail_node, plot=plot, overrides=overrides, fail_pool=fail_pool, kill_prefill_at=kill_prefill_at,
           kv_load_failure_policy=kv_load_failure_policy)
    failure = zone_failure(fail_zone, duration, plan)    # the fleet's zones: both pools'
    try:
        cfg = disagg_config_from_plan(
            plan, duration, qps, router=router, arrivals=arrivals, burstiness_cv=burstiness, lengths=lengths,
            length_cv=length_cv, seed=seed, failure=failure, failure_pools=(fail_pool,) if fail_pool else POOLS,
            prefill_loss=PrefillLoss(kill_prefill_at) if kill_prefill_at is not None else None,
            kv_load_failure_policy=kv_load_failure_policy or "recompute")
        result = simulate_disaggregated(cfg)
    except ValueError as exc:
        fail(str(exc))
    data = {"stack": stack, **disagg_to_dict(result)}
    emit(data, as_json, lambda: _print(data, stack))


def _print(data: dict, stack) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    pools = data["pools"]
    console.print(f"Simulated {stack or 'reference'} disaggregated: {len(pools['prefill']['replicas'])} prefill and "
                  f"{len(pools['decode']['replicas'])} decode replicas, {data['qps']:g} QPS, "
                  f"{data['duration_s']:g} s of arrivals.")
    console.print(f"{data['requests']:,} requests, {data['requests_lost']} lost ({data['requests_failed']} failed by "
                  f"the KV load failure policy), {data['requests_retried']} retried; goodput "
                  f"{100 * (data['goodput'] or 0):.1f}%")
    console.print(latency_table(data))
    reps = Table("pool", "replica", "zone", "requests", "busy", "mean batch", "preemptions")
    for role, pool in pools.items():
        for r in pool["replicas"]:
            reps.add_row(role, r["name"], r["zone"], f"{r['requests']:,}", f"{100 * r['utilization']:.0f}%",
                         f"{r['mean_running']:.1f}", str(r["preemptions"]))
    console.print(reps)
    kv = data["kv_transfer"]
    console.print(f"KV transfer: {kv['transfers']:,} done, mean {_ms(kv['transfer_ms']['mean'])} ms (planned "
                  f"{_ms(kv['planned_transfer_ms'])} ms); {kv['failed_transfers']} failed, "
                  f"{kv['recomputed_prefills']} prefills recomputed on decode ({kv['kv_load_failure_policy']}); "
                  f"pool goodput: prefill {100 * (pools['prefill']['goodput'] or 0):.1f}% (TTFT), decode "
                  f"{100 * (pools['decode']['goodput'] or 0):.1f}% (TPOT)")
    if "speculative" in data:
        sp = data["speculative"]
        console.print(f"Speculative decoding: k={sp['draft_tokens']}, mean acceptance length "
                      f"{sp['mean_acceptance_length']} (planned {sp['mean_acceptance_length_planned']})")


