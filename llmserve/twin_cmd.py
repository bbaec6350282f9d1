"""`llmserve twin`, `llmserve check` and `llmserve calibrate`: the commands over the `twin` package.

twin: the plan's fleet emulated on 127.0.0.1 (vLLM 0.29.0 /metrics driven by the simulator),
scraped by a real Prometheus with the program's rules and alerting a real Alertmanager; prints
which alerts fired and resolved when; exit 1 when the plan's expected alerts did not (or
forbidden ones did), or when Prometheus or Alertmanager died, stopped, stopped answering or
restarted during the run (one line naming it: nothing is judged).
check: plan versus the live fleet from a Prometheus; exit 1 when the fleet is outside its plan.
calibrate: fit the profile's prefill and decode efficiencies to the fleet; write a named profile.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

import typer

from . import options
from .errors import check_positive, fail, writing
from .stack_arg import load, requested_failure

MAX_TIME_SCALE = 150.0     # beyond it a 5m rate window holds fewer than 8 scrapes (they are 250 ms apart at least)
MAX_DURATION_S = 4 * 3600.0


def twin(
    stack: str = options.STACK,
    fail_zone: Optional[str] = typer.Option(None, "--fail-zone", help="ZONE@T[:T2]: lose a zone at T s (back at T2)."),
    fail_node: Optional[str] = typer.Option(None, "--fail-node", help="POOL/node-I@T[:T2]: lose one node (and every "
                                            "replica on it: a multi-node replica whole) at T s (back at T2)."),
    qps: Optional[float] = typer.Option(None, help="Arrival rate, requests per second (default: the stack's)."),
    duration: float = typer.Option(1200.0, help="Simulated seconds of arrivals."),
    time_scale: float = typer.Option(60.0, "--time-scale", help="Simulated seconds per wall-clock second."),
    slowdown: float = typer.Option(1.0, help="Emulated replicas' steps this many times the plan's (1.2: 20% slower)."),
    seed: int = typer.Option(0, help="Random seed of the arrivals."),
    as_json: bool = options.JSON,
) -> None:
    from twin.scenario import run
    from twin.servers import ServerLost, TwinError

    check_positive({"--qps": qps, "--duration": duration, "--time-scale": time_scale, "--slowdown": slowdown})
    if time_scale > MAX_TIME_SCALE:
        fail(f"--time-scale: at most {MAX_TIME_SCALE:g} (got {time_scale:g}): faster, a 5m rate window would hold "
             "too few scrapes")
    if duration > MAX_DURATION_S:
        fail(f"--duration: at most {MAX_DURATION_S:g} simulated seconds (got {duration:g})")
    loaded = load(stack, plan=True)
    plan, namespace = loaded.plan, loaded.namespace
    from simulator.workload import WorkLimitError, check_work
    try:        # the simulator's own work limits, before any server starts
        check_work(qps if qps is not None else plan.request.workload.qps or 0.0, duration, slowdown=slowdown)
    except WorkLimitError as exc:
        fail(str(exc))
    failure = requested_failure(fail_zone, fail_node, duration, plan)

    def started(tw) -> None:
        from twin.scenario import SETTLE_S
        if as_json:
            return
        print(f"Running: Prometheus {tw.prometheus_url}, Alertmanager {tw.alertmanager_url} (loopback only), "
              f"about {(duration + SETTLE_S) / time_scale:.0f} s.", flush=True)
    try:
        report = run(plan, namespace, qps=qps, duration_s=duration, failure=failure, scale=time_scale,
                     slowdown=slowdown, seed=seed, on_start=started)
    except ServerLost as exc:         # the run failed, not the input: exit 1, as a verdict that does not hold
        fail(str(exc), code=1)
    except TwinError as exc:
        fail(str(exc))
    except OSError as exc:            # its working folder (ENOSPC, EIO) or a server it could not start
        fail(f"the twin cannot run here: {exc.strerror or exc} (its working folder is under "
             f"{tempfile.gettempdir()}); every server it started is stopped")
    except KeyboardInterrupt as exc:   # SIGINT, or SIGTERM (llmserve.cli.Terminated, which carries its signum)
        fail("interrupted; every server the twin started is stopped", code=128 + getattr(exc, "signum", 2))
    from twin.report import print_twin, twin_dict
    if as_json:
        print(json.dumps(twin_dict(report, stack), indent=2))
    else:
        print_twin(report, stack)
    if not report.verdict.ok:
        raise typer.Exit(1)


def check(
    stack: str = options.STACK,
    prometheus: str = typer.Option(..., help="Prometheus base URL, e.g. http://127.0.0.1:9090 (a port-forward)."),
    window: str = typer.Option("10m", help="How far back to read (a Prometheus duration)."),
    tolerance: float = typer.Option(0.10, help="Mean TPOT may exceed the plan's at the same load by this share."),
    as_json: bool = options.JSON,
) -> None:
    from observability.rules import slo_alerts
    from twin.check import check as run_check
    from twin.promapi import PromError, check_url, check_window, read_fleet

    url = _checked(check_url, prometheus, "--prometheus")
    _checked(check_window, window, "--window")
    if not 0 < tolerance < 1:
        fail(f"--tolerance: a share between 0 and 1, e.g. 0.10 (got {tolerance:g})")
    plan = load(stack, plan=True).plan
    try:
        live = read_fleet(url, window, slo_alerts(plan))
    except PromError as exc:
        fail(str(exc), code=1)
    result = run_check(plan, live, tolerance)
    from inputs.untrusted import redact_url
    from twin.report import check_dict, print_check
    if as_json:
        print(json.dumps(check_dict(stack, redact_url(url), live, result), indent=2))
    else:
        print_check(stack, redact_url(url), live, result)
    if not result.ok:
        raise typer.Exit(1)


def calibrate(
    prometheus: str = typer.Option(..., help="Prometheus base URL, e.g. http://127.0.0.1:9090 (a port-forward)."),
    stack: Optional[str] = options.STACK_OR_REFERENCE,
    name: Optional[str] = typer.Option(None, help="Name of the profile to write (default: fleet-STACK)."),
    window: str = typer.Option("1h", help="How far back to read (a Prometheus duration)."),
    profiles_file: Optional[Path] = typer.Option(None, "--profiles-file",
                                                 help="Profiles YAML to write (default: the one stacks select from)."),
    as_json: bool = options.JSON,
) -> None:
    from sizing.catalog import DATA_DIR
    from sizing.profiles import get_profile
    from twin.calibrate import CalibrationError, check_name, fit, observe, plan_under, read_profiles_file, write_profile
    from twin.promapi import PromError, check_url, check_window, read_fleet

    url = _checked(check_url, prometheus, "--prometheus")
    _checked(check_window, window, "--window")
    profile_name = _checked(check_name, name or f"fleet-{stack or 'reference'}", "--name")
    path = profiles_file or DATA_DIR / "profiles.yaml"
    try:       # read and checked before the fleet is: a bad file never costs a fit
        read_profiles_file(path)
    except CalibrationError as exc:
        fail(f"--profiles-file: {exc}")
    plan = load(stack, plan=True).plan
    try:
        obs = observe(read_fleet(url, window))
    except PromError as exc:
        fail(str(exc), code=1)
    except CalibrationError as exc:
        fail(str(exc), code=1)
    from inputs.untrusted import redact_url
    result = fit(plan, get_profile(plan.request.profile), obs, profile_name, f"{redact_url(url)} over {window}")
    with writing("--profiles-file", path):
        write_profile(path, result.profile)
    after = plan_under(plan.request, result.profile)
    from twin.report import calibrate_dict, print_calibrate
    if as_json:
        print(json.dumps(calibrate_dict(result, plan, after, path), indent=2))
    else:
        print_calibrate(result, plan, after, path, stack)


def _checked(validate, value, option: str):
    try:
        return validate(value)
    except ValueError as exc:
        fail(f"{option}: {exc}")


def register(app: typer.Typer) -> None:
    app.command("twin", help="The plan's fleet emulated on 127.0.0.1 under a real Prometheus and Alertmanager "
                             "with the program's rules: which alerts fired and resolved when; exit 1 when the "
                             "plan's expected alerts did not fire (or others did).")(twin)
    app.command("check", help="Plan versus the live fleet from a Prometheus; exit 1 when it is outside the plan.")(check)
    app.command("calibrate", help="Fit the profile's prefill and decode efficiencies to the fleet's metrics "
                                  "and write a named profile.")(calibrate)

