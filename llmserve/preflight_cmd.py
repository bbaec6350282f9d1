"""Check the stack and the AWS account before `pulumi up`. First, without AWS: the stack holds no
example values (a documentation zone id, hostname, e-mail or CIDR; exit 1 before any AWS call)
and each GPU pool is, or is not, backed by a capacity reservation or block (a warning when not);
when replicas span nodes, a warning while their image is pinned by tag only.
Then, with AWS credentials (boto3's usual chain, read-only calls): every zone offers the GPU
instance type, the On-Demand vCPU quota covers the GPU nodes, and every configured capacity
reservation exists, is active, and matches its pool's zone and instance type.
Exit 0 when every check passes (warnings included), 1 when one fails."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from conventions import PROJECT

from . import options
from .errors import fail

# Running On-Demand instance quotas, in vCPUs, by instance family (Service Quotas, service "ec2").
VCPU_QUOTAS = {
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
}


@dataclass(frozen=True)
class Check:
    check: str
    target: str
    ok: bool
    detail: str
    warn: bool = False      # passes, but says what may go wrong (an unreserved GPU pool)

    @property
    def result(self) -> str:
        return "FAIL" if not self.ok else "warn" if self.warn else "pass"


@dataclass(frozen=True)
class AwsClients:
    """The boto3 clients preflight calls; tests pass moto- or Stubber-backed ones."""
    ec2: Any
    service_quotas: Any


def default_clients(region: str) -> AwsClients:
    import boto3

    session = boto3.session.Session(region_name=region)
    return AwsClients(ec2=session.client("ec2"), service_quotas=session.client("service-quotas"))


# The client factory the command uses; tests replace it (monkeypatch) to inject moto or a Stubber.
make_clients: Callable[[str], AwsClients] = default_clients


# -- checks without AWS ------------------------------------------------------------------------
def example_checks(settings) -> list[Check]:
    """One failing row per example value left in the stack (settings/examples.py)."""
    from settings.examples import example_values

    return [Check("example value", f"{PROJECT}:{v.key}", False, v.detail) for v in example_values(settings)]


def capacity_checks(settings) -> list[Check]:
    """One row per GPU pool: which capacity backs it. A pool with none may not get its nodes:
    large GPU instances are often short On-Demand, and the node group then waits and fails."""
    rows = []
    for i, p in enumerate(settings.gpuPools):
        target, block = f"gpuPools[{i}] ({p.instanceType} x {p.nodes} in {p.zone})", p.capacityBlock
        if p.capacityReservationId:
            rows.append(Check("capacity", target, True, f"On-Demand Capacity Reservation {p.capacityReservationId}"))
        elif block is not None and block.id:
            rows.append(Check("capacity", target, True,
                              f"Capacity Block {block.id}; its nodes launch only inside the block's window"))
        elif block is not None and block.purchase:
            rows.append(Check("capacity", target, True,
                              f"Capacity Block bought by `pulumi up` from offering {block.offeringId} "
                              f"({block.durationHours} h, non-refundable)"))
        else:
            rows.append(Check("capacity", target, True, unreserved_detail(i, p), warn=True))
    return rows


def unreserved_detail(index: int, pool) -> str:
    return (f"no reservation: On-Demand {pool.instanceType} capacity may be unavailable in {pool.zone}, and the "
            "node group then fails with InsufficientInstanceCapacity. Reserve it: `aws ec2 "
            f"create-capacity-reservation --instance-type {pool.instanceType} --instance-platform Linux/UNIX "
            f"--availability-zone {pool.zone} --instance-count {pool.nodes}` and set "
            f"gpuPools[{index}].capacityReservationId, or find a Capacity Block (`aws ec2 "
            f"describe-capacity-block-offerings --instance-type {pool.instanceType} --instance-count {pool.nodes} "
            f"--capacity-duration-hours 24`) and set gpuPools[{index}].capacityBlock (docs/capacity.md)")


def image_checks(loaded) -> list[Check]:
    """A warning row when the plan's replicas span nodes, or its KV moves over EFA, while their image
    (conventions.VLLM_EFA_IMAGE) is pinned by tag alone: a tag can be moved, so the deploy should pin the digest it resolved."""
    from conventions import VLLM_EFA_IMAGE, VLLM_EFA_IMAGE_DIGEST
    from offline.stack import StackError

    try:
        plan = loaded.plan
    except StackError:      # a plan the sizing refuses is `llmserve preview`'s to report, not this check's
        return []
    kv_over_efa = plan.kv_transfer is not None and plan.kv_transfer.link == "efa"
    if not (plan.nodes_per_replica > 1 or kv_over_efa) or VLLM_EFA_IMAGE_DIGEST:
        return []
    who = "multi-node groups" if plan.nodes_per_replica > 1 else "prefill/decode pods (KV over EFA)"
    return [Check("image digest", who, True,
                  f"{VLLM_EFA_IMAGE} is pinned by tag only (no published digest found); resolve it with "
                  f"`crane digest {VLLM_EFA_IMAGE}` or `docker buildx imagetools inspect {VLLM_EFA_IMAGE}` and set "
                  "conventions.VLLM_EFA_IMAGE_DIGEST (docs/multi-node.md)", warn=True)]


# -- checks against AWS ------------------------------------------------------------------------
def offering_checks(ec2, pools) -> list[Check]:
    """One row per (zone, instance type): does the zone offer it (describe_instance_type_offerings)?"""
    wanted = list(dict.fromkeys((p.zone, p.instanceType) for p in pools))
    offered: set[tuple[str, str]] = set()
    for itype in dict.fromkeys(t for _, t in wanted):
        zones = [z for z, t in wanted if t == itype]
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [itype]}, {"Name": "location", "Values": zones}])
        for page in pages:
            offered.update((o["Location"], o["InstanceType"]) for o in page["InstanceTypeOfferings"])
    return [Check("instance offered", f"{itype} in {zone}", (zone, itype) in offered,
                  "offered" if (zone, itype) in offered else
                  f"{zone} does not offer {itype}; pick another zone or instance type")
            for zone, itype in wanted]


def quota_checks(quotas, pools, catalog) -> list[Check]:
    """One row per quota family: do the GPU nodes' vCPUs fit the account's On-Demand quota?

    Running instances (this stack's, if deployed, and any others) count against the same quota,
    so a pass means the nodes fit in an otherwise empty account.
    """
    need: dict[str, int] = {}
    for p in pools:
        family = p.instanceType[0]      # p5, p4d -> p; g6e -> g
        need[family] = need.get(family, 0) + p.nodes * catalog.instance(p.instanceType).vcpus
    rows = []
    for family, vcpus in need.items():
        if family not in VCPU_QUOTAS:
            rows.append(Check("vCPU quota", f"{family} instances", False,
                              f"no known On-Demand quota for '{family}' instances; check Service Quotas by hand"))
            continue
        code, title = VCPU_QUOTAS[family]
        try:
            value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        except quotas.exceptions.NoSuchResourceException:   # no applied value: the default holds
            value = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        ok = value >= vcpus
        detail = f"{title} ({code}): {value:,.0f} vCPUs, the GPU nodes need {vcpus:,}"
        if not ok:
            detail += "; request an increase in Service Quotas"
        rows.append(Check("vCPU quota", f"{family} instances", ok, detail))
    return rows


def reservation_checks(ec2, pools) -> list[Check]:
    """One row per pool with a capacity reservation or block: exists, active, same zone and type."""
    targets = []
    for p in pools:
        rid = p.capacityReservationId or (p.capacityBlock.id if p.capacityBlock else None)
        if rid:
            targets.append((p, rid))
    if not targets:
        return []
    from botocore.exceptions import ClientError

    found: dict[str, dict] = {}
    for _, rid in targets:
        try:
            resp = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("InvalidCapacityReservationId.NotFound",
                                                      "InvalidCapacityReservationId.Malformed"):
                raise
            continue
        for r in resp["CapacityReservations"]:
            found[r["CapacityReservationId"]] = r
    rows = []
    for p, rid in targets:
        r = found.get(rid)
        label = f"{rid} for {p.zone}"
        if r is None:
            rows.append(Check("capacity reservation", label, False, "not found in this account and region"))
            continue
        problems = []
        if r["State"] != "active":
            problems.append(f"state is {r['State']}, not active")
        if r["AvailabilityZone"] != p.zone:
            problems.append(f"it is in {r['AvailabilityZone']}, the pool in {p.zone}")
        if r["InstanceType"] != p.instanceType:
            problems.append(f"it holds {r['InstanceType']}, the pool runs {p.instanceType}")
        if r.get("TotalInstanceCount", 0) < p.nodes:
            problems.append(f"it holds {r.get('TotalInstanceCount', 0)} instances, the pool needs {p.nodes}")
        wants_block = p.capacityBlock is not None
        is_block = r.get("ReservationType") == "capacity-block"
        if wants_block != is_block:
            problems.append("it is a capacity block; set it as capacityBlock.id" if is_block else
                            "it is not a capacity block; set it as capacityReservationId")
        detail = "; ".join(problems) if problems else (
            f"active, {r['InstanceType']} in {r['AvailabilityZone']}, {r.get('TotalInstanceCount', 0)} instances")
        rows.append(Check("capacity reservation", label, not problems, detail))
    return rows


def run_checks(settings, clients: AwsClients) -> list[Check]:
    from sizing.catalog import load_catalog

    pools = settings.gpuPools
    return (offering_checks(clients.ec2, pools)
            + quota_checks(clients.service_quotas, pools, load_catalog())
            + reservation_checks(clients.ec2, pools))


# -- command -----------------------------------------------------------------------------------
def preflight(
    stack: str = options.STACK,
    config: Optional[Path] = options.CONFIG,
) -> None:
    from .stack_arg import load

    loaded = load(stack, config)
    settings = loaded.settings
    rows = example_checks(settings) + capacity_checks(settings) + image_checks(loaded)
    if any(not r.ok for r in rows):     # refused before AWS is asked: the stack must change first
        print_rows(stack, settings.region, rows, note="AWS not checked: replace the example values first.")
        raise typer.Exit(1)
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        rows += run_checks(settings, make_clients(settings.region))
    except NoCredentialsError:
        fail("no AWS credentials found; set AWS_PROFILE or run `aws sso login` (preflight only reads)")
    except (ClientError, BotoCoreError) as exc:
        fail(f"AWS call failed: {exc}", code=1)
    print_rows(stack, settings.region, rows)
    if any(not r.ok for r in rows):
        raise typer.Exit(1)


def print_rows(stack: str, region: str, rows: list[Check], note: str = "") -> None:
    """The table, then one summary line; each failing row also as one plain line (no wrapping)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Preflight for stack {stack} ({region})", title_justify="left")
    for col in ("check", "target", "result", "detail"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.check, r.target, r.result, r.detail)
    console = Console(width=140)
    console.print(table)
    failed = [r for r in rows if not r.ok]
    for r in failed:
        print(f"FAIL {r.target}: {r.detail}")
    warned = sum(r.ok and r.warn for r in rows)
    summary = f"{len(rows) - len(failed) - warned} passed, {len(failed)} failed" + (f", {warned} warned" if warned else "")
    print(f"{summary}.{' ' + note if note else ''}")


def register(app: typer.Typer) -> None:
    app.command("preflight", help=__doc__)(preflight)
