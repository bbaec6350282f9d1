"""Reading resources for the policies: type tokens, safe lookups and small views.

Props arrive as the Pulumi engine hands them to a policy pack: camelCase keys, numbers as
floats, secrets unwrapped, unknown values (during a real preview) behind a proxy that raises
`UnknownValueError` when read. Lookups here return a default for a missing key and let an
unknown propagate: the engine then reports the policy as "cannot run during preview" rather
than passing it on a guess. Values that are unknown in every real preview (subnet ids, launch
template ids) are never read; the policies follow dependencies to the resources instead.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Iterable

from conventions import ANNOTATION_GPUS_PER_NODE, GPU_RESOURCE, LABEL_ROLE, LABEL_ZONE, ZONE_KEY

# -- type tokens ----------------------------------------------------------------------------
CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SUBNET = "aws:ec2/subnet:Subnet"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
CAPACITY_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
JOB = "kubernetes:batch/v1:Job"
SERVICE = "kubernetes:core/v1:Service"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
HTTP_ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
SECURITY_POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy"
BACKEND_TRAFFIC_POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy"
INFERENCE_POOL = "kubernetes:inference.networking.k8s.io/v1:InferencePool"

LEADER_WORKER_SET = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"   # a replica of `size` pods
WORKLOADS = (DEPLOYMENT, STATEFUL_SET, LEADER_WORKER_SET)
POD_TEMPLATES = (DEPLOYMENT, STATEFUL_SET, DAEMON_SET, JOB)

# -- labels and annotations of the contract (docs/contracts.md) -----------------------------
ZONE_KEYS = (ZONE_KEY, "failure-domain.beta.kubernetes.io/zone")
INSTANCE_TYPE_KEY = "node.kubernetes.io/instance-type"
NODEGROUP_KEY = "eks.amazonaws.com/nodegroup"


def get(obj: Any, *path: str | int, default: Any = None) -> Any:
    """obj[path[0]][path[1]]..., or `default` where a key is missing or a value is None."""
    cur = obj
    for key in path:
        if isinstance(key, int):
            if isinstance(cur, (str, bytes)) or not isinstance(cur, Sequence) or not -len(cur) <= key < len(cur):
                return default
        elif not isinstance(cur, Mapping) or key not in cur:
            return default
        cur = cur[key]
        if cur is None:
            return default
    return cur


def as_dict(value: Any) -> dict:
    return {k: value[k] for k in value} if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list:
    return [v for v in value] if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []


def number(value: Any) -> float | None:
    """A float from a number or numeric string (annotations and tags are strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def fmt(x: float) -> str:
    """A short figure for messages: 10, 5.85."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- Kubernetes objects ---------------------------------------------------------------------
def metadata(props: Mapping) -> dict:
    return as_dict(get(props, "metadata", default={}))


def k8s_name(props: Mapping, fallback: str) -> str:
    return get(props, "metadata", "name", default=fallback)


def namespace(props: Mapping) -> str:
    return get(props, "metadata", "namespace", default="default")


def selector_matches(selector: Any, labels: Mapping) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; {} matches everything."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in as_dict(get(selector, "matchLabels", default={})).items():
        if labels.get(key) != value:
            return False
    for expr in as_list(get(selector, "matchExpressions", default=[])):
        if not _expression_holds(expr, labels):
            return False
    return True


def _expression_holds(expr: Mapping, labels: Mapping) -> bool:
    key, op = get(expr, "key"), get(expr, "operator")
    values = set(as_list(get(expr, "values", default=[])))
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        have, want = number(labels.get(key)), number(next(iter(values), None))
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_matches(pod_spec: Mapping, node_labels: Mapping) -> bool:
    """nodeSelector and required node affinity (terms are ORed, expressions ANDed)."""
    for key, value in as_dict(get(pod_spec, "nodeSelector", default={})).items():
        if node_labels.get(key) != value:
            return False
    terms = as_list(get(pod_spec, "affinity", "nodeAffinity",
                        "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", default=[]))
    if not terms:
        return True
    return any(all(_expression_holds(e, node_labels) for e in as_list(get(t, "matchExpressions", default=[])))
               for t in terms)


def tolerates(pod_spec: Mapping, taints: Iterable[Mapping]) -> bool:
    """Whether the pod tolerates every NoSchedule / NoExecute taint (EKS spells effects NO_SCHEDULE)."""
    tolerations = as_list(get(pod_spec, "tolerations", default=[]))
    for taint in taints:
        effect = str(get(taint, "effect", default="")).replace("_", "").lower()
        if effect not in ("noschedule", "noexecute"):
            continue
        if not any(_tolerates(t, taint, effect) for t in tolerations):
            return False
    return True


def _tolerates(toleration: Mapping, taint: Mapping, effect: str) -> bool:
    t_effect = str(get(toleration, "effect", default="")).lower()
    if t_effect and t_effect != effect:
        return False
    op = get(toleration, "operator", default="Equal")
    key = get(toleration, "key")
    if key is None:
        return op == "Exists"
    if key != get(taint, "key"):
        return False
    return op == "Exists" or get(toleration, "value", default="") == get(taint, "value", default="")


# -- node groups ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeGroupView:
    urn: str
    name: str
    labels: dict
    taints: tuple
    zones: tuple[str, ...]          # from the subnets the group launches into
    nodes: int
    gpus_per_node: int | None
    instance_types: tuple[str, ...]
    is_gpu: bool

    def node_labels(self, zone: str) -> dict:
        """The labels a node of this group carries in `zone` (its own plus the well-known ones)."""
        labels = {**self.labels, NODEGROUP_KEY: self.name}
        for key in ZONE_KEYS:
            labels[key] = zone
        if len(self.instance_types) == 1:
            labels[INSTANCE_TYPE_KEY] = self.instance_types[0]
        return labels


def _deps(res: Any, prop: str, type_: str) -> list:
    found = [d for d in (res.property_dependencies or {}).get(prop, []) if d.resource_type == type_]
    return found or [d for d in (res.dependencies or []) if d.resource_type == type_]


def subnet_zones(node_group: Any, resources: Sequence) -> tuple[str, ...]:
    """The zones of a node group's subnets: through its property dependencies (subnet ids are
    unknown during a preview), else by matching subnet ids, else its zone label."""
    subnets = _deps(node_group, "subnetIds", SUBNET)
    if not subnets:
        ids = set(as_list(get(node_group.props, "subnetIds", default=[])))
        subnets = [r for r in resources if r.resource_type == SUBNET and get(r.props, "id") in ids]
    zones = {get(s.props, "availabilityZone") or get(s.props, "availabilityZoneId") for s in subnets} - {None}
    if not zones:
        labels = as_dict(get(node_group.props, "labels", default={}))
        zone = labels.get(ZONE_KEY) or labels.get(LABEL_ZONE)
        zones = {zone} if zone else set()
    return tuple(sorted(zones))


def _is_gpu_type(instance_type: str) -> bool:
    family = instance_type.split(".")[0]
    return len(family) >= 2 and family[0] in "pg" and family[1].isdigit()


def node_group_view(res: Any, resources: Sequence) -> NodeGroupView:
    props = res.props
    labels = as_dict(get(props, "labels", default={}))
    tags = as_dict(get(props, "tags", default={}))
    taints = tuple(as_dict(t) for t in as_list(get(props, "taints", default=[])))
    types = [str(t) for t in as_list(get(props, "instanceTypes", default=[]))]
    for lt in _deps(res, "launchTemplate", LAUNCH_TEMPLATE):
        if get(lt.props, "instanceType"):
            types.append(str(get(lt.props, "instanceType")))
    gpus = number(tags.get(ANNOTATION_GPUS_PER_NODE, labels.get(ANNOTATION_GPUS_PER_NODE)))
    nodes = number(get(props, "scalingConfig", "desiredSize"))
    if nodes is None:
        nodes = number(get(props, "scalingConfig", "minSize")) or 0
    is_gpu = (labels.get(LABEL_ROLE) == "gpu" or bool(gpus) or any(get(t, "key") == GPU_RESOURCE for t in taints)
              or any(_is_gpu_type(t) for t in types))
    return NodeGroupView(
        urn=res.urn, name=get(props, "nodeGroupName", default=res.name), labels=labels, taints=taints,
        zones=subnet_zones(res, resources), nodes=int(nodes),
        gpus_per_node=int(gpus) if gpus else None, instance_types=tuple(dict.fromkeys(types)), is_gpu=is_gpu)


def node_groups(resources: Sequence) -> list[NodeGroupView]:
    return [node_group_view(r, resources) for r in resources if r.resource_type == NODE_GROUP]


# -- workloads ------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadView:
    urn: str
    kind: str
    name: str
    namespace: str
    replicas: int
    labels: dict
    annotations: dict
    pod_labels: dict
    pod_spec: Any
    gpus: int                       # nvidia.com/gpu per pod, over all containers
    group_size: int = 1             # pods (one per node) per replica: a LeaderWorkerSet's size
    worker_spec: Any = None         # a LeaderWorkerSet's worker pod spec (placement judged like the leader's)

    @property
    def pods(self) -> int:
        return self.replicas * self.group_size

    @property
    def is_serving(self) -> bool:
        return (self.labels.get(LABEL_ROLE) == "serving" or self.pod_labels.get(LABEL_ROLE) == "serving"
                or self.pod_labels.get("app.kubernetes.io/name") == "vllm")

    def zone_spread(self) -> dict | None:
        """The topology spread constraint on zones that the scheduler must honour, if any."""
        for c in as_list(get(self.pod_spec, "topologySpreadConstraints", default=[])):
            if get(c, "topologyKey") in ZONE_KEYS and get(c, "whenUnsatisfiable") == "DoNotSchedule":
                return as_dict(c)
        return None

    def zone_anti_affinity(self) -> bool:
        terms = as_list(get(self.pod_spec, "affinity", "podAntiAffinity",
                            "requiredDuringSchedulingIgnoredDuringExecution", default=[]))
        return any(get(t, "topologyKey") in ZONE_KEYS and selector_matches(get(t, "labelSelector"), self.pod_labels)
                   for t in terms)


def pod_gpus(pod_spec: Any) -> int:
    """GPUs a pod takes: `nvidia.com/gpu`, or MIG slices (`nvidia.com/mig-<profile>`, the device
    plugin's mixed strategy), which the node groups count as their GPUs (sizing.mig)."""
    total = 0.0
    for c in as_list(get(pod_spec, "containers", default=[])):
        for kind in ("limits", "requests"):
            found = as_dict(get(c, "resources", kind, default={}))
            names = [n for n in found if n == GPU_RESOURCE or str(n).startswith(MIG_RESOURCE_PREFIX)]
            if names:
                total += sum(number(found[n]) or 0 for n in names)
                break
    return int(total)


MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def workload_view(res: Any) -> WorkloadView:
    props = res.props
    if res.resource_type == LEADER_WORKER_SET:
        return _group_view(res)
    meta = metadata(props)
    template = get(props, "spec", "template", default={})
    replicas = number(get(props, "spec", "replicas"))
    pod_spec = get(template, "spec", default={})
    return WorkloadView(
        urn=res.urn, kind=res.resource_type.rsplit(":", 1)[-1], name=meta.get("name", res.name),
        namespace=meta.get("namespace", "default"), replicas=1 if replicas is None else int(replicas),
        labels=as_dict(meta.get("labels")), annotations=as_dict(meta.get("annotations")),
        pod_labels=as_dict(get(template, "metadata", "labels", default={})), pod_spec=pod_spec,
        gpus=pod_gpus(pod_spec))


def _group_view(res: Any) -> WorkloadView:
    """A LeaderWorkerSet: `replicas` groups of `size` pods; the leader's template stands for the
    group (its labels are what the Service selects), the workers' placement is kept beside it."""
    props, meta = res.props, metadata(res.props)
    lwt = get(props, "spec", "leaderWorkerTemplate", default={})
    worker = get(lwt, "workerTemplate", default={})
    leader = get(lwt, "leaderTemplate", default=worker)
    replicas, size = number(get(props, "spec", "replicas")), number(get(lwt, "size"))
    pod_spec = get(leader, "spec", default={})
    return WorkloadView(
        urn=res.urn, kind="LeaderWorkerSet", name=meta.get("name", res.name),
        namespace=meta.get("namespace", "default"), replicas=1 if replicas is None else int(replicas),
        labels=as_dict(meta.get("labels")), annotations=as_dict(meta.get("annotations")),
        pod_labels=as_dict(get(leader, "metadata", "labels", default={})), pod_spec=pod_spec,
        gpus=pod_gpus(pod_spec), group_size=1 if size is None else int(size),
        worker_spec=get(worker, "spec", default={}))


def pod_specs(resource_type: str, props: Any) -> list:
    """The pod specs an object creates pods from: its template, or a LeaderWorkerSet's two."""
    if resource_type in POD_TEMPLATES:
        return [get(props, "spec", "template", "spec", default={})]
    if resource_type == LEADER_WORKER_SET:
        lwt = get(props, "spec", "leaderWorkerTemplate", default={})
        return [get(lwt, key, "spec", default={}) for key in ("leaderTemplate", "workerTemplate") if get(lwt, key)]
    return []


def workloads(resources: Sequence) -> list[WorkloadView]:
    return [workload_view(r) for r in resources if r.resource_type in WORKLOADS]


def serving_workloads(resources: Sequence) -> list[WorkloadView]:
    return [w for w in workloads(resources) if w.is_serving]


# -- where pods can run ---------------------------------------------------------------------
def landing(w: WorkloadView, groups: Sequence[NodeGroupView]) -> list[tuple[NodeGroupView, str]]:
    """The (node group, zone) pairs whose nodes the workload's pods may be scheduled on."""
    out = []
    for ng in groups:
        if not tolerates(w.pod_spec, ng.taints):
            continue
        for zone in ng.zones:
            if node_selector_matches(w.pod_spec, ng.node_labels(zone)):
                out.append((ng, zone))
    return out


def allowed_zones(w: WorkloadView, groups: Sequence[NodeGroupView]) -> tuple[str, ...] | None:
    """Zones the pods may land in; None when the stack declares no node groups to judge by
    (then only an explicit zone in the nodeSelector counts)."""
    if groups:
        return tuple(sorted({zone for _, zone in landing(w, groups)}))
    for key in ZONE_KEYS:
        zone = get(w.pod_spec, "nodeSelector", key)
        if zone:
            return (zone,)
    return None


def worst_zone_share(replicas: int, zones: int, max_skew: int) -> int:
    """Most replicas one zone can hold under a DoNotSchedule zone spread of `max_skew`."""
    if zones <= 1:
        return replicas
    return min(replicas, math.floor((replicas + (zones - 1) * max_skew) / zones))
