"""`llmserve preflight`: offerings against moto's EC2 data, quotas and capacity reservations
against botocore's Stubber. Nothing here reaches AWS."""
from __future__ import annotations

import copy

import boto3
import pytest
import yaml
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber
from moto import mock_aws

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
def moto_ec2():
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


def test_preflight_prod_passes_with_enough_quota(inject, capsys):
    inject(384.0)
    assert main(["preflight", "--stack", "prod"]) == 0
    out = capsys.readouterr().out
    assert "Preflight for stack prod (us-east-1)" in out
    assert out.rstrip().splitlines()[-1] == "3 passed, 0 failed."


def test_preflight_fails_with_exit_1_when_the_quota_is_short(inject, capsys):
    inject(96.0)
    assert main(["preflight", "--stack", "prod"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert out.rstrip().splitlines()[-1] == "2 passed, 1 failed."


def test_preflight_fails_for_a_zone_without_the_instance_type(inject, capsys, tmp_path):
    inject(10_000.0)
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config["aws:region"] = "eu-west-1"
    config["llm-serving:gpuPools"] = [{"zone": "eu-west-1a", "instanceType": P5},
                                      {"zone": "eu-west-1b", "instanceType": P5}]
    path = tmp_path / "Pulumi.eu.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    assert main(["preflight", "--stack", "eu", "--config", str(path)]) == 1
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "1 passed, 2 failed."


def test_preflight_invalid_config_exits_2_with_one_line(capsys, tmp_path):
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    config["llm-serving:model"] = {"id": "llama-3-70b", "tensorParallel": 16}
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    assert main(["preflight", "--stack", "bad", "--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: --config {path}: llm-serving:model.tensorParallel: 16 is larger than a p5.48xlarge node (8 GPUs); "
        "a TP group never spans nodes, use at most 8"]
    assert captured.out == ""


def test_preflight_without_credentials_exits_2(monkeypatch, capsys):
    def no_credentials(region):
        raise NoCredentialsError()
    monkeypatch.setattr(preflight_cmd, "make_clients", no_credentials)
    assert main(["preflight", "--stack", "prod"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: no AWS credentials found; set AWS_PROFILE or run `aws sso login` (preflight only reads)"]
