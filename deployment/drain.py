"""Drain timing, sized in one place from the plan: the pods' grace period, vLLM's drain, the
kubelet's shutdown grace on the GPU nodes and the gateway's request timeouts all read it.

Pure Python (no Pulumi), part of the deployment spec (deployment/spec.py): the serving stack, the
GPU node pool and the gateway read it from there. A disaggregated plan drains each pool on its own
figure (`pool_longest_request_s`): a prefill pod holds a request for its prompt and the KV lease, a
decode pod for the whole generation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sizing.planner import Plan

ENDPOINT_PROPAGATION_S = 10     # endpoint removal reaching every Envoy and the picker (EDS + watch)
EXIT_MARGIN_S = 5               # process teardown and GPU release after vLLM's drain ends
CRITICAL_PODS_S = 15            # kubelet's share of a node shutdown kept for critical (system) pods


def longest_request_s(plan: Plan) -> float:
    """The longest request a replica accepts, at the SLOs: the TTFT SLO plus every token the
    context allows (`max_model_len`) at the TPOT SLO. Drain and gateway timeouts both use it."""
    w = plan.request.workload
    return w.ttft_slo_s + plan.engine_args.max_model_len * w.tpot_slo_s


def pool_longest_request_s(plan: Plan, role: str) -> float:
    """The longest a replica of `role` holds a request. Decode (and aggregated): the whole generation
    (deployment.drain.longest_request_s). Prefill: the prompt within the TTFT SLO, then its KV held
    until the decode pulls it, at most the plan's lease; no generation runs there."""
    if role != "prefill":
        return longest_request_s(plan)
    lease = plan.kv_transfer.kv_lease_s if plan.kv_transfer is not None else 0.0
    return plan.request.workload.ttft_slo_s + lease


@dataclass(frozen=True)
class DrainTiming:
    pre_stop_s: int           # keep serving while endpoint removal propagates
    shutdown_timeout_s: int   # vLLM --shutdown-timeout: finish in-flight requests after SIGTERM
    grace_period_s: int       # terminationGracePeriodSeconds

    @property
    def holds(self) -> bool:
        return self.pre_stop_s + self.shutdown_timeout_s < self.grace_period_s


def drain_timing(longest_s: float) -> DrainTiming:
    """The one place the drain is sized: preStop, then vLLM's drain, inside the grace period."""
    shutdown = math.ceil(longest_s)
    return DrainTiming(ENDPOINT_PROPAGATION_S, shutdown, ENDPOINT_PROPAGATION_S + shutdown + EXIT_MARGIN_S)


def node_shutdown_grace_s(timing: DrainTiming) -> int:
    """The kubelet's shutdownGracePeriod: a serving pod's whole grace period, plus the critical
    pods' share, so a node stop (repair, a capacity block ending) drains like an eviction."""
    return timing.grace_period_s + CRITICAL_PODS_S
