"""Least privilege for every pod the program defines itself (Helm charts configure their own):
the restricted Pod Security Standard, memory limits, tokens only where the API server is called,
no secret in an environment variable where the consumer reads a file, and egress denied by default."""
from __future__ import annotations

import ipaddress

import pytest

from offline.manifests import kubernetes_objects

WORKLOADS = ("Deployment", "Job", "DaemonSet", "StatefulSet")
# The one pod that calls the API server: the endpoint picker watches pods and its InferencePool.
API_CLIENTS = {"vllm-epp"}
# vLLM's compilers (torch inductor, Triton, FlashInfer JIT) write inside the image: its root stays writable.
WRITABLE_ROOT: set[str] = set()      # vLLM too: its caches are on volumes (components/serving.vllm_env)
# Consumers that read their key only from the environment (lm-eval's OPENAI_API_KEY, GuideLLM's settings).
ENV_ONLY_KEYS = {"OPENAI_API_KEY", "GUIDELLM__SPEC__BACKEND__API_KEY"}
METADATA = "169.254.0.0/16"


# prod with every optional workload on (the load test and, by default, the accuracy gate), and a
# stack whose replicas span nodes: its LeaderWorkerSets' leader and worker templates get every check
# a Deployment gets (Checkov reads Deployments' templates, not a custom resource's).
STACKS = {"prod": {"loadTest": {"enabled": True}}, "prod-multinode": None}
WORKLOADS_OF = {
    "prod": ["accuracy-gate-run", "load-test-run", "vllm-epp", "vllm-us-east-1a", "vllm-us-east-1b"],
    "prod-multinode": ["vllm-epp", "vllm-us-east-1a-p5-0/leader", "vllm-us-east-1a-p5-0/worker",
                       "vllm-us-east-1b-p5-0/leader", "vllm-us-east-1b-p5-0/worker"],
}


class StackObjects(list):
    """A stack's rendered objects, knowing which stack they are."""
    stack: str


@pytest.fixture(params=list(STACKS))
def objects(recorded, request):
    objs = StackObjects(kubernetes_objects(recorded(request.param, STACKS[request.param])))
    objs.stack = request.param
    return objs


@pytest.fixture
def prod_objects(recorded):
    return kubernetes_objects(recorded("prod", STACKS["prod"]))


def pods(objects):
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            for role in ("leader", "worker"):
                yield f"{obj['metadata']['name']}/{role}", template[f"{role}Template"]["spec"]


def containers(spec):
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_workload_of_ours_is_checked(objects):
    assert sorted(name for name, _ in pods(objects)) == WORKLOADS_OF[objects.stack]


def test_every_exec_probe_outlasts_its_own_command(objects):
    """The kubelet kills an exec probe at timeoutSeconds (default 1 s): at least 2 s, and more than
    any timeout the command sets itself (`timeout=N`)."""
    import re
    seen = 0
    for name, spec in pods(objects):
        for c in containers(spec):
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(kind, {})
                if "exec" not in probe:
                    continue
                seen += 1
                own = [float(t) for t in re.findall(r"timeout=(\d+(?:\.\d+)?)", " ".join(probe["exec"]["command"]))]
                assert probe.get("timeoutSeconds", 1) >= max([2.0, *[t + 1 for t in own]]), (name, c["name"], kind)
    assert seen or objects.stack == "prod"


def test_pods_run_as_non_root_with_the_default_seccomp_profile(objects):
    for name, spec in pods(objects):
        ctx = spec["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] > 0, name
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_containers_drop_every_privilege(objects):
    for name, spec in pods(objects):
        for c in containers(spec):
            ctx = c["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert ctx["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert ctx.get("privileged", False) is False, (name, c["name"])


def test_root_filesystems_are_read_only_except_where_the_process_writes_inside_its_image(objects):
    for name, spec in pods(objects):
        for c in containers(spec):
            assert c["securityContext"]["readOnlyRootFilesystem"] is (c["name"] not in WRITABLE_ROOT), (name, c["name"])
            if c["name"] not in WRITABLE_ROOT:      # somewhere to write: an emptyDir at /tmp
                assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), (name, c["name"])


def test_every_container_has_a_memory_limit(objects):
    for name, spec in pods(objects):
        for c in containers(spec):
            assert c["resources"]["limits"]["memory"], (name, c["name"])


def test_service_account_tokens_only_where_the_api_server_is_called(objects):
    for name, spec in pods(objects):
        assert spec["automountServiceAccountToken"] is (name in API_CLIENTS), name


def test_no_secret_in_the_environment_where_the_consumer_reads_a_file(objects):
    for name, spec in pods(objects):
        for c in containers(spec):
            from_secrets = {e["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
            assert from_secrets <= ENV_ONLY_KEYS, (name, c["name"], from_secrets)


def test_the_install_step_of_the_gate_sees_no_secret(prod_objects):
    spec = dict(pods(prod_objects))["accuracy-gate-run"]
    (install,) = spec["initContainers"]
    assert "valueFrom" not in str(install) and install["command"][:2] == ["pip", "install"]


def test_the_model_cache_is_a_directory_the_node_prepared(objects):
    for name, spec in pods(objects):
        for v in spec.get("volumes", []):
            if "hostPath" in v:
                assert v["hostPath"]["type"] == "Directory", name     # never created root-owned by the kubelet


def test_images_are_pinned(objects):
    for name, spec in pods(objects):
        for c in containers(spec):
            image = c["image"]
            assert ("@sha256:" in image or ":" in image.rsplit("/", 1)[-1]) and not image.endswith(":latest"), image


def egress_policies(objects, namespace="llm-serving"):
    return {o["metadata"]["name"]: o["spec"] for o in objects
            if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == namespace
            and "Egress" in o["spec"]["policyTypes"]}


def test_egress_is_denied_by_default_in_the_serving_namespace(objects):
    policies = egress_policies(objects)
    assert policies["default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    dns = policies["dns-egress"]["egress"][0]
    assert {p["port"] for p in dns["ports"]} == {53}


def test_no_egress_rule_reaches_the_instance_metadata_service(objects):
    metadata = ipaddress.ip_address("169.254.169.254")
    for name, spec in egress_policies(objects).items():
        for rule in spec.get("egress", []):
            for peer in rule.get("to", []):
                block = peer.get("ipBlock")
                if block and metadata in ipaddress.ip_network(block["cidr"]):
                    assert METADATA in block.get("except", []), name
                if block:       # HTTPS only (443; 10443 is the gateway's Envoy pods behind its Service)
                    assert {p["port"] for p in rule["ports"]} <= {443, 10443}, name


@pytest.mark.parametrize("pod, policy", [
    ("vllm-us-east-1a", "vllm-hub-egress"),
    ("vllm-epp", "epp-egress"),
    ("accuracy-gate-run", "accuracy-gate-egress"),
    ("load-test-run", "load-test-egress"),
])
def test_each_pod_has_the_egress_it_needs(prod_objects, pod, policy):
    objects = prod_objects
    spec = dict(pods(objects))[pod]
    workload = next(o for o in objects if o["kind"] in WORKLOADS and o["metadata"]["name"] == pod)
    labels = workload["spec"]["template"]["metadata"]["labels"]
    selector = egress_policies(objects)[policy]["podSelector"]["matchLabels"]
    assert spec and selector.items() <= labels.items()


# -- Pod Security Admission: every namespace the program creates names its standard ------------------
# The rules of the Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards),
# one check each: a pod template in, True when the pod breaks the rule. Baseline's rules, then restricted's.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _ctx(c):
    return c.get("securityContext", {})


def _either(spec, c, key):
    """A container's field, else the pod's (as the kubelet resolves it)."""
    return _ctx(c).get(key, spec.get("securityContext", {}).get(key))


PSS_RULES = {
    "baseline": {
        "host-namespaces": lambda s: any(s.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")),
        "privileged": lambda s: any(_ctx(c).get("privileged") for c in containers(s)),
        "capabilities-beyond-baseline": lambda s: any(
            set(_ctx(c).get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES for c in containers(s)),
        "host-path-volumes": lambda s: any("hostPath" in v for v in s.get("volumes", [])),
        "host-ports": lambda s: any(p.get("hostPort") for c in containers(s) for p in c.get("ports", [])),
        "unconfined-seccomp": lambda s: any(_either(s, c, "seccompProfile") == {"type": "Unconfined"}
                                            for c in containers(s)),
        "unsafe-proc-mount": lambda s: any(_ctx(c).get("procMount", "Default") != "Default" for c in containers(s)),
        "sysctls": lambda s: bool(s.get("securityContext", {}).get("sysctls")),
    },
    "restricted": {
        "volume-types": lambda s: any(not set(v) - {"name"} <= RESTRICTED_VOLUMES for v in s.get("volumes", [])),
        "privilege-escalation": lambda s: any(_ctx(c).get("allowPrivilegeEscalation") is not False
                                              for c in containers(s)),
        "run-as-non-root": lambda s: any(_either(s, c, "runAsNonRoot") is not True for c in containers(s)),
        "run-as-user-root": lambda s: any(_either(s, c, "runAsUser") == 0 for c in containers(s)),
        "seccomp-profile": lambda s: any((_either(s, c, "seccompProfile") or {}).get("type")
                                         not in ("RuntimeDefault", "Localhost") for c in containers(s)),
        "capabilities": lambda s: any(
            "ALL" not in _ctx(c).get("capabilities", {}).get("drop", [])
            or set(_ctx(c).get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"} for c in containers(s)),
    },
}


def pss_violations(spec) -> set[str]:
    return {f"{level}:{rule}" for level, rules in PSS_RULES.items() for rule, broken in rules.items() if broken(spec)}


# The standard each namespace the program creates enforces, and the only rules its pods may break
# under it (the reason is stated beside the label, in the component).
NAMESPACES = {
    "llm-serving": ("privileged", {"baseline:host-path-volumes", "restricted:volume-types"}),   # the model cache
    "monitoring": ("privileged", None),        # the charts' exporters (hostPath, host namespaces): no pods of ours
}


@pytest.mark.parametrize("name, level", [(n, lvl) for n, (lvl, _) in NAMESPACES.items()])
def test_each_namespace_enforces_its_stated_standard_and_audits_restricted(objects, name, level):
    (ns,) = [o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == name]
    labels = ns["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")} == {
        "pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "v1.35",
        "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/audit-version": "v1.35",
        "pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "v1.35"}


def test_every_namespace_of_our_pods_carries_pod_security_labels(objects):
    created = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    assert set(NAMESPACES) <= created


# The namespaces Helm releases install into: the program makes each (a Namespace with its labels),
# none is left to Helm's create_namespace (a bare namespace). The level each chart's pods meet at its
# pinned version (deployment/namespaces.py cites the chart's values and templates).
CHART_NAMESPACES = {
    "keda": "restricted", "lws-system": "restricted", "envoy-gateway-system": "restricted",
    "envoy-ai-gateway-system": "restricted", "cert-manager": "restricted", "external-dns": "restricted",
    "nvidia-device-plugin": "privileged",      # the kubelet's device-plugins socket directory, a hostPath
}
NOT_OURS = {"kube-system"}        # EKS's add-ons run privileged there: not labelled by the program
HELM_STACKS = {"prod": None, "prod-burst": {"serving": {"burstScaling": True}}, "prod-multinode": None}


@pytest.mark.parametrize("stack", list(HELM_STACKS))
def test_every_namespace_rendered_is_the_programs_and_labelled(recorded, stack):
    """Every namespace an object lives in or a release installs into is a Namespace object of the
    program's (kube-system aside), with its stated enforce level; no release creates its own."""
    from offline.manifests import helm_releases
    recording = recorded("prod" if stack == "prod-burst" else stack, HELM_STACKS[stack])
    objs, releases = kubernetes_objects(recording), helm_releases(recording)
    levels = {o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
              for o in objs if o["kind"] == "Namespace"}
    used = {o["metadata"].get("namespace") for o in objs} | {r["namespace"] for r in releases}
    assert (used - {None}) - NOT_OURS <= set(levels), stack
    assert not [r["name"] for r in releases if r.get("createNamespace")], stack
    expected = {**CHART_NAMESPACES, **{n: level for n, (level, _) in NAMESPACES.items()}}
    assert {n: expected[n] for n in levels} == levels, stack
    if stack == "prod-burst":
        assert "keda" in levels
    if stack == "prod-multinode":
        assert "lws-system" in levels


def test_the_chart_values_meet_their_namespaces_restricted_standard(recorded):
    """Where a chart's defaults fall short of restricted, our values close the gap: the LWS manager's
    seccomp profile, the AI Gateway controller's whole security context (its image's user is a name)."""
    from offline.manifests import helm_releases
    by_name = {r["name"]: r.get("values", {}) for r in helm_releases(recorded("prod-multinode"))}
    lws = by_name["lws"]["podSecurityContext"]
    assert lws == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    aigw = by_name["ai-gateway"]["controller"]
    spec = {"securityContext": aigw["podSecurityContext"], "containers": [{"securityContext": aigw["securityContext"]}]}
    assert pss_violations(spec) == set() and aigw["podSecurityContext"]["runAsUser"] > 0


def test_the_version_pinned_is_the_clusters_minor():
    from components.pods import pod_security_labels
    labels = pod_security_labels("restricted", "1.34.2")
    assert {v for k, v in labels.items() if k.endswith("-version")} == {"v1.34"}
    with pytest.raises(ValueError, match="unknown Pod Security Standard 'strict'"):
        pod_security_labels("strict", "1.35")


def _namespace_of(objects, workload_name):
    for o in objects:
        if o["kind"] in (*WORKLOADS, "LeaderWorkerSet") and o["metadata"]["name"] == workload_name.split("/")[0]:
            return o["metadata"]["namespace"]


@pytest.mark.parametrize("rule", [f"{lvl}:{r}" for lvl, rules in PSS_RULES.items() for r in rules])
def test_every_pod_meets_each_restricted_rule_but_its_namespaces_stated_exceptions(objects, rule):
    """A pod in a namespace enforcing restricted breaks no rule; in one enforcing less, only the rules
    the namespace's comment states (so the stated reason stays the whole gap)."""
    for name, spec in pods(objects):
        level, allowed = NAMESPACES[_namespace_of(objects, name)]
        if rule in pss_violations(spec):
            assert level != "restricted" and rule in (allowed or set()), (name, rule)


def test_the_stated_exceptions_are_still_needed(objects):
    """A namespace enforcing less than restricted has a pod that needs it: else tighten the label."""
    broken = {_namespace_of(objects, n): set() for n, _ in pods(objects)}
    for name, spec in pods(objects):
        broken[_namespace_of(objects, name)] |= pss_violations(spec)
    for ns, (level, allowed) in NAMESPACES.items():
        if allowed is not None:
            assert broken.get(ns) == allowed, ns


@pytest.mark.parametrize("spec, rule", [
    ({"hostNetwork": True, "containers": []}, "baseline:host-namespaces"),
    ({"containers": [{"securityContext": {"capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]}}}]},
     "baseline:capabilities-beyond-baseline"),
    ({"volumes": [{"name": "c", "hostPath": {"path": "/x"}}], "containers": []}, "baseline:host-path-volumes"),
    ({"containers": [{"securityContext": {}}]}, "restricted:privilege-escalation"),
    ({"securityContext": {"runAsNonRoot": True}, "containers": [{"securityContext": {}}]},
     "restricted:seccomp-profile"),
])
def test_the_checker_catches_each_rule(spec, rule):
    assert rule in pss_violations(spec)


# -- Checkov's Deployment checks, over LeaderWorkerSet templates too ------------------------------------
# Checkov (3.3.30, framework kubernetes) evaluates a Deployment's pod template but not a custom
# resource's, so nothing ran these on the LeaderWorkerSets' leader and worker templates. The checks
# above cover its security ones (CKV_K8S_20, 22, 28, 37, 38, 35, 43); these are its resource and
# probe checks, by id, on every container of every workload (init containers take no probes).
CHECKOV_CONTAINER_CHECKS = {
    "CKV_K8S_10 CPU requests": lambda c: bool(c.get("resources", {}).get("requests", {}).get("cpu")),
    "CKV_K8S_12 memory requests": lambda c: bool(c.get("resources", {}).get("requests", {}).get("memory")),
    "CKV_K8S_13 memory limits": lambda c: bool(c.get("resources", {}).get("limits", {}).get("memory")),
    "CKV_K8S_8 liveness probe": lambda c: "livenessProbe" in c,
    "CKV_K8S_9 readiness probe": lambda c: "readinessProbe" in c,
}
# (workload suffix, container) -> the checks it is exempt from, and why.
CHECKOV_EXCEPTIONS = {
    # A worker restarted for its leader's slowness would recreate the whole group (components/serving.py).
    ("/worker", "vllm"): {"CKV_K8S_8 liveness probe"},
    # A shell loop that exits only by being killed: nothing for a probe to ask; its result is a metric.
    ("/leader", "nccl-transport"): {"CKV_K8S_8 liveness probe", "CKV_K8S_9 readiness probe"},
}
CHECKOV_SKIPS_PROBES = ("Job",)      # Checkov's probe checks do not apply to run-once Jobs


@pytest.mark.parametrize("check", list(CHECKOV_CONTAINER_CHECKS))
def test_every_workloads_containers_pass_checkovs_resource_and_probe_checks(objects, check):
    kinds = {o["metadata"]["name"]: o["kind"] for o in objects if o["kind"] in (*WORKLOADS, "LeaderWorkerSet")}
    for name, spec in pods(objects):
        if "probe" in check and kinds[name.split("/")[0]] in CHECKOV_SKIPS_PROBES:
            continue
        for c in spec["containers"]:
            exempt = next((v for (suffix, cname), v in CHECKOV_EXCEPTIONS.items()
                           if name.endswith(suffix) and c["name"] == cname), set())
            assert CHECKOV_CONTAINER_CHECKS[check](c) or check in exempt, (name, c["name"], check)


def test_the_checkov_exceptions_are_still_needed(recorded):
    """Each exempt container still lacks what it is exempt from (else drop the exception)."""
    specs = dict(pods(kubernetes_objects(recorded("prod-multinode"))))
    for (suffix, cname), exempt in CHECKOV_EXCEPTIONS.items():
        containers = [c for n, s in specs.items() if n.endswith(suffix) for c in s["containers"] if c["name"] == cname]
        assert containers, (suffix, cname)
        for check in exempt:
            assert not any(CHECKOV_CONTAINER_CHECKS[check](c) for c in containers), (suffix, cname, check)
