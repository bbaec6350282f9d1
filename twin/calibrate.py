"""`llmserve calibrate`: the profile's prefill and decode efficiencies, fitted to the fleet's own
histograms and token counters, written as a named profile a stack can select.

Observed over the window, requests-weighted over the replicas: the load per replica (request
rate), the mean prompt and output lengths (token counters over requests), the mean time per
output token (`request_time_per_output_token_seconds` sum / count) and the mean prefill time
(`request_prefill_time_seconds`: first scheduled to first token).

The fit is the published-measurement calibration's (`sizing.calibration`): least squares on the
log error of predicted against measured figures, over (prefill efficiency, decode factor). Here
a measurement is an open-loop replica at the observed load, so the prediction comes from the
project's simulator of a replica (chunked prefill and continuous batching, costs from the
sizing engine) at that load and those lengths, with a fixed seed: TPOT is mostly the decode
step, prefill time mostly prefill throughput, and each reacts to the other through the steps
they share. With two figures and two factors the least-squares solution is found by
Gauss-Newton in log space from the stack's profile (a handful of short simulations).
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from inputs import InputError, safe_yaml
from inputs.files import read_text
from inputs.outputs import write_text_atomically
from simulator import config_from_plan, replica_model, replica_specs, simulate
from simulator.cost import step_cost
from simulator.workload import WorkLimitError, check_work
from sizing.model import ReplicaModel
from sizing.planner import Plan, PlanRequest, plan as make_plan
from sizing.profiles import MAX_PROFILES_BYTES, Profile, load_profiles
from sizing.workload import Workload

from . import efficiency as eff
from .promapi import FleetLive

NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
RESERVED = ("seed", "calibrated", "measured")   # shipped profiles (sizing/data/profiles.yaml)
MAX_ITERATIONS = 10
TOLERANCE = 0.005           # on each log residual: 0.5%, about the simulated figures' jitter
STEP = 0.05                 # finite-difference step in log space (well above that jitter)
HALVINGS = 5
MAX_MOVE = 0.5              # largest change of a log factor in one iteration
SIM_REQUESTS = 3000         # requests per simulated point (the first tenth is warm-up)


class CalibrationError(ValueError):
    pass


@dataclass(frozen=True)
class Observed:
    qps_per_replica: float
    input_tokens: int
    output_tokens: int
    tpot_mean_s: float
    prefill_mean_s: float
    replicas: int


@dataclass(frozen=True)
class Fit:
    profile: Profile
    base: Profile
    observed: Observed
    predicted: tuple[float, float]      # (TPOT, prefill time) of the fitted profile, seconds
    rms_log_error: float
    iterations: int

    @property
    def decode_slowdown(self) -> float:
        """Decode steps of the fleet over the base profile's (1.2: 20% slower)."""
        return eff.decode_factor(self.profile) / eff.decode_factor(self.base)

    @property
    def prefill_slowdown(self) -> float:
        return eff.prefill_efficiency(self.base) / eff.prefill_efficiency(self.profile)


def check_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise ValueError(f"'{name}': a profile name is lower-case letters, digits and dashes, e.g. fleet-prod")
    if name in RESERVED:
        raise ValueError(f"'{name}' is written by the project itself; choose another name, e.g. fleet-prod")
    return name


def observe(live: FleetLive) -> Observed:
    if live.unreadable:
        raise CalibrationError(f"could not read {', '.join(live.unreadable[:3])} from Prometheus: a fit to "
                               "unknown figures would be made up")
    reps = [r for r in live.replicas if r.qps > 0 and r.tpot_mean_s and r.prefill_mean_s]
    if not reps:
        raise CalibrationError(f"no replica finished requests over the last {live.window}: nothing to fit")
    total = sum(r.qps for r in reps)

    def weighted(attr: str) -> float:
        return sum(getattr(r, attr) * r.qps for r in reps) / total
    tokens = (max(1.0, sum(r.prompt_tokens_per_s for r in reps) / total),
              max(2.0, sum(r.generation_tokens_per_s for r in reps) / total))
    try:      # the simulator's work limits: a 1e12-token mean prompt is not a fleet, and would not finish
        check_work(total, SIM_REQUESTS / (total / len(reps)), tokens=tokens)
    except WorkLimitError as exc:
        raise CalibrationError(f"the fleet's figures are beyond what can be simulated ({exc}); are the counters "
                               "this fleet's?") from None
    return Observed(
        qps_per_replica=total / len(reps),
        input_tokens=max(1, round(sum(r.prompt_tokens_per_s for r in reps) / total)),
        output_tokens=max(2, round(sum(r.generation_tokens_per_s for r in reps) / total)),
        tpot_mean_s=weighted("tpot_mean_s"), prefill_mean_s=weighted("prefill_mean_s"), replicas=len(reps))


def predict(plan: Plan, profile: Profile, obs: Observed, seed: int = 0) -> tuple[float, float]:
    """(mean TPOT, mean prefill time) of the simulated replicas under `profile` at the observed load.

    As many replicas as were observed, behind the simulator's router: a router evens out the
    arrivals each replica sees, which shortens prefills (fewer collide) against one Poisson stream.
    """
    shape = replica_model(plan).shape
    w = Workload(input_tokens=obs.input_tokens, output_tokens=obs.output_tokens, qps=obs.qps_per_replica)
    duration = SIM_REQUESTS / obs.qps_per_replica
    replicas = min(obs.replicas, len(replica_specs(plan)))
    cfg = config_from_plan(plan, duration, obs.qps_per_replica * replicas, replicas=replicas, seed=seed)
    cfg = replace(cfg, cost=step_cost(ReplicaModel(shape, w, profile, real=True)),
                  workload=replace(cfg.workload, input_tokens=obs.input_tokens, output_tokens=obs.output_tokens))
    done = [r for r in simulate(cfg).requests
            if r.t_done is not None and not r.lost and r.arrival >= 0.1 * duration and r.out > 1]
    if not done:
        return math.inf, math.inf
    tpot = sum((r.t_done - r.t_first) / (r.out - 1) for r in done) / len(done)
    prefill = sum(r.t_first - r.t_sched for r in done) / len(done)
    return tpot, prefill


def _residuals(plan: Plan, base: Profile, x: tuple[float, float], obs: Observed) -> tuple[float, float]:
    profile = eff.with_efficiencies(base, math.exp(x[0]), math.exp(x[1]))
    tpot, prefill = predict(plan, profile, obs)
    return math.log(tpot / obs.tpot_mean_s), math.log(prefill / obs.prefill_mean_s)


def _norm(r: tuple[float, float]) -> float:
    return r[0] * r[0] + r[1] * r[1]


def _newton_step(plan: Plan, base: Profile, x, r, obs: Observed) -> tuple[float, float] | None:
    """The Gauss-Newton step from x (forward differences), or None when the Jacobian is singular."""
    cols = []
    for i in range(2):
        xi = tuple(v + (STEP if j == i else 0.0) for j, v in enumerate(x))
        ri = _residuals(plan, base, xi, obs)
        cols.append(((ri[0] - r[0]) / STEP, (ri[1] - r[1]) / STEP))
    (a, c), (b, d) = cols                  # J = [[a, b], [c, d]]
    det = a * d - b * c
    if abs(det) < 1e-9:
        return None
    dx = ((-r[0] * d + b * r[1]) / det, (c * r[0] - a * r[1]) / det)
    return tuple(max(-MAX_MOVE, min(MAX_MOVE, v)) for v in dx)


def solve(plan: Plan, base: Profile, obs: Observed) -> tuple[tuple[float, float], int]:
    """Damped Gauss-Newton in log space from the base profile: a step is taken only if it lowers
    the squared log error (else halved, at most HALVINGS times). The simulated figures move in
    small jumps as events reorder, so it stops at TOLERANCE rather than chasing that noise."""
    x = (math.log(eff.prefill_efficiency(base)), math.log(eff.decode_factor(base)))
    r = _residuals(plan, base, x, obs)
    iterations = 0
    while max(abs(v) for v in r) > TOLERANCE and iterations < MAX_ITERATIONS:
        iterations += 1
        dx = _newton_step(plan, base, x, r, obs)
        if dx is None:
            break
        for _ in range(HALVINGS):
            xn = (x[0] + dx[0], x[1] + dx[1])
            rn = _residuals(plan, base, xn, obs)
            if _norm(rn) < _norm(r):
                break
            dx = (dx[0] / 2, dx[1] / 2)
        else:
            break                          # no step lowers the error: x is as good as the noise allows
        x, r = xn, rn
    return x, iterations


def fit(plan: Plan, base: Profile, obs: Observed, name: str, source: str) -> Fit:
    x, iterations = solve(plan, base, obs)
    prefill, decode = round(math.exp(x[0]), 4), round(math.exp(x[1]), 4)
    description = (f"Fitted by llmserve calibrate to {source} ({obs.replicas} replicas at "
                   f"{obs.qps_per_replica:.2f} QPS each, {obs.input_tokens} in / {obs.output_tokens} out): "
                   f"mean TPOT {1e3 * obs.tpot_mean_s:.2f} ms, mean prefill {1e3 * obs.prefill_mean_s:.1f} ms.")
    profile = eff.with_efficiencies(base, prefill, decode, name=name, description=description)
    predicted = predict(plan, profile, obs)
    rms = math.sqrt(sum(math.log(p / o) ** 2 for p, o in zip(predicted, (obs.tpot_mean_s, obs.prefill_mean_s))) / 2)
    return Fit(profile, base, obs, predicted, rms, iterations)


# -- the profile file and the plan under it -----------------------------------------------------
def read_profiles_file(path: Path) -> tuple[str, dict]:
    """(leading comments, document) of a profiles YAML file: a regular file of at most
    MAX_PROFILES_BYTES holding a map whose `profiles` is a map (read before any work is done)."""
    try:
        text = read_text(path, MAX_PROFILES_BYTES, "profiles YAML file")
        doc = safe_yaml.load(text, str(path))
    except InputError as exc:
        raise CalibrationError(str(exc)) from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles", {}), dict):
        raise CalibrationError(f"{path}: not a profiles file (a YAML map with a `profiles:` map of named profiles)")
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    return header, doc


def write_profile(path: Path, profile: Profile) -> None:
    """Add (or replace) the profile in a profiles YAML file, keeping its leading comments."""
    header, doc = read_profiles_file(path)
    doc.setdefault("profiles", {})[profile.name] = eff.profile_fields(profile)
    write_text_atomically(path, header + yaml.safe_dump(doc, sort_keys=False))
    load_profiles.cache_clear()


@contextmanager
def selectable(profile: Profile):
    """The profile selectable by name while the block runs, without touching any file."""
    profiles = load_profiles()
    before = profiles.get(profile.name)
    profiles[profile.name] = profile
    try:
        yield
    finally:
        if before is None:
            profiles.pop(profile.name, None)
        else:
            profiles[profile.name] = before


def plan_under(request: PlanRequest, profile: Profile) -> Plan:
    with selectable(profile):
        p = make_plan(replace(request, profile=profile.name))
        p.engine_args           # computed (and cached) while the profile is selectable
        return p
