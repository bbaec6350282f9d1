"""Run `__main__.py` under Pulumi's mock engine and record the resource graph.

This is the recording engine behind the offline preview, render, the offline policy run and the
tests (one session fixture records each stack):
no Pulumi CLI, no cloud. Every registration is kept with its type, name, inputs, parent,
dependencies, property dependencies and provider. Secrets are kept wrapped and shown only as
`[secret]` by `offline.values.redacted()`.

Mocks return the computed outputs real providers would (ids, names, ARNs, endpoints), or
dependent inputs would silently vanish from later registrations.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import runpy
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conventions import PROJECT

from .collector import paused_gc

# Re-exported: what reads a recording reads its values with these (offline/values.py).
from .values import SECRET_SIG, SIG_KEY, is_secret, redacted, unwrap, walk, wrap_secret  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "__main__.py"
PLACEHOLDER_PREFIX = "offline-preview-secret"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    id: str
    inputs: dict
    outputs: dict
    parent: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    provider: str
    custom: bool
    ignore_changes: tuple[str, ...] = ()      # the resource option, as the engine receives it


@dataclass
class Recording:
    stack: str
    resources: list[Registration] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    invokes: list[tuple[str, dict]] = field(default_factory=list)
    placeholder_secrets: list[str] = field(default_factory=list)   # secret keys given offline placeholders
    settings: Any = None      # the StackSettings the program built (settings.StackSettings)
    plan: Any = None          # the sizing plan the program built from them (sizing.planner.Plan)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.resources}

    def named(self, name: str) -> Registration:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)


# -- mocks ------------------------------------------------------------------------------------
def _stable_id(name: str) -> str:
    """An id that is the same in every run (Python's hash() is salted per process)."""
    return f"{zlib.crc32(name.encode()) % 10**8:08d}"


def _fake_arn(type_: str, name: str) -> str:
    service = type_.split(":")[1].split("/")[0] if ":" in type_ else "mock"
    return f"arn:aws:{service}:us-east-1:123456789012:{name}"


def computed_outputs(type_: str, name: str, inputs: dict, region: str) -> tuple[str, dict]:
    """The id and state a real provider would return, for the types the program uses."""
    out = dict(inputs)
    rid = f"{name}-id"
    if type_.startswith("aws:"):
        out.setdefault("arn", _fake_arn(type_, name))
        out.setdefault("tagsAll", inputs.get("tags", {}))
    if type_ == "aws:ec2/vpc:Vpc":
        rid = f"vpc-{_stable_id(name)}"
    elif type_ == "aws:ec2/subnet:Subnet":
        rid = f"subnet-{_stable_id(name)}"
    elif type_ == "aws:eks/cluster:Cluster":
        out.update({
            "name": inputs.get("name", name),
            "endpoint": f"https://{name}.gr7.{region}.eks.amazonaws.com",
            "certificateAuthority": {"data": base64.b64encode(b"mock-ca").decode()},
            "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{region}.amazonaws.com/id/MOCK"}]}],
            "clusterSecurityGroupId": "sg-cluster0000",
            "vpcConfig": {**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": "sg-cluster0000"},
        })
    elif type_ == "aws:eks/nodeGroup:NodeGroup":
        out.setdefault("nodeGroupName", inputs.get("nodeGroupName", name))
        out.setdefault("resources", [{"autoscalingGroups": [{"name": f"eks-{name}"}]}])
    elif type_ == "aws:ec2/launchTemplate:LaunchTemplate":
        rid = f"lt-{_stable_id(name)}"
        out.setdefault("latestVersion", 1)
    elif type_ == "aws:iam/role:Role":
        out.setdefault("name", inputs.get("name", name))
    elif type_.startswith("kubernetes:"):
        meta = dict(inputs.get("metadata") or {})
        meta.setdefault("name", name)
        out["metadata"] = meta
        if type_ == "kubernetes:gateway.networking.k8s.io/v1:Gateway":   # Envoy Gateway writes the NLB's name
            out.setdefault("status", {"addresses": [{"type": "Hostname", "value": f"{name}.elb.{region}.amazonaws.com"}]})
        if type_ == "kubernetes:core/v1:Service":
            out.setdefault("status", {"loadBalancer": {"ingress": [{"hostname": f"{name}.elb.{region}.amazonaws.com"}]}})
    elif type_ == "pulumi:providers:kubernetes":
        rid = f"{name}-provider-id"
    out.setdefault("name", inputs.get("name", name))
    if type_ == "aws:ec2/securityGroup:SecurityGroup":
        rid = f"sg-{_stable_id(name)}"
    return rid, out


# EFA-capable network cards of the GPU instances (EC2 DescribeInstanceTypes, NetworkInfo).
MOCK_EFA_NETWORK_CARDS = {"p5.48xlarge": 32, "p5e.48xlarge": 32, "p5en.48xlarge": 16, "p4d.24xlarge": 4,
                          "g6e.48xlarge": 4}


def invoke_result(token: str, args: dict, region: str) -> dict:
    if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
        names = [f"{region}{c}" for c in "abcdef"]
        return {"names": names, "zoneIds": [f"use1-az{i}" for i in range(1, 7)], "id": region, "state": "available"}
    if token == "aws:index/getRegion:getRegion":
        return {"name": region, "region": region, "id": region}
    if token == "aws:index/getCallerIdentity:getCallerIdentity":
        return {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/mock", "userId": "MOCK", "id": "123456789012"}
    if token == "aws:index/getPartition:getPartition":
        return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
    if token == "aws:iam/getPolicyDocument:getPolicyDocument":
        return {"json": json.dumps({"Version": "2012-10-17", "Statement": args.get("statements", [])}), "id": "doc"}
    if token == "aws:ssm/getParameter:getParameter":
        return {"value": "ami-0mock0000000000000", "name": args.get("name"), "id": args.get("name"), "type": "String",
                "arn": "arn:aws:ssm:::parameter/mock", "insecureValue": "ami-0mock0000000000000", "version": 1}
    if token == "aws:ec2/getInstanceType:getInstanceType":
        itype = args.get("instanceType", "")
        cards = MOCK_EFA_NETWORK_CARDS.get(itype)
        return {"instanceType": itype, "id": itype, "efaSupported": cards is not None,
                "maximumNetworkCards": cards or 1, "efaMaximumInterfaces": cards or 0}
    if token == "aws:eks/getAddonVersion:getAddonVersion":
        return {"version": "v1.0.0-eksbuild.1", "addonName": args.get("addonName"), "id": args.get("addonName"),
                "kubernetesVersion": args.get("kubernetesVersion")}
    return {"id": token}


def _make_mocks(region: str, recording: Recording):
    import pulumi

    class OfflineMocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs):
            return computed_outputs(args.typ, args.name, args.inputs, region)

        def call(self, args: pulumi.runtime.MockCallArgs):
            recording.invokes.append((args.token, args.args))
            return invoke_result(args.token, args.args, region)

    return OfflineMocks()


def _make_monitor(mocks, recording: Recording):
    from pulumi.runtime import rpc
    from pulumi.runtime.mocks import MockMonitor, MockResourceArgs, _resolve_callbacks
    from pulumi.runtime.proto import resource_pb2

    class RecordingMonitor(MockMonitor):
        """Pulumi's MockMonitor that records every registration, and registers on the event loop's
        own thread (`InlineExecutor`): upstream's `RegisterResource` (pulumi/runtime/mocks.py,
        pulumi 3.272.0) with the mock's state serialized by `settled()` instead of `_sync_await`,
        which pumps an event loop and cannot run inside the loop's running task, and the request
        deserialized once (the record keeps unknowns; the mocks get them as upstream gives them).
        Invokes and reads (a handful per build) keep upstream's code, on a worker thread as
        upstream runs them."""

        def __init__(self, mocks):
            super().__init__(mocks)
            self._worker: ThreadPoolExecutor | None = None

        def RegisterResource(self, request):
            urn = self.make_urn(request.parent, request.type, request.name)
            if request.type == "pulumi:pulumi:Stack":
                return resource_pb2.RegisterResourceResponse(urn=urn)
            inputs = rpc.deserialize_properties(request.object, keep_unknowns=True)
            id_, state = self.mocks.new_resource(MockResourceArgs(
                typ=request.type, name=request.name, inputs=without_unknowns(inputs),
                provider=request.provider, resource_id=request.importId, custom=request.custom or False,
                transforms=_resolve_callbacks(request.transforms)))
            obj_proto = settled(rpc.serialize_properties(state, {}))
            self.resources[urn] = MockMonitor.ResourceRegistration(urn, id_, state)
            recording.resources.append(Registration(
                urn=urn, type=request.type, name=request.name, id=id_ or "",
                inputs=inputs, outputs=dict(state), parent=request.parent,
                dependencies=list(request.dependencies),
                property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                provider=request.provider, custom=bool(request.custom),
                ignore_changes=tuple(request.ignoreChanges),
            ))
            return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=obj_proto)

        def Invoke(self, request):
            return self._on_worker(super().Invoke, request)

        def ReadResource(self, request):
            return self._on_worker(super().ReadResource, request)

        def _on_worker(self, call, request):
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offline-monitor")
            return self._worker.submit(call, request).result()

        def close(self) -> None:
            if self._worker is not None:
                self._worker.shutdown()
                self._worker = None

    return RecordingMonitor(mocks)


def without_unknowns(value: Any) -> Any:
    """A copy of `deserialize_properties(s, keep_unknowns=True)`'s result as plain
    `deserialize_properties(s)` returns it outside a preview (pulumi/runtime/rpc.py, 3.272.0): an
    unknown becomes None, and a mapping drops a key whose value is None."""
    from pulumi.output import Unknown

    if isinstance(value, dict):
        return {k: without_unknowns(v) for k, v in value.items() if not isinstance(v, Unknown)}
    if isinstance(value, list):
        return [None if isinstance(v, Unknown) else without_unknowns(v) for v in value]
    return value


def settled(coroutine):
    """The result of a coroutine that never suspends (serializing plain data awaits nothing),
    run to its end on this thread without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("serializing a mock's state awaited an unresolved value: mocks return plain data")


class InlineExecutor(ThreadPoolExecutor):
    """An executor that runs each call at once on the calling thread. Pulumi sends every monitor
    call through the event loop's default executor (`run_in_executor(None, ...)` in
    pulumi/runtime/resource.py, 3.272.0); against a mock monitor a registration is a few dict
    operations, and the hop to a worker thread and back (two threads contending for the GIL) cost
    a preview about a tenth of its run. Starts no thread."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:       # noqa: BLE001 - handed to the awaiting task, as a worker would
            future.set_exception(exc)
        return future


@contextlib.contextmanager
def inline_executor(loop):
    """`loop`'s default executor an `InlineExecutor` for the block, the one before restored after."""
    previous = loop._default_executor      # asyncio has no getter; restoring None needs the attribute
    loop.set_default_executor(InlineExecutor())
    try:
        yield
    finally:
        loop._default_executor = previous


# -- config ------------------------------------------------------------------------------------
def offline_config(raw: dict) -> tuple[dict[str, str], list[str]]:
    """Stack-file config as the engine hands it to the program: strings (JSON for objects),
    `secure:` values (which cannot be decrypted offline) and every secret the program may read
    that the file does not set replaced by placeholders that stay marked secret."""
    from settings.schema import ALL_SECRET_KEYS

    config, secrets = {}, []
    for key, value in raw.items():
        if isinstance(value, dict) and "secure" in value:
            secrets.append(key)
            config[key] = placeholder_secret(key, raw)
        elif isinstance(value, str):
            config[key] = value
        else:
            config[key] = json.dumps(value)
    for key in (f"{PROJECT}:{name}" for name in ALL_SECRET_KEYS):
        if key not in config:
            secrets.append(key)
            config[key] = placeholder_secret(key, raw)
    return config, secrets


def placeholder_secret(key: str, raw: dict) -> str:
    name = key.partition(":")[2]
    if name == "apiKeys":
        names = (raw.get("llm-serving:gateway") or {}).get("apiKeyNames") or ["default"]
        return json.dumps({n: f"{PLACEHOLDER_PREFIX}-{name}-{n}" for n in names})
    return f"{PLACEHOLDER_PREFIX}-{name}"


# -- running -----------------------------------------------------------------------------------
def run_program(stack: str, raw_config: dict, program: Path = PROGRAM) -> Recording:
    """Build the program for `stack` with `raw_config` (a stack file's `config:` map)."""
    import pulumi
    from pulumi.runtime.config import set_all_config
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.settings import SETTINGS, get_root_resource
    from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

    region = str(raw_config.get("aws:region", "us-east-1"))
    recording = Recording(stack=stack)
    config, secret_keys = offline_config(raw_config)
    recording.placeholder_secrets = sorted(secret_keys)
    set_all_config(config, secret_keys)
    mocks = _make_mocks(region, recording)
    monitor = _make_monitor(mocks, recording)
    os.environ.setdefault("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
    _skip_source_positions()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    root = get_root_resource()

    program_globals: dict[str, Any] = {}

    def run() -> None:
        program_globals.update(runpy.run_path(str(program), run_name="__main__"))
    try:
        with paused_gc(), inline_executor(_ensure_event_loop()):
            _sync_await(run_pulumi_func(run))
    finally:
        monitor.close()
    # The settings and plan the program itself built: readers use these, never a second build.
    recording.settings, recording.plan = program_globals.get("settings"), program_globals.get("plan")
    recording.outputs = {k: _resolve(v) for k, v in root.outputs.items()}
    return recording


def holds_placeholder(shown: Any) -> bool:
    """Whether a resource's redacted inputs (`redacted(r.inputs)`) still hold a (placeholder) secret:
    one that reached them outside Pulumi's secret wrapping, a bug in the program that would print or
    store it in the clear."""
    return PLACEHOLDER_PREFIX in json.dumps(shown, default=str)


def leaked_secret_urns(recording: Recording) -> list[str]:
    """URNs of resources whose inputs hold a (placeholder) secret outside Pulumi's secret wrapping."""
    return [r.urn for r in recording.resources if holds_placeholder(redacted(r.inputs))]


def _skip_source_positions() -> None:
    """Registrations carry no source stack traces offline: nothing reads them here, and
    `traceback.extract_stack` on every registration is a fifth of a build (pulumi 3.272, pinned)."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    resource._get_stack_trace = source_pb2.StackTrace


def _resolve(value: Any) -> Any:
    """Wait for every output in `value`; a secret output comes back wrapped so it stays secret."""
    import pulumi
    from pulumi.runtime.sync_await import _sync_await

    def resolve_output(leaf: Any) -> Any:
        if not isinstance(leaf, pulumi.Output):
            return leaf
        plain = _resolve(_sync_await(leaf.future()))
        return wrap_secret(plain) if _sync_await(leaf.is_secret()) else plain
    return walk(value, secret=lambda plain: wrap_secret(_resolve(plain)), leaf=resolve_output)
