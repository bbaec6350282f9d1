"""Queueing approximations for the tails the averages miss.

- Prefill: an M/D/1 queue of prompt work (Poisson arrivals, each prompt a deterministic amount
  of chunked-prefill work) at utilisation rho. Mean wait (Pollaczek-Khinchine) rho D / (2 (1 - rho));
  its tail is taken as exponential past the probability of waiting: P(W > t) = rho exp(-t rho / Wq).
- KV admission: an M/M/c queue with c = the sequences that fit in the KV cache (Erlang C), the
  service time being a request's whole stay. Same exponential tail.
- The number of sequences alongside a request: Poisson with the Little's-law mean (M/G/inf).

Statistics are named as the SLOs name them: `mean`, `p50`, `p90`, `p95`, `p99`.
"""
from __future__ import annotations

import math

STATISTICS = ("mean", "p50", "p90", "p95", "p99")
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
Z = {0.50: 0.0, 0.90: 1.2815515655446004, 0.95: 1.6448536269514722, 0.99: 2.3263478740408408}


def md1_wait(rho: float, service_s: float, q: float = 0.95) -> tuple[float, float]:
    """(mean, q-quantile) wait of an M/D/1 queue at utilisation rho."""
    if rho <= 0:
        return 0.0, 0.0
    if rho >= 1:
        return math.inf, math.inf
    mean = rho * service_s / (2 * (1 - rho))
    return mean, exp_tail_quantile(rho, mean / rho, q)


def erlang_c_wait(servers: int, offered: float, service_s: float, q: float = 0.95) -> tuple[float, float]:
    """(mean, q-quantile) wait of an M/M/c queue with `offered` = arrival rate x service time."""
    if offered <= 0:
        return 0.0, 0.0
    if offered >= servers:
        return math.inf, math.inf
    if offered < 0.5 * servers - 6 * math.sqrt(servers):
        return 0.0, 0.0        # P(wait) below 1e-9: skip the O(servers) recursion
    # Erlang B by the stable recursion, then Erlang C from it.
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    p_wait = servers * b / (servers - offered * (1 - b))
    rate = (servers - offered) / service_s   # the conditional wait is exponential at this rate
    return p_wait / rate, exp_tail_quantile(p_wait, 1 / rate, q)


def exp_tail_quantile(p_wait: float, mean_given_wait: float, q: float = 0.95) -> float:
    tail = 1 - q
    if p_wait <= tail:
        return 0.0
    return mean_given_wait * math.log(p_wait / tail)


def poisson_quantile(mean: float, q: float) -> float:
    """The q-quantile of a Poisson count (exact below a mean of 30, Cornish-Fisher above)."""
    if mean <= 0:
        return 0.0
    if mean > 30:
        z = Z[q]
        return float(max(mean, math.ceil(mean + z * math.sqrt(mean) + (z * z - 1) / 6 - 1e-9)))
    k, pmf = 0, math.exp(-mean)
    cdf = pmf
    while cdf < q:
        k += 1
        pmf *= mean / k
        cdf += pmf
    return float(max(k, mean))


def md1_wait_quantile(rho: float, service_s: float, q: float) -> float:
    """The q-quantile of the M/D/1 wait, from its two regimes, whichever is longer:
    - light load: at most the one prompt in service is ahead, P(W > t) = rho (1 - t / D);
    - the tail: P(W > t) ~ rho exp(-g t), g the decay rate of the M/D/1 queue (Cramer-Lundberg:
      rho (exp(g D) - 1) = g D), lighter than the exponential with the mean's scale."""
    tail = 1 - q
    if rho <= tail or service_s <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    light = service_s * (1 - tail / rho)
    x = min(2 * (1 - rho) / rho, 2 * math.log(1 / rho) + 1)   # right of the root: Newton descends
    for _ in range(30):
        ex = rho * math.exp(x)
        step = (ex - rho - x) / (ex - 1)
        x -= step
        if step < 1e-6 * x:
            break
    return max(light, math.log(rho / tail) * service_s / x)


def poisson_quantile_smooth(mean: float, q: float) -> float:
    """A smooth q-quantile of a Poisson count (Cornish-Fisher, never below the mean): rises with
    the mean, so figures built on it do too."""
    if mean <= 0:
        return 0.0
    z = Z[q]
    return mean + max(0.0, z * math.sqrt(mean) + (z * z - 1) / 6)
