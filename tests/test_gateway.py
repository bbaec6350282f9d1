"""The gateway: auth on every route, quotas within capacity, SLO timeouts, safe retries, routing."""
from __future__ import annotations

import math

import pytest

from deployment.gateway import picker_replicas
from components.gateway import CLIENT_ID_HEADER, check_key_names
from deployment.gateway import per_key_rate_limit, proxy_replicas, quota_capacity_qps, route_timeouts
from deployment.drain import drain_timing, longest_request_s
from offline.engine import is_secret
from tests.stacks import plan_for

CR = "kubernetes:{}"
ROUTE = CR.format("gateway.networking.k8s.io/v1:HTTPRoute")
GATEWAY = CR.format("gateway.networking.k8s.io/v1:Gateway")
SECURITY = CR.format("gateway.envoyproxy.io/v1alpha1:SecurityPolicy")
TRAFFIC = CR.format("gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy")
POOL = CR.format("inference.networking.k8s.io/v1:InferencePool")


def one(recording, type_: str) -> dict:
    (r,) = recording.of_type(type_)
    return r.inputs


# -- auth ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_every_route_requires_an_api_key(recorded, stack):
    recording = recorded(stack)
    protected = {(p["spec"]["targetRefs"][0]["kind"], p["spec"]["targetRefs"][0]["name"])
                 for p in (r.inputs for r in recording.of_type(SECURITY)) if "apiKeyAuth" in p["spec"]}
    routes = recording.of_type(ROUTE)
    assert routes
    for route in routes:
        for parent in route.inputs["spec"]["parentRefs"]:
            assert ("Gateway", parent["name"]) in protected, route.name


def test_api_keys_come_from_a_secret_and_name_the_client(recorded):
    recording = recorded("prod")
    auth = one(recording, SECURITY)["spec"]["apiKeyAuth"]
    (ref,) = auth["credentialRefs"]
    secret = next(r.inputs for r in recording.of_type("kubernetes:core/v1:Secret")
                  if r.inputs["metadata"]["name"] == ref["name"])
    assert is_secret(secret["stringData"])
    assert auth["extractFrom"] == [{"headers": ["authorization"]}]
    assert auth["forwardClientIDHeader"] == CLIENT_ID_HEADER


SET_IT = "set it with `pulumi config set --secret apiKeys '{\"<name>\": \"<key>\", ...}'`"


@pytest.mark.parametrize("text,names,message", [
    ('{"a": "SENTINEL-1"}', ("a", "b"),
     "secret apiKeys has no key for b; make its names exactly gateway.apiKeyNames (a, b)"),
    ('{"a": "SENTINEL-1", "SENTINEL-2": "SENTINEL-3"}', ("a",),
     "secret apiKeys holds 1 entry not in gateway.apiKeyNames; make its names exactly gateway.apiKeyNames (a)"),
    ('{"SENTINEL-2": "a"}', ("a",), "secret apiKeys has no key for a and holds 1 entry not in gateway.apiKeyNames; "
                                    "make its names exactly gateway.apiKeyNames (a)"),
    ("SENTINEL-plain", ("a",), f"secret apiKeys is not JSON; {SET_IT}"),
    ('["SENTINEL-1"]', ("a",), f"secret apiKeys is not a JSON object of non-empty string keys; {SET_IT}"),
    ('{"a": 7}', ("a",), f"secret apiKeys is not a JSON object of non-empty string keys; {SET_IT}"),
])
def test_a_key_without_a_quota_is_refused_without_quoting_the_secret(text, names, message):
    with pytest.raises(ValueError) as exc:
        check_key_names(text, names)
    assert str(exc.value) == message
    assert "SENTINEL" not in str(exc.value)


def test_gateway_listens_on_https_only(recorded):
    listeners = one(recorded("prod"), GATEWAY)["spec"]["listeners"]
    assert [(l["protocol"], int(l["port"]), l["tls"]["mode"]) for l in listeners] == [("HTTPS", 443, "Terminate")]


def test_the_listener_serves_the_certificate_the_stack_issues(recorded):
    recording = recorded("prod")
    listener = one(recording, GATEWAY)["spec"]["listeners"][0]
    certificate = one(recording, CR.format("cert-manager.io/v1:Certificate"))
    assert listener["tls"]["certificateRefs"] == [{"kind": "Secret", "name": certificate["spec"]["secretName"]}]
    assert certificate["spec"]["dnsNames"] == [listener["hostname"]]
    assert certificate["metadata"]["namespace"] == one(recording, GATEWAY)["metadata"]["namespace"]


# -- quotas --------------------------------------------------------------------------------
@pytest.mark.parametrize("capacity,share,keys,proxies", [
    (15.9368, 0.9, 2, 2), (15.9368, 0.9, 1, 2), (5.83, 0.9, 1, 2), (5.47, 0.5, 3, 2),
    (100.0, 1.0, 16, 3), (0.5, 0.9, 4, 6), (1000.0, 0.9, 7, 2),
])
def test_the_sum_of_key_limits_never_exceeds_capacity(capacity, share, keys, proxies):
    limit = per_key_rate_limit(capacity, share, keys, proxies)
    assert limit.requests >= 1
    assert limit.total_qps(keys, proxies) <= capacity * share
    assert limit.total_qps(keys, proxies) >= 0.95 * capacity * share or limit.unit == "Hour"


@pytest.mark.parametrize("stack,gateway", [
    ("prod", None), ("staging", None), ("dev", None),
    ("prod", {"hostname": "llm.example.com", "hostedZoneId": "Z0EXAMPLE00000000000", "acmeEmail": "ops@example.com",
              "apiKeyNames": ["a", "b", "c", "d", "e"], "rateLimitShare": 0.5}),
])
def test_recorded_quotas_fit_the_capacity_after_a_zone_loss(recorded, stack, gateway):
    overrides = {"gateway": gateway} if gateway else None
    settings, plan = plan_for(stack, overrides)
    recording = recorded(stack, overrides)
    rules = one(recording, TRAFFIC)["spec"]["rateLimit"]["local"]["rules"]
    seconds = {"Second": 1, "Minute": 60, "Hour": 3600}
    proxies = int(one(recording, CR.format("gateway.envoyproxy.io/v1alpha1:EnvoyProxy"))
                  ["spec"]["provider"]["kubernetes"]["envoyDeployment"]["replicas"])
    per_key = {r["clientSelectors"][0]["headers"][0]["value"]: r["limit"]["requests"] / seconds[r["limit"]["unit"]]
               * proxies for r in rules}
    tenants_qps = sum(per_key[k] for k in settings.gateway.apiKeyNames)
    # The tenants share rateLimitShare of it; the accuracy gate's own key takes the rest, never more.
    assert tenants_qps <= quota_capacity_qps(plan) * settings.gateway.rateLimitShare
    assert sum(per_key.values()) <= quota_capacity_qps(plan) <= plan.capacity_qps
    if plan.redundancy == "zone":
        assert quota_capacity_qps(plan) == plan.capacity_after_zone_loss_qps
    # The tenants' keys, then the accuracy gate's own (on by default in staging and prod).
    gate = ["accuracy-gate"] if settings.accuracy_gate_enabled else []
    assert [r["clientSelectors"][0]["headers"][0]["value"] for r in rules] == [*settings.gateway.apiKeyNames, *gate]
    assert all(r["shared"] for r in rules)


def test_load_test_key_may_reach_the_sweeps_top_while_the_others_keep_their_shares(recorded):
    overrides = {"loadTest": {"enabled": True}}
    settings, plan = plan_for("prod", overrides)
    rules = one(recorded("prod", overrides), TRAFFIC)["spec"]["rateLimit"]["local"]["rules"]
    seconds = {"Second": 1, "Minute": 60, "Hour": 3600}
    per_proxy = {r["clientSelectors"][0]["headers"][0]["value"]: r["limit"]["requests"] / seconds[r["limit"]["unit"]]
                 for r in rules}
    load_key, *clients = [*settings.gateway.apiKeyNames, "accuracy-gate"]
    assert per_proxy[load_key] >= plan.capacity_qps                  # the sweep's top rate, on any one proxy
    proxies = 2
    assert sum(per_proxy[k] for k in clients) * proxies <= plan.capacity_after_zone_loss_qps * settings.gateway.rateLimitShare


# -- timeouts, retries, circuit breaking ---------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_timeouts_follow_the_slos(recorded, stack):
    _, plan = plan_for(stack)
    longest = longest_request_s(plan)
    recording = recorded(stack)
    timeouts = one(recording, ROUTE)["spec"]["rules"][0]["timeouts"]
    assert timeouts == {"request": route_timeouts(plan).request, "backendRequest": route_timeouts(plan).backend_request}
    assert int(timeouts["backendRequest"].rstrip("s")) == math.ceil(longest)
    assert int(timeouts["request"].rstrip("s")) >= 2 * longest
    # The replica drains exactly the requests the gateway lets run.
    assert drain_timing(longest).shutdown_timeout_s == int(timeouts["backendRequest"].rstrip("s"))
    connect = one(recording, TRAFFIC)["spec"]["timeout"]["tcp"]["connectTimeout"]
    assert int(connect.rstrip("ms")) * 2 < plan.request.workload.ttft_slo_s * 1000


def test_retries_only_on_connect_failure_and_503(recorded):
    retry = one(recorded("prod"), TRAFFIC)["spec"]["retry"]
    assert sorted(retry["retryOn"]["triggers"]) == ["connect-failure", "retriable-status-codes"]
    assert retry["retryOn"]["httpStatusCodes"] == [503]


def test_circuit_breaking_holds_what_the_engines_can(recorded):
    _, plan = plan_for("prod")
    recording = recorded("prod")
    breaker = one(recording, TRAFFIC)["spec"]["circuitBreaker"]
    proxies = proxy_replicas(2)
    assert int(breaker["maxParallelRequests"]) * proxies >= plan.replicas * plan.engine_args.max_num_seqs
    assert int(breaker["maxParallelRequests"]) * proxies < (plan.replicas * plan.engine_args.max_num_seqs) + proxies


# -- load-aware routing --------------------------------------------------------------------
def test_the_route_goes_to_the_inference_pool_whose_picker_fails_closed_as_the_proxy_does(recorded):
    recording = recorded("prod")
    (backend,) = one(recording, ROUTE)["spec"]["rules"][0]["backendRefs"]
    pool = one(recording, POOL)
    assert (backend["group"], backend["kind"], backend["name"]) == \
        ("inference.networking.k8s.io", "InferencePool", pool["metadata"]["name"])
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"
    assert pool["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm", "llm-serving.io/role": "serving"}
    assert "loadBalancer" not in one(recording, TRAFFIC)["spec"]


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_the_picker_runs_two_or_more_replicas_across_zones_with_a_pdb(recorded, stack):
    settings, _ = plan_for(stack)
    recording = recorded(stack)
    picker = recording.named("llm-gateway-picker-deploy").inputs
    assert int(picker["spec"]["replicas"]) == picker_replicas(len(settings.zones)) >= 2
    keys = {(c["topologyKey"], c["whenUnsatisfiable"]) for c in picker["spec"]["template"]["spec"]["topologySpreadConstraints"]}
    assert ("topology.kubernetes.io/zone", "DoNotSchedule") in keys
    pdb = recording.named("llm-gateway-picker-pdb").inputs["spec"]
    assert int(pdb["minAvailable"]) == 1 < int(picker["spec"]["replicas"])
    config = recording.named("llm-gateway-picker-config").inputs["data"]["scorers.yaml"]
    assert "queue-scorer" in config and "kv-cache-utilization-scorer" in config


def test_without_the_extension_envoy_balances_by_least_request(recorded):
    recording = recorded("dev")       # dev turns the inference extension off
    (backend,) = one(recording, ROUTE)["spec"]["rules"][0]["backendRefs"]
    assert (backend["kind"], backend["name"], int(backend["port"])) == ("Service", "vllm", 8000)
    assert one(recording, TRAFFIC)["spec"]["loadBalancer"] == {"type": "LeastRequest"}
    assert recording.of_type(POOL) == []


def test_gateway_pods_run_on_system_nodes_across_zones(recorded):
    recording = recorded("prod")
    pod = one(recording, CR.format("gateway.envoyproxy.io/v1alpha1:EnvoyProxy"))["spec"]["provider"]["kubernetes"][
        "envoyDeployment"]["pod"]
    assert pod["nodeSelector"] == {"llm-serving.io/role": "system"}
    assert "topology.kubernetes.io/zone" in {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    controller = recording.named("llm-gateway-envoy-gateway").inputs
    assert controller["version"] == "v1.8.3"     # Envoy AI Gateway v1.0.x is tested on EG v1.8.1+ (docs/gateway-versions.md)
    assert controller["values"]["deployment"]["pod"]["nodeSelector"] == {"llm-serving.io/role": "system"}


def test_api_key_placeholder_names_match_the_quota_keys(recorded):
    from offline.engine import unwrap

    recording = recorded("prod")
    keys = unwrap(recording.named("llm-gateway-api-keys").inputs["stringData"])
    rules = one(recording, TRAFFIC)["spec"]["rateLimit"]["local"]["rules"]
    assert sorted(keys) == sorted(r["clientSelectors"][0]["headers"][0]["value"] for r in rules)


def test_the_picker_reaches_the_api_server_and_its_pods_only(recorded):
    """The picker's HTTPS goes to the `kubernetes` Service address or the cluster's private subnets
    (where EKS puts the control plane's private endpoint), never the internet or the rest of the VPC."""
    rec = recorded("prod")
    (egress,) = [r.inputs["spec"] for r in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                 if r.inputs["metadata"]["name"] == "epp-egress"]
    https = next(rule for rule in egress["egress"] if rule["ports"] == [{"protocol": "TCP", "port": 443}])
    assert https["to"] == [{"ipBlock": {"cidr": "172.20.0.1/32"}}, {"ipBlock": {"cidr": "10.40.0.0/19"}},
                           {"ipBlock": {"cidr": "10.40.32.0/19"}}]      # us-east-1a, us-east-1b
