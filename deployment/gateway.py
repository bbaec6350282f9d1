"""The gateway as deployment data: proxy and picker counts, per-key quotas, route timeouts and
circuit limits, each from the plan's capacity and SLOs.

Pure Python (no Pulumi): components/gateway.py, components/endpoint_picker.py, the accuracy gate
and monitoring read these figures from here, never from each other.
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from conventions import LABEL_APP_NAME, LABEL_ROLE, SERVICE_CIDR
from settings import StackSettings
from settings.schema import GATE_KEY_NAME, GatewaySettings
from sizing.planner import Plan

from .drain import longest_request_s


MIN_PROXY_REPLICAS = 2
RATE_UNITS = (("Second", 1), ("Minute", 60), ("Hour", 3600))
ROUNDING_KEPT = 0.95                    # a unit is fine enough when flooring keeps 95% of the share

# The accuracy gate's own key takes the headroom the tenants leave (1 - gateway.rateLimitShare of
# the capacity after a zone loss: 10%, 1.6 QPS in prod): never a tenant's quota, and the sum of
# all keys stays within that capacity.
# In the static band of the Service CIDR (the first 256 addresses of a /16, which the API server
# hands out only when asked for by name, KEP-3070), clear of kubernetes (.1) and kube-dns (.10).
GATEWAY_CLUSTER_IP = str(ipaddress.ip_network(SERVICE_CIDR)[100])


# -- figures derived from the plan (pure) ----------------------------------------------------
def proxy_replicas(zones: int) -> int:
    return max(MIN_PROXY_REPLICAS, zones)


@dataclass(frozen=True)
class RateLimit:
    requests: int      # per key, per proxy, per unit
    unit: str
    unit_s: int

    def total_qps(self, keys: int, proxies: int) -> float:
        return self.requests * keys * proxies / self.unit_s


def quota_capacity_qps(plan: Plan) -> float:
    """What the quotas share out: the capacity left after the worst zone loss, so that N+1 holds
    under full quota. A layout that keeps nothing after a loss (an overridden replica count) is
    metered on what it has; the guard policies reject it, the gateway does not hide it."""
    return plan.capacity_after_zone_loss_qps if plan.capacity_after_zone_loss_qps > 0 else plan.capacity_qps


def per_key_rate_limit(capacity_qps: float, share: float, keys: int, proxies: int) -> RateLimit:
    """Each key's local bucket: an equal part of `share` of the capacity, split over the
    proxies, floored to whole requests in the finest unit that keeps >= 95% of it."""
    per_key_qps = capacity_qps * share / (keys * proxies)
    for unit, seconds in RATE_UNITS:
        requests = math.floor(per_key_qps * seconds)
        if requests >= 1 and requests >= ROUNDING_KEPT * per_key_qps * seconds:
            return RateLimit(requests, unit, seconds)
    requests = math.floor(per_key_qps * RATE_UNITS[-1][1])
    if requests < 1:
        raise ValueError(f"capacity {capacity_qps:.3g} QPS leaves each of {keys} keys less than one request "
                         f"an hour per proxy; use fewer keys")
    return RateLimit(requests, *RATE_UNITS[-1])


def quota_shares(share: float, gate_on: bool) -> tuple[float, float]:
    """(the tenants' part, the accuracy gate's part) of the capacity the quotas share out: tenants
    keep `share` (gateway.rateLimitShare); the gate, while on, takes the rest (settings keep it >= 5%)."""
    return (share, 1.0 - share) if gate_on else (share, 0.0)


def gate_rate_limit(plan: Plan, share: float, proxies: int) -> RateLimit:
    """The accuracy gate's bucket per proxy: the headroom the tenants' `share` leaves."""
    return per_key_rate_limit(quota_capacity_qps(plan), quota_shares(share, True)[1], 1, proxies)


def load_test_rate_limit(plan: Plan, proxies: int) -> RateLimit:
    """The load-test key's bucket per proxy: the whole fleet's capacity (the sweep's top rate),
    since its connections may not spread evenly over the proxies."""
    return RateLimit(max(1, math.ceil(plan.capacity_qps * 60)), "Minute", 60)


@dataclass(frozen=True)
class RouteTimeouts:
    request: str
    backend_request: str
    connect: str


def route_timeouts(plan: Plan) -> RouteTimeouts:
    """The backend gets the longest request a replica accepts at the SLOs; the client's deadline
    leaves room for one retry; a connect must fail fast enough that a retry still meets TTFT."""
    longest = math.ceil(longest_request_s(plan))
    connect_ms = max(1, int(plan.request.workload.ttft_slo_s * 1000 / 4))
    return RouteTimeouts(f"{2 * longest}s", f"{longest}s", f"{connect_ms}ms")


def circuit_limits(plan: Plan, proxies: int) -> dict:
    """Per proxy: its share of what the fleet can hold in flight (max_num_seqs per replica);
    beyond that Envoy answers 503 at once instead of queueing in front of full engines."""
    in_flight = math.ceil(plan.replicas * plan.engine_args.max_num_seqs / proxies)
    return {"maxConnections": in_flight, "maxParallelRequests": in_flight, "maxPendingRequests": in_flight,
            "maxParallelRetries": max(1, plan.replicas)}


MIN_PICKER_REPLICAS = 2
PICKER_LABELS = {LABEL_APP_NAME: "endpoint-picker", LABEL_ROLE: "gateway"}


def picker_replicas(zones: int) -> int:
    """One per zone, never fewer than two: a zone loss or a node drain leaves one answering."""
    return max(MIN_PICKER_REPLICAS, zones)


@dataclass(frozen=True)
class GatewaySpec:
    """Everything components/gateway.py (and its endpoint picker) builds, from the plan and the
    stack's gateway settings."""
    settings: GatewaySettings                 # hostname, key names, quota share, TLS, DNS, inference extension
    allowed_cidrs: tuple[str, ...]            # who may reach the load balancer
    proxies: int
    pickers: int
    tenant_rate_limit: RateLimit              # each tenant key's bucket per proxy
    rate_limits: dict[str, RateLimit]         # every metered key (tenants, the gate's, the load test's): its bucket
    gate_key: str | None                      # the accuracy gate's key name, while the gate is on
    timeouts: RouteTimeouts
    circuit_limits: dict
    quota_budget_qps: float                   # what all quotas may sum to (the guard policy's annotation)
    prefix_aware: bool                        # the plan counts on per-conversation prefix reuse (picker scorer)
    vpc_cidr: str                             # network.vpcCidr: the picker reaches the API server there


def gateway_spec(plan: Plan, settings: StackSettings) -> GatewaySpec:
    gw, gate_on = settings.gateway, settings.accuracy_gate_enabled
    proxies = proxy_replicas(len(settings.zones))
    capacity = quota_capacity_qps(plan)
    tenant = per_key_rate_limit(capacity, quota_shares(gw.rateLimitShare, gate_on)[0], len(gw.apiKeyNames), proxies)
    limits = {key: tenant for key in gw.apiKeyNames}
    if gate_on:      # the accuracy gate's own key (derived from the apiKeys secret), at its own share
        limits[GATE_KEY_NAME] = gate_rate_limit(plan, gw.rateLimitShare, proxies)
    if settings.loadTest.enabled:
        # While the load test is on, its key (LoadTestRun.key_name) may reach the sweep's top rate:
        # the test measures the engines, not the quota. Run it in staging or before prod takes
        # traffic; the other keys keep their shares.
        limits[gw.apiKeyNames[0]] = load_test_rate_limit(plan, proxies)
    return GatewaySpec(
        settings=gw, allowed_cidrs=tuple(settings.gatewayAllowedCidrs),
        proxies=proxies, pickers=picker_replicas(len(settings.zones)), tenant_rate_limit=tenant,
        rate_limits=limits, gate_key=GATE_KEY_NAME if gate_on else None, timeouts=route_timeouts(plan),
        circuit_limits=circuit_limits(plan, proxies),
        quota_budget_qps=capacity * sum(quota_shares(gw.rateLimitShare, gate_on)),
        prefix_aware=plan.request.workload.prefix_hit_fraction > 0, vpc_cidr=settings.network.vpcCidr)
