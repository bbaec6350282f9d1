"""A simulator run turned into what each replica's /metrics shows at any time of the run.

The simulator (`simulator.simulate`) runs the whole scenario first (it takes well under a
second); this module then lays its outcome on a time grid of `GRID_S` simulated seconds:

- gauges (requests running and waiting, KV-cache usage) are sampled at every routing decision,
  when the simulator has brought every replica up to that instant, and held until the next;
- counters and histograms are cumulative: each request adds to its replica's families when
  vLLM would count it (TTFT at the first token; the request-level histograms, success and
  preemptions when it finishes; prompt tokens when its prefill completes; generation tokens
  spread evenly from the first token to the last).

The inter-token-latency histogram gets each request's out - 1 gaps at its mean TPOT (the
simulator does not keep per-token times), and `iteration_tokens_total` stays empty (no
per-step record). A slowdown multiplies every step of the emulated replicas, which is how a
fleet slower than its plan is emulated.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, fields, replace

from simulator import SimConfig, SimResult, simulate
from simulator.cost import StepCost

from . import vllm_metrics as vm

GRID_S = 1.0     # simulated seconds between two states on the grid


@dataclass
class ReplicaTimeline:
    name: str                     # the simulator's replica name
    zone: str
    pod: str                      # the pod name the scrape labels it with
    up: list[bool]                # per grid point
    gauges: dict[str, list[float]]
    counters: dict[str, list[float]]                    # family (or family|label) -> cumulative
    histograms: dict[str, tuple[list[int], list]] = field(default_factory=dict)   # see _cumulative
    workers: int = 0              # a multi-node replica's worker pods (ready exactly while its leader is)
    families: tuple = ()          # families it serves beyond vLLM's own (speculative, NIXL: vllm_metrics)


@dataclass
class Timeline:
    config: SimConfig
    result: SimResult
    end_s: float                  # the last grid point's time
    replicas: list[ReplicaTimeline]
    offered: list[float]          # cumulative requests reaching the gateway
    answered_5xx: list[float]     # cumulative requests lost (the gateway answers 503)
    answered_2xx: list[float]

    def index(self, t: float) -> int:
        return max(0, min(int(t / GRID_S), len(self.offered) - 1))


def slowed(cost: StepCost, slowdown: float) -> StepCost:
    """Every step `slowdown` times longer, decode and prefill alike: every time coefficient of the
    step cost (a dataclass of seconds and seconds-per-unit, in numbers or tuples of them) scaled."""
    def scale(value):
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value * slowdown
        if isinstance(value, tuple):
            return tuple(scale(v) for v in value)
        return value
    return replace(cost, **{f.name: scale(getattr(cost, f.name)) for f in fields(cost) if f.init})


def pod_name(zone: str, i: int) -> str:
    """`vllm-<zone>-twin-<i>`: the Deployment is vllm-<zone>; the suffix marks an emulated pod."""
    return f"vllm-{zone}-twin-{i}"


def build(config: SimConfig, slowdown: float = 1.0) -> Timeline:
    if slowdown != 1.0:
        config = replace(config, cost=slowed(config.cost, slowdown))
    samples: list[tuple[float, list[tuple[bool, int, int, float]]]] = []

    def sample(t, reps, _chosen) -> None:
        samples.append((t, [(r.up, len(r.running), len(r.waiting), r.kv_used() / r.kv_cap) for r in reps]))

    result = simulate(config, on_route=sample)
    end = max(config.workload.duration_s, result.end_s)
    points = int(math.ceil(end / GRID_S)) + 1
    per_zone: dict[str, int] = {}
    reps = []
    for spec in config.replicas:
        i = per_zone.get(spec.zone, 0)
        per_zone[spec.zone] = i + 1
        reps.append(ReplicaTimeline(spec.name, spec.zone, pod_name(spec.zone, i), [True] * points,
                                    {}, {}, workers=max(0, len(spec.nodes) - 1)))
    _fill_gauges(reps, samples, config, points)
    _fill_requests(reps, result, points)
    if config.spec_draft_tokens > 0:
        fill_speculative(reps, result.requests, config.spec_draft_tokens, points)
    offered, fivexx, twoxx = ([0.0] * points for _ in range(3))
    for r in result.requests:
        _add(offered, r.arrival, 1.0)
        if r.lost:
            _add(fivexx, r.arrival, 1.0)
        elif r.t_done is not None:
            _add(twoxx, r.t_done, 1.0)
    for series in (offered, fivexx, twoxx):
        _accumulate(series)
    return Timeline(config, result, (points - 1) * GRID_S, reps, offered, fivexx, twoxx)


def _grid(t: float) -> int:
    """The first grid point at or after t: a count made at t shows from there on."""
    return int(math.ceil(t / GRID_S - 1e-9))


def _add(series: list[float], t: float, amount: float) -> None:
    i = _grid(t)
    if i < len(series):
        series[i] += amount


def _accumulate(series: list[float]) -> None:
    total = 0.0
    for i, v in enumerate(series):
        total += v
        series[i] = total


def _fill_gauges(reps: list[ReplicaTimeline], samples, config: SimConfig, points: int) -> None:
    times = [t for t, _ in samples]
    fail = config.failure
    # A replica down with its zone, or with one of its nodes (a multi-node group is down whole).
    lost = {spec.name for spec in config.replicas if fail is not None and fail.hits(spec)}
    for ri, rep in enumerate(reps):
        running, waiting, kv = [0.0] * points, [0.0] * points, [0.0] * points
        for k in range(points):
            t = k * GRID_S
            j = bisect.bisect_right(times, t) - 1
            if j >= 0:
                up, run, wait, usage = samples[j][1][ri]
                running[k], waiting[k], kv[k] = float(run), float(wait), usage
            if fail is not None and rep.name in lost and t >= fail.start_s and (
                    fail.end_s is None or t < fail.end_s):
                rep.up[k] = False
                running[k] = waiting[k] = kv[k] = 0.0
        rep.gauges = {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
                      "vllm:kv_cache_usage_perc": kv}


def request_observations(r) -> dict[str, list[tuple[float, float]]]:
    """family -> what one finished request observes, as (value, weight) pairs (`llmserve emulate`
    observes the same when a request ends)."""
    tpot = (r.t_done - r.t_first) / (r.out - 1) if r.out > 1 else None
    obs = {
        "vllm:e2e_request_latency_seconds": [(r.t_done - r.arrival, 1.0)],
        "vllm:request_queue_time_seconds": [(r.t_sched - r.arrival, 1.0)],
        "vllm:request_inference_time_seconds": [(r.t_done - r.t_sched, 1.0)],
        "vllm:request_prefill_time_seconds": [(r.t_first - r.t_sched, 1.0)],
        "vllm:request_decode_time_seconds": [(r.t_done - r.t_first, 1.0)],
        "vllm:request_prompt_tokens": [(float(r.prompt), 1.0)],
        "vllm:request_generation_tokens": [(float(r.out), 1.0)],
        "vllm:request_max_num_generation_tokens": [(float(r.out), 1.0)],
        "vllm:request_params_max_tokens": [(float(r.out), 1.0)],
        "vllm:request_params_n": [(1.0, 1.0)],
        "vllm:request_prefill_kv_computed_tokens": [(float(r.prompt), 1.0)],
    }
    if tpot is not None:
        obs["vllm:request_time_per_output_token_seconds"] = [(tpot, 1.0)]
        obs["vllm:inter_token_latency_seconds"] = [(tpot, float(r.out - 1))]
    return obs


def _fill_requests(reps: list[ReplicaTimeline], result: SimResult, points: int) -> None:
    families = vm.by_name()
    index = {rep.name: rep for rep in reps}
    counters = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                "vllm:request_success_total|length")
    inc = {rep.name: {c: [0.0] * points for c in counters} for rep in reps}
    # per replica, family -> per grid point: (bucket increments, sum increment)
    hist = {rep.name: {} for rep in reps}
    for r in result.requests:
        if r.lost or r.t_done is None:
            continue
        c = inc[r.replica]
        _add(c["vllm:prompt_tokens_total"], r.t_first, float(r.prompt))
        _spread(c["vllm:generation_tokens_total"], r.t_first, r.t_done, float(r.out))
        _add(c["vllm:num_preemptions_total"], r.t_done, float(r.preemptions))
        _add(c["vllm:request_success_total|length"], r.t_done, 1.0)
        _observe(hist[r.replica], families["vllm:time_to_first_token_seconds"], r.t_first,
                 r.t_first - r.arrival, 1.0, points)
        for name, pairs in request_observations(r).items():
            for value, weight in pairs:
                _observe(hist[r.replica], families[name], r.t_done, value, weight, points)
    for name, rep in index.items():
        for series in inc[name].values():
            _accumulate(series)
        rep.counters = inc[name]
        rep.histograms = {fam: _cumulative(rows) for fam, rows in hist[name].items()}


SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED = (f.name for f in vm.SPEC_DECODE_FAMILIES)


def fill_speculative(reps: list[ReplicaTimeline], requests, draft_tokens: int, points: int) -> None:
    """vLLM's spec-decode counters, each request's when it finishes: one draft per sequence and
    verify step, k draft tokens in each, and the drafts its steps accepted (`Request.spec_accepted`)."""
    index = {rep.name: rep for rep in reps}
    inc = {rep.name: {c: [0.0] * points for c in (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED)} for rep in reps}
    for r in requests:
        if r.lost or r.t_done is None or r.replica not in inc or r.out <= 1:
            continue
        steps = float(r.finish - r.k0)
        c = inc[r.replica]
        _add(c[SPEC_DRAFTS], r.t_done, steps)
        _add(c[SPEC_DRAFT_TOKENS], r.t_done, steps * draft_tokens)
        _add(c[SPEC_ACCEPTED], r.t_done, float(r.spec_accepted))
    for name, rep in index.items():
        for key, series in inc[name].items():
            _accumulate(series)
            rep.counters[key] = series
        rep.families = tuple(rep.families) + vm.SPEC_DECODE_FAMILIES


def _spread(series: list[float], t0: float, t1: float, amount: float) -> None:
    """One token at t0, the rest evenly over (t0, t1]."""
    _add(series, t0, 1.0)
    rest = amount - 1.0
    if rest <= 0:
        return
    i0, i1 = _grid(t0), _grid(t1)
    if i1 <= i0:
        _add(series, t1, rest)
        return
    span = t1 - t0
    for i in range(i0, i1 + 1):
        lo, hi = max(t0, (i - 1) * GRID_S), min(t1, i * GRID_S)
        if hi > lo and i < len(series):
            series[i] += rest * (hi - lo) / span


def _observe(rows: dict, family: vm.Family, t: float, value: float, weight: float, points: int) -> None:
    i = _grid(t)
    if i >= points:
        return
    per = rows.setdefault(family.name, {})
    row = per.get(i)
    if row is None:
        row = per[i] = ([0.0] * (len(family.buckets) + 1), [0.0])
    b = bisect.bisect_left(family.buckets, value)      # the first bound >= value (le is inclusive)
    row[0][b] += weight
    row[1][0] += value * weight


def _cumulative(per_point: dict) -> tuple[list[int], list[tuple[list[float], float]]]:
    """The grid points where a family changed, and there (counts per bucket, sum) so far."""
    out = []
    counts: list[float] | None = None
    total = 0.0
    for i in sorted(per_point):
        incs, s = per_point[i]
        counts = list(incs) if counts is None else [a + b for a, b in zip(counts, incs)]
        total += s[0]
        out.append((counts, total))
    return sorted(per_point), out


def histogram_at(rep: ReplicaTimeline, family: vm.Family, k: int, per: float = 1.0) -> vm.Histogram:
    empty = vm.Histogram([0.0] * (len(family.buckets) + 1), 0.0, 0.0)
    if family.name not in rep.histograms:
        return empty
    points, rows = rep.histograms[family.name]
    j = bisect.bisect_right(points, k) - 1
    if j < 0:
        return empty
    counts, total = rows[j]
    cumulative, running = [], 0.0
    for c in counts:
        running += c
        cumulative.append(running / per)
    return vm.Histogram(cumulative, total / per, running / per)


def values_at(rep: ReplicaTimeline, k: int, per: float = 1.0) -> dict:
    """What the replica's /metrics shows at grid point k (the input of `vllm_metrics.render`).

    Counts (counters, histogram buckets, sums and counts) are divided by `per`, the clock scale
    of an accelerated twin: rate() over wall-clock seconds then reads per simulated second, so
    the rules' QPS thresholds apply unchanged, and quantiles and means (ratios) are unaffected.
    """
    out: dict = {name: series[k] for name, series in rep.gauges.items()}
    waiting = rep.gauges["vllm:num_requests_waiting"][k]
    out["vllm:num_requests_waiting_by_reason"] = {"capacity": waiting, "deferred": 0.0}
    out["vllm:engine_sleep_state"] = {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    for key, series in rep.counters.items():
        name, _, label = key.partition("|")
        if label:
            out.setdefault(name, {})[label] = series[k] / per
        else:
            out[name] = series[k] / per
    prompt = out.get("vllm:prompt_tokens_total", 0.0)
    out["vllm:prompt_tokens_by_source_total"] = {"local_compute": prompt}
    for fam in vm.FAMILIES + tuple(rep.families):
        if fam.kind == "histogram":
            out[fam.name] = histogram_at(rep, fam, k, per)
    return out
