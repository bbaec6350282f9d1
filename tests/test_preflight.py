"""`llmserve preflight`: offerings against moto's EC2 data, quotas and capacity reservations
against botocore's Stubber. Nothing here reaches AWS."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import boto3
import pytest
import yaml
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber
from moto import mock_aws

from conventions import VLLM_EFA_IMAGE
from llmserve import preflight_cmd
from llmserve.cli import main
from llmserve.preflight_cmd import AwsClients, Check, offering_checks, quota_checks, reservation_checks
from settings import read_stack_config, stack_file
from settings.schema import CapacityBlock, GpuPoolSettings
from sizing.catalog import load_catalog

P5 = "p5.48xlarge"
P_QUOTA = {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}
G_QUOTA = {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"}


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_SESSION_TOKEN", "testing"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(key, value)


@pytest.fixture
def moto_ec2(monkeypatch):
    # Without the ~1,300 sample AMIs (each with a volume and a snapshot) moto otherwise creates in
    # every region it is asked about: preflight reads no image, and they were most of these tests' time.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        yield lambda region: boto3.client("ec2", region_name=region)


def stubbed(service: str, region: str = "us-east-1"):
    client = boto3.client(service, region_name=region)
    return client, Stubber(client)


def quota_response(code: str, vcpus: float) -> dict:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": "Running On-Demand instances",
                      "Value": vcpus, "Unit": "None", "Adjustable": True, "GlobalQuota": False}}


def reservation(rid: str, zone="us-east-1b", itype=P5, state="active", count=1, kind="default") -> dict:
    return {"CapacityReservations": [{
        "CapacityReservationId": rid, "InstanceType": itype, "AvailabilityZone": zone, "State": state,
        "TotalInstanceCount": count, "AvailableInstanceCount": count, "InstancePlatform": "Linux/UNIX",
        "ReservationType": kind}]}


def pool(zone: str, itype: str = P5, nodes: int = 1, **kw) -> GpuPoolSettings:
    return GpuPoolSettings(zone=zone, instanceType=itype, nodes=nodes, **kw)


# -- instance type offerings (moto) ---------------------------------------------------------------
def test_offering_passes_where_the_zones_offer_the_type(moto_ec2):
    rows = offering_checks(moto_ec2("us-east-1"), [pool("us-east-1a"), pool("us-east-1b")])
    assert rows == [Check("instance offered", f"{P5} in us-east-1a", True, "offered"),
                    Check("instance offered", f"{P5} in us-east-1b", True, "offered")]


def test_offering_fails_in_a_region_without_the_type(moto_ec2):
    (row,) = offering_checks(moto_ec2("eu-west-1"), [pool("eu-west-1a")])
    assert row == Check("instance offered", f"{P5} in eu-west-1a", False,
                        f"eu-west-1a does not offer {P5}; pick another zone or instance type")


def test_offering_is_checked_once_per_zone(moto_ec2):
    rows = offering_checks(moto_ec2("us-east-1"), [pool("us-east-1a"), pool("us-east-1a", name="second")])
    assert [r.target for r in rows] == [f"{P5} in us-east-1a"]


# -- vCPU quota (Stubber) -------------------------------------------------------------------------
@pytest.mark.parametrize("quota, ok, detail", [
    (384.0, True, "Running On-Demand P instances (L-417A185B): 384 vCPUs, the GPU nodes need 384"),
    (192.0, False, "Running On-Demand P instances (L-417A185B): 192 vCPUs, the GPU nodes need 384; "
                   "request an increase in Service Quotas"),
])
def test_p_instance_quota_must_cover_every_gpu_node(quota, ok, detail):
    client, stub = stubbed("service-quotas")
    stub.add_response("get_service_quota", quota_response("L-417A185B", quota), P_QUOTA)
    with stub:
        rows = quota_checks(client, [pool("us-east-1a"), pool("us-east-1b")], load_catalog())
    assert rows == [Check("vCPU quota", "p instances", ok, detail)]
    stub.assert_no_pending_responses()


def test_quota_without_an_applied_value_falls_back_to_the_default():
    client, stub = stubbed("service-quotas")
    stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=P_QUOTA)
    stub.add_response("get_aws_default_service_quota", quota_response("L-417A185B", 0.0), P_QUOTA)
    with stub:
        (row,) = quota_checks(client, [pool("us-east-1a")], load_catalog())
    assert not row.ok and row.detail.startswith("Running On-Demand P instances (L-417A185B): 0 vCPUs")


def test_g_instances_use_the_g_and_vt_quota():
    client, stub = stubbed("service-quotas")
    stub.add_response("get_service_quota", quota_response("L-DB2E81BA", 192.0), G_QUOTA)
    with stub:
        (row,) = quota_checks(client, [pool("us-east-1a", "g6e.48xlarge")], load_catalog())
    assert row == Check("vCPU quota", "g instances", True,
                        "Running On-Demand G and VT instances (L-DB2E81BA): 192 vCPUs, the GPU nodes need 192")


# -- capacity reservations (Stubber) ----------------------------------------------------------------
RID = "cr-0123456789abcdef0"


@pytest.mark.parametrize("found, configured, ok, detail", [
    (reservation(RID), pool("us-east-1b", capacityReservationId=RID), True,
     f"active, {P5} in us-east-1b, 1 instances"),
    (reservation(RID, state="expired"), pool("us-east-1b", capacityReservationId=RID), False,
     "state is expired, not active"),
    (reservation(RID, zone="us-east-1c"), pool("us-east-1b", capacityReservationId=RID), False,
     "it is in us-east-1c, the pool in us-east-1b"),
    (reservation(RID, itype="p5e.48xlarge"), pool("us-east-1b", capacityReservationId=RID), False,
     f"it holds p5e.48xlarge, the pool runs {P5}"),
    (reservation(RID, count=1), pool("us-east-1b", nodes=2, capacityReservationId=RID), False,
     "it holds 1 instances, the pool needs 2"),
    (reservation(RID, kind="capacity-block"), pool("us-east-1b", capacityReservationId=RID), False,
     "it is a capacity block; set it as capacityBlock.id"),
    (reservation(RID, kind="capacity-block", state="scheduled"), pool("us-east-1b", capacityBlock=CapacityBlock(id=RID)),
     False, "state is scheduled, not active"),
    (reservation(RID, kind="capacity-block"), pool("us-east-1b", capacityBlock=CapacityBlock(id=RID)), True,
     f"active, {P5} in us-east-1b, 1 instances"),
])
def test_capacity_reservation_must_exist_be_active_and_match(found, configured, ok, detail):
    client, stub = stubbed("ec2")
    stub.add_response("describe_capacity_reservations", found, {"CapacityReservationIds": [RID]})
    with stub:
        (row,) = reservation_checks(client, [pool("us-east-1a"), configured])
    assert row == Check("capacity reservation", f"{RID} for us-east-1b", ok, detail)


def test_missing_capacity_reservation_fails():
    client, stub = stubbed("ec2")
    stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound",
                          expected_params={"CapacityReservationIds": [RID]})
    with stub:
        (row,) = reservation_checks(client, [pool("us-east-1b", capacityReservationId=RID)])
    assert row == Check("capacity reservation", f"{RID} for us-east-1b", False, "not found in this account and region")


def test_pools_without_reservations_make_no_calls():
    client, stub = stubbed("ec2")
    with stub:
        assert reservation_checks(client, [pool("us-east-1a")]) == []


# -- the command -------------------------------------------------------------------------------------
@pytest.fixture
def inject(monkeypatch, moto_ec2):
    """Make `llmserve preflight` use moto EC2 and a stubbed Service Quotas client."""
    def use(quota_vcpus: float):
        def factory(region: str) -> AwsClients:
            quotas, stub = stubbed("service-quotas", region)
            stub.add_response("get_service_quota", quota_response("L-417A185B", quota_vcpus), P_QUOTA)
            stub.activate()
            return AwsClients(ec2=moto_ec2(region), service_quotas=quotas)
        monkeypatch.setattr(preflight_cmd, "make_clients", factory)
    return use


# The committed prod stack with its example values replaced by values of the right shape.
REAL_VALUES = {"llm-serving:apiAllowedCidrs": ["52.94.76.0/24"]}
REAL_GATEWAY = {"hostname": "llm.platform.acme-corp.io", "hostedZoneId": "Z04517273VCLIDX9UFQFA",
                "acmeEmail": "platform@acme-corp.io"}


def real_prod(tmp_path, **changes) -> list[str]:
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config.update(REAL_VALUES)
    config["llm-serving:gateway"] = {**config["llm-serving:gateway"], **REAL_GATEWAY}
    config.update(changes)
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return ["preflight", "--stack", "prod", "--config", str(path)]


def test_preflight_refuses_the_committed_example_values_before_asking_aws(monkeypatch, capsys):
    def no_aws(region):
        raise AssertionError("AWS was asked")
    monkeypatch.setattr(preflight_cmd, "make_clients", no_aws)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    assert main(["preflight", "--stack", "prod"]) == 1
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert [line for line in lines if line.startswith("FAIL ")] == [
        "FAIL llm-serving:gateway.hostedZoneId: Z0EXAMPLE00000000000 is an example value; put the id of the Route 53 "
        "public hosted zone that holds gateway.hostname (`aws route53 list-hosted-zones-by-name --dns-name <your "
        "domain>`)",
        "FAIL llm-serving:gateway.hostname: llm.example.com is an example value; put the name clients will call, in "
        "a domain you own and whose zone is in Route 53",
        "FAIL llm-serving:gateway.acmeEmail: platform-team@example.com is an example value; put an address you read: "
        "Let's Encrypt sends expiry notices there",
        "FAIL llm-serving:apiAllowedCidrs: 203.0.113.0/24 is an example value; put the egress ranges of the machines "
        "that run `pulumi up` and kubectl (`curl -s https://checkip.amazonaws.com` gives yours; add /32)"]
    assert lines[-1] == "0 passed, 4 failed, 2 warned. AWS not checked: replace the example values first."


def test_preflight_prod_passes_with_enough_quota(inject, capsys, tmp_path):
    inject(384.0)
    assert main(real_prod(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "Preflight for stack prod (us-east-1)" in out
    assert out.rstrip().splitlines()[-1] == "3 passed, 0 failed, 2 warned."


def test_preflight_fails_with_exit_1_when_the_quota_is_short(inject, capsys, tmp_path):
    inject(96.0)
    assert main(real_prod(tmp_path)) == 1
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2:] == ["FAIL p instances: Running On-Demand P instances (L-417A185B): 96 vCPUs, the GPU nodes "
                          "need 384; request an increase in Service Quotas", "2 passed, 1 failed, 2 warned."]


def test_preflight_fails_for_a_zone_without_the_instance_type(inject, capsys, tmp_path):
    inject(10_000.0)
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config.update(REAL_VALUES)
    config["llm-serving:gateway"] = {**config["llm-serving:gateway"], **REAL_GATEWAY}
    config["aws:region"] = "eu-west-1"
    config["llm-serving:gpuPools"] = [{"zone": "eu-west-1a", "instanceType": P5},
                                      {"zone": "eu-west-1b", "instanceType": P5}]
    path = tmp_path / "Pulumi.eu.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    assert main(["preflight", "--stack", "eu", "--config", str(path)]) == 1
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "1 passed, 2 failed, 2 warned."


def test_preflight_invalid_config_exits_2_with_one_line(capsys, tmp_path):
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config["llm-serving:model"] = {"id": "llama-3-70b", "tensorParallel": 16}
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    assert main(["preflight", "--stack", "bad", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: --config {path}: llm-serving:model.tensorParallel: tensor parallel 16 exceeds the 8 GPUs of one "
        "p5.48xlarge node (a TP group never spans nodes); use at most 8"]
    assert captured.out == ""


def test_preflight_without_credentials_exits_2(monkeypatch, capsys, tmp_path):
    def no_credentials(region):
        raise NoCredentialsError()
    monkeypatch.setattr(preflight_cmd, "make_clients", no_credentials)
    assert main(real_prod(tmp_path)) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: no AWS credentials found; set AWS_PROFILE or run `aws sso login` (preflight only reads)"]


# -- which capacity backs each GPU pool (no AWS) ------------------------------------------------------
UNRESERVED = ("no reservation: On-Demand p5.48xlarge capacity may be unavailable in us-east-1a, and the node group "
              "then fails with InsufficientInstanceCapacity. Reserve it: `aws ec2 create-capacity-reservation "
              "--instance-type p5.48xlarge --instance-platform Linux/UNIX --availability-zone us-east-1a "
              "--instance-count 1` and set gpuPools[0].capacityReservationId, or find a Capacity Block (`aws ec2 "
              "describe-capacity-block-offerings --instance-type p5.48xlarge --instance-count 1 "
              "--capacity-duration-hours 24`) and set gpuPools[0].capacityBlock (docs/capacity.md)")


@pytest.mark.parametrize("configured, result, detail", [
    (pool("us-east-1a"), "warn", UNRESERVED),
    (pool("us-east-1a", capacityReservationId=RID), "pass", f"On-Demand Capacity Reservation {RID}"),
    (pool("us-east-1a", capacityBlock=CapacityBlock(id=RID)), "pass",
     f"Capacity Block {RID}; its nodes launch only inside the block's window"),
    (pool("us-east-1a", capacityBlock=CapacityBlock(purchase=True, allowPurchase=True, offeringId="cb-0123456789abcdef0",
                                                    durationHours=24)), "pass",
     "Capacity Block bought by `pulumi up` from offering cb-0123456789abcdef0 (24 h, non-refundable)"),
])
def test_each_gpu_pool_states_the_capacity_behind_it(configured, result, detail):
    class Stack:
        gpuPools = (configured,)
    (row,) = preflight_cmd.capacity_checks(Stack)
    assert (row.check, row.target, row.result, row.detail) == (
        "capacity", "gpuPools[0] (p5.48xlarge x 1 in us-east-1a)", result, detail)


# -- the multi-node groups' image, pinned by tag only (conventions.VLLM_EFA_IMAGE) ----------------
class Loaded:
    """What image_checks reads of an `offline.stack.LoadedStack`: its plan, or the refusal of one."""
    def __init__(self, nodes_per_replica: int | None, kv_link: str | None = None):
        self.nodes, self.kv_link = nodes_per_replica, kv_link

    @property
    def plan(self):
        from offline.stack import StackError
        if self.nodes is None:
            raise StackError("stacks/Pulumi.x.yaml", ["llm-serving:gpuPools: too small"])
        kv = SimpleNamespace(link=self.kv_link) if self.kv_link else None
        return SimpleNamespace(nodes_per_replica=self.nodes, kv_transfer=kv)


def test_a_plan_spanning_nodes_warns_that_its_image_is_pinned_by_tag_only():
    (row,) = preflight_cmd.image_checks(Loaded(2))
    assert (row.check, row.target, row.result) == ("image digest", "multi-node groups", "warn")
    assert row.detail == (
        f"{VLLM_EFA_IMAGE} is pinned by tag only (no published digest found); resolve it with "
        f"`crane digest {VLLM_EFA_IMAGE}` or `docker buildx imagetools inspect {VLLM_EFA_IMAGE}` and set "
        "conventions.VLLM_EFA_IMAGE_DIGEST (docs/multi-node.md)")


def test_kv_over_efa_warns_that_its_image_is_pinned_by_tag_only():
    (row,) = preflight_cmd.image_checks(Loaded(1, kv_link="efa"))
    assert (row.check, row.target, row.result) == ("image digest", "prefill/decode pods (KV over EFA)", "warn")


@pytest.mark.parametrize("nodes, kv_link", [(1, None), (1, "nvlink"), (None, None)],
                         ids=["one-node replicas", "KV over NVLink", "a plan the sizing refuses"])
def test_no_image_row_without_groups_or_kv_over_efa(nodes, kv_link):
    assert preflight_cmd.image_checks(Loaded(nodes, kv_link)) == []


def test_no_image_row_once_the_digest_is_pinned(monkeypatch):
    import conventions
    monkeypatch.setattr(conventions, "VLLM_EFA_IMAGE_DIGEST", "sha256:" + "0" * 64)
    assert preflight_cmd.image_checks(Loaded(2)) == []
