"""Queueing approximations for the tails the averages miss.

- Prefill: an M/D/1 queue (Poisson arrivals, a deterministic prefill of wall time D) whose
  utilisation is the prefill share u. Mean wait (Pollaczek-Khinchine) u D / (2 (1 - u)); its tail
  is taken as exponential past the probability of waiting: P(W > t) = u exp(-t u / Wq).
- KV admission: an M/M/c queue with c = the sequences that fit in the KV cache (Erlang C), the
  service time being a request's whole stay. Same exponential tail.
- The number of sequences alongside a request: Poisson with the Little's-law mean (M/G/inf).
"""
from __future__ import annotations

import math

P95_TAIL = 0.05


def md1_wait(rho: float, service_s: float) -> tuple[float, float]:
    """(mean, p95) wait of an M/D/1 queue at utilisation rho."""
    if rho <= 0:
        return 0.0, 0.0
    if rho >= 1:
        return math.inf, math.inf
    mean = rho * service_s / (2 * (1 - rho))
    return mean, _exp_tail_quantile(rho, mean / rho)


def erlang_c_wait(servers: int, offered: float, service_s: float) -> tuple[float, float]:
    """(mean, p95) wait of an M/M/c queue with `offered` = arrival rate x service time."""
    if offered <= 0:
        return 0.0, 0.0
    if offered >= servers:
        return math.inf, math.inf
    # Erlang B by the stable recursion, then Erlang C from it.
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    p_wait = servers * b / (servers - offered * (1 - b))
    rate = (servers - offered) / service_s   # the conditional wait is exponential at this rate
    return p_wait / rate, _exp_tail_quantile(p_wait, 1 / rate)


def _exp_tail_quantile(p_wait: float, mean_given_wait: float) -> float:
    if p_wait <= P95_TAIL:
        return 0.0
    return mean_given_wait * math.log(p_wait / P95_TAIL)


def poisson_quantile(mean: float, q: float) -> float:
    """The q-quantile of a Poisson count (exact below a mean of 400, normal above)."""
    if mean <= 0:
        return 0.0
    if mean > 400:
        return mean + 1.6448536269514722 * math.sqrt(mean)
    k, pmf = 0, math.exp(-mean)
    cdf = pmf
    while cdf < q:
        k += 1
        pmf *= mean / k
        cdf += pmf
    return float(max(k, mean))
