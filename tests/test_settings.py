"""Stack settings: the committed stacks load; each invalid config fails with its exact message,
one line per problem, naming the key and the fix."""
from __future__ import annotations

import copy

import pytest

from settings import SettingsError, read_stack_config, settings_from_config, stack_file, stack_settings

P5 = "p5.48xlarge"


def prod_with(**overrides) -> dict:
    """The prod stack's config with whole keys replaced (None removes a key)."""
    config = copy.deepcopy(read_stack_config(stack_file("prod")))
    for key, value in overrides.items():
        full = key.replace("__", ":") if "__" in key else f"llm-serving:{key}"
        if value is None:
            config.pop(full, None)
        else:
            config[full] = value
    return config


def problems(config: dict) -> list[str]:
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", config)
    return err.value.problems


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_committed_stacks_load(stack):
    settings = stack_settings(stack)
    assert settings.environment == stack
    assert settings.zones


def test_prod_is_the_reference_design():
    s = stack_settings("prod")
    assert (s.region, s.model.id, s.model.weights) == ("us-east-1", "llama-3-70b", "fp8")
    assert [(p.zone, p.instanceType, p.nodes) for p in s.gpuPools] == [("us-east-1a", P5, 1), ("us-east-1b", P5, 1)]
    assert (s.workload.qps, s.workload.ttftSeconds, s.workload.tpotSeconds) == (10, 1.0, 0.040)
    assert s.nat_per_zone


def test_staging_spans_two_zones_and_dev_one():
    assert len(stack_settings("staging").zones) == 2
    assert len(stack_settings("dev").zones) == 1
    assert not stack_settings("dev").nat_per_zone


INVALID = [
    pytest.param(
        prod_with(network={"vpcCidr": "10.40.0.0/24"}),
        ["llm-serving:network.vpcCidr: a /24 VPC does not work here; use a /16 to /20, e.g. 10.40.0.0/16"],
        id="vpc-too-small"),
    pytest.param(
        prod_with(network={"vpcCidr": "10.40.0.1/16"}),
        ["llm-serving:network.vpcCidr: 10.40.0.1/16 has host bits set"],
        id="vpc-cidr-host-bits"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-west-2a", "instanceType": P5}, {"zone": "us-east-1b", "instanceType": P5}]),
        ["llm-serving:gpuPools[0].zone: 'us-west-2a' is not a zone of the region us-east-1; "
         "use a zone such as us-east-1a"],
        id="zone-outside-the-region"),
    pytest.param(
        # Not even four p4d nodes (PP=4) hold DeepSeek-R1's 1,342 GB of BF16 weights (405B BF16 would fit).
        prod_with(model={"id": "deepseek-r1", "weights": "bf16"},
                  gpuPools=[{"zone": "us-east-1a", "instanceType": "p4d.24xlarge"},
                            {"zone": "us-east-1b", "instanceType": "p4d.24xlarge"}]),
        ["llm-serving:gpuPools: deepseek-r1 does not fit one p4d.24xlarge: 671 B parameters are 1,342 GB of bf16 "
         "weights against 320 GB of GPU memory (8 x 40 GB, 256 GB of it usable), before any KV cache; cheapest "
         "alternative: p5e.48xlarge with fp8 weights, tp over 8 GPUs per replica (2 replicas on 2 nodes, $86.52/h)"],
        id="model-does-not-fit-the-instance"),
    pytest.param(
        prod_with(model={"id": "llama-3-70b", "tensorParallel": 16}),
        ["llm-serving:model.tensorParallel: tensor parallel 16 exceeds the 8 GPUs of one p5.48xlarge node "
         "(a TP group never spans nodes); use at most 8"],
        id="tp-larger-than-a-node"),
    pytest.param(
        prod_with(model={"id": "llama-3-70b", "tensorParallel": 3}),
        ["llm-serving:model.tensorParallel: tensor parallel 3 does not divide the 64 attention heads of "
         "llama-3-70b; use one of 1, 2, 4, 8"],
        id="tp-does-not-divide-the-heads"),
    pytest.param(
        prod_with(replica=2),
        ["llm-serving:replica: unknown key; did you mean replicas?"],
        id="unknown-key"),
    pytest.param(
        prod_with(workload={"qps": 10, "inputToken": 1000}),
        ["llm-serving:workload.inputToken: unknown key; did you mean inputTokens?"],
        id="unknown-nested-key"),
    pytest.param(
        prod_with(workload={"inputTokens": 1000, "outputTokens": 300}),
        ["llm-serving:workload: give exactly one of qps (open loop) or concurrency (closed loop)"],
        id="missing-qps"),
    pytest.param(
        prod_with(workload=None),
        ["llm-serving:workload: required; add it to the stack config"],
        id="missing-workload"),
    pytest.param(
        prod_with(aws__region=None),
        ["aws:region: missing; set the stack's AWS region, e.g. `aws:region: us-east-1`"],
        id="missing-region"),
    pytest.param(
        prod_with(hubToken="hf_plaintext"),
        ["llm-serving:hubToken: must be a secret; set it with `pulumi config set --secret hubToken ...`"],
        id="secret-in-plain-text"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "instanceType": "p9.big"}]),
        ["llm-serving:gpuPools[0].instanceType: unknown instance type 'p9.big'; choose one of: g6e.48xlarge, "
         "p4d.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge"],
        id="unknown-instance-type"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "instanceType": P5}, {"zone": "us-east-1b", "instanceType": "p5e.48xlarge"}]),
        ["llm-serving:gpuPools: pools mix instance types (p5.48xlarge, p5e.48xlarge); "
         "use one instance type for all GPU pools"],
        id="mixed-instance-types"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "nodes": 0}]),
        ["llm-serving:gpuPools[0].nodes: must be at least 1 (got 0)"],
        id="zero-nodes"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "capacityReservationId": "res-1"}, {"zone": "us-east-1b"}]),
        ["llm-serving:gpuPools[0].capacityReservationId: 'res-1' is not a capacity reservation id: cr- and 17 hex "
         "digits, as `aws ec2 describe-capacity-reservations` lists them"],
        id="malformed-capacity-reservation-id"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "capacityReservationId": "cr-0123abcd"}, {"zone": "us-east-1b"}]),
        ["llm-serving:gpuPools[0].capacityReservationId: 'cr-0123abcd' is not a capacity reservation id: cr- and 17 "
         "hex digits, as `aws ec2 describe-capacity-reservations` lists them"],
        id="short-capacity-reservation-id"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "capacityBlock": {"id": "cb-0123456789abcdef0"}},
                            {"zone": "us-east-1b"}]),
        ["llm-serving:gpuPools[0].capacityBlock.id: 'cb-0123456789abcdef0' is not a capacity reservation id: cr- "
         "and 17 hex digits, as `aws ec2 describe-capacity-reservations` lists them"],
        id="capacity-block-id-is-an-offering-id"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a"}, {"zone": "us-east-1b", "capacityBlock": {
            "purchase": True, "allowPurchase": True, "offeringId": "cr-0123456789abcdef0", "durationHours": 24}}]),
        ["llm-serving:gpuPools[1].capacityBlock.offeringId: 'cr-0123456789abcdef0' is not a capacity block offering "
         "id: cb- and 17 hex digits, as `aws ec2 describe-capacity-block-offerings` lists them"],
        id="malformed-capacity-block-offering-id"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a"}, {"zone": "us-east-1b", "capacityBlock": {
            "purchase": True, "offeringId": "cb-0123456789abcdef0", "durationHours": 24}}]),
        ["llm-serving:gpuPools[1].capacityBlock.allowPurchase: a capacity block purchase is non-refundable; "
         "set allowPurchase: true to confirm it"],
        id="capacity-block-purchase-unconfirmed"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "capacityBlock": {}}, {"zone": "us-east-1b"}]),
        ["llm-serving:gpuPools[0].capacityBlock: give id (a block you hold, cr-...) or purchase: true"],
        id="capacity-block-without-id-or-purchase"),
    pytest.param(
        prod_with(gpuPools=[{"zone": "us-east-1a", "capacityReservationId": "cr-0123456789abcdef0",
                             "capacityBlock": {"id": "cr-0fedcba9876543210"}}, {"zone": "us-east-1b"}]),
        ["llm-serving:gpuPools[0]: set capacityReservationId or capacityBlock, not both"],
        id="reservation-and-block"),
    pytest.param(
        prod_with(kubernetesVersion="1.33"),
        ["llm-serving:kubernetesVersion: unknown Kubernetes version '1.33'; choose one of: 1.34, 1.35"],
        id="unsupported-kubernetes-version"),
    pytest.param(
        prod_with(environment="qa"),
        ["llm-serving:environment: unknown environment 'qa'; choose one of: dev, staging, prod"],
        id="unknown-environment"),
    pytest.param(
        prod_with(apiAllowedCidrs=["203.0.113.7/24"]),
        ["llm-serving:apiAllowedCidrs: 203.0.113.7/24 has host bits set"],
        id="cidr-with-host-bits"),
]


@pytest.mark.parametrize("config, expected", INVALID)
def test_invalid_config_fails_with_its_exact_message(config, expected):
    assert problems(config) == expected


def test_every_problem_is_reported_at_once():
    config = prod_with(environment="qa", replica=2)
    assert problems(config) == ["llm-serving:environment: unknown environment 'qa'; choose one of: dev, staging, prod",
                                "llm-serving:replica: unknown key; did you mean replicas?"]
