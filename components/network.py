"""The VPC: a public and a private subnet in every zone the stack uses, NAT, and routes.

Nodes live in the private subnets and reach the internet (image registries, the model hub)
through NAT. Public subnets hold only the NAT gateways and internet-facing load balancers.

Subnet CIDRs are indexed by the zone's letter, not by its position in the pool list, so adding
or removing a zone never renumbers (and so never replaces) the subnets of the others.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from conventions import ZONE_LETTERS

# The VPC splits into 8 equal blocks: one private block per zone letter a..g, and the last
# block cut into 8 small public subnets. With a /16: /19 private (8,190 addresses, room for the
# VPC CNI's pod IPs), /22 public.
PRIVATE_SPLIT_BITS = 3
PUBLIC_SPLIT_BITS = 3

# Subnet tags the AWS Load Balancer Controller and the in-tree service controller look for.
ELB_ROLE_TAG = "kubernetes.io/role/elb"
INTERNAL_ELB_ROLE_TAG = "kubernetes.io/role/internal-elb"


@dataclass(frozen=True)
class NetworkArgs:
    vpc_cidr: str
    region: str
    zones: tuple[str, ...]          # every zone used: the GPU pools' zones (+ one for EKS if needed)
    nat_per_zone: bool              # prod: a NAT per zone, so losing a zone never cuts egress elsewhere
    tags: dict[str, str] = field(default_factory=dict)


# Zone IDs where EKS cannot place control-plane interfaces (its CreateCluster error lists them).
EKS_UNSUPPORTED_ZONE_IDS = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})


def network_zones(gpu_zones: tuple[str, ...], region: str) -> tuple[str, ...]:
    """The GPU pools' zones, plus one more when they use a single zone: EKS needs subnets in two.

    The extra zone comes from the account's own zone list (names map to different physical
    zones in each account), skipping zones EKS does not support.
    """
    if len(gpu_zones) >= 2:
        return gpu_zones
    found = aws.get_availability_zones(state="available")
    for zone, zone_id in zip(found.names, found.zone_ids):
        if zone not in gpu_zones and zone_id not in EKS_UNSUPPORTED_ZONE_IDS and zone.startswith(region) \
                and zone[len(region):] in ZONE_LETTERS:
            return (*gpu_zones, zone)
    raise ValueError(f"{region}: no second availability zone for the EKS control plane")


def subnet_cidrs(vpc_cidr: str, region: str, zone: str) -> tuple[str, str]:
    """(private, public) CIDRs for `zone`, derived from its letter (one of ZONE_LETTERS: the
    settings refuse a zone outside them)."""
    index = ZONE_LETTERS.index(zone[len(region):])
    vpc = ipaddress.ip_network(vpc_cidr)
    blocks = list(vpc.subnets(prefixlen_diff=PRIVATE_SPLIT_BITS))
    public = list(blocks[-1].subnets(prefixlen_diff=PUBLIC_SPLIT_BITS))
    return str(blocks[index]), str(public[index])


class Network(pulumi.ComponentResource):
    """VPC, subnets per zone, internet gateway, NAT gateway(s) and route tables.

    Built in named steps: VPC and internet gateway, subnets, public routes, NAT, private routes."""

    vpc: aws.ec2.Vpc
    private_subnets: dict[str, aws.ec2.Subnet]
    public_subnets: dict[str, aws.ec2.Subnet]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:network:Network", name, None, opts)
        self._name, self._args = name, args
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,     # EKS nodes register by their private DNS name
            enable_dns_support=True,
            tags=self._tags("vpc"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._vpc_child = pulumi.ResourceOptions(parent=self.vpc)
        self.internet_gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags=self._tags("igw"), opts=self._vpc_child)
        self._subnets()
        self._public_routes()
        nat_zones = self._nat_gateways()
        self._private_routes(nat_zones)

        self.vpc_id = self.vpc.id
        self.private_subnet_ids = [s.id for s in self.private_subnets.values()]
        # Known before anything exists (derived from the zone letters): the network policies name them.
        self.private_cidrs = tuple(subnet_cidrs(args.vpc_cidr, args.region, z)[0] for z in args.zones)
        self.public_subnet_ids = [s.id for s in self.public_subnets.values()]
        self.register_outputs({
            "vpcId": self.vpc.id,
            "privateSubnetIds": self.private_subnet_ids,
            "publicSubnetIds": self.public_subnet_ids,
        })

    def _tags(self, suffix: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self._args.tags, "Name": f"{self._name}-{suffix}", **(extra or {})}

    def _subnets(self) -> None:
        """A public and a private subnet in every zone, at CIDRs derived from the zone's letter."""
        name, args = self._name, self._args
        self.public_subnets, self.private_subnets = {}, {}
        for zone in args.zones:
            private_cidr, public_cidr = subnet_cidrs(args.vpc_cidr, args.region, zone)
            self.public_subnets[zone] = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=self.vpc.id,
                availability_zone=zone,
                cidr_block=public_cidr,
                map_public_ip_on_launch=False,   # nothing but NAT and load balancers lives here
                tags=self._tags(f"public-{zone}", {ELB_ROLE_TAG: "1"}),
                opts=self._vpc_child,
            )
            self.private_subnets[zone] = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=self.vpc.id,
                availability_zone=zone,
                cidr_block=private_cidr,
                tags=self._tags(f"private-{zone}", {INTERNAL_ELB_ROLE_TAG: "1"}),
                opts=self._vpc_child,
            )

    def _public_routes(self) -> None:
        name = self._name
        public_routes = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=self.vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=self.internet_gateway.id)],
            tags=self._tags("public-rt"),
            opts=self._vpc_child,
        )
        for zone, subnet in self.public_subnets.items():
            aws.ec2.RouteTableAssociation(
                f"{name}-public-rta-{zone}", subnet_id=subnet.id, route_table_id=public_routes.id,
                opts=pulumi.ResourceOptions(parent=subnet))

    def _nat_gateways(self) -> tuple[str, ...]:
        """One NAT per zone (prod), or one NAT in the first zone that every private subnet shares."""
        name, args = self._name, self._args
        nat_zones = args.zones if args.nat_per_zone else args.zones[:1]
        self.nat_gateways: dict[str, aws.ec2.NatGateway] = {}
        for zone in nat_zones:
            eip = aws.ec2.Eip(f"{name}-nat-eip-{zone}", domain="vpc", tags=self._tags(f"nat-eip-{zone}"),
                              opts=pulumi.ResourceOptions(parent=self.vpc, depends_on=[self.internet_gateway]))
            self.nat_gateways[zone] = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=eip.id,
                subnet_id=self.public_subnets[zone].id,
                connectivity_type="public",
                tags=self._tags(f"nat-{zone}"),
                opts=pulumi.ResourceOptions(parent=self.public_subnets[zone], depends_on=[self.internet_gateway]),
            )
        return tuple(nat_zones)

    def _private_routes(self, nat_zones: tuple[str, ...]) -> None:
        name = self._name
        for zone, subnet in self.private_subnets.items():
            nat = self.nat_gateways.get(zone) or self.nat_gateways[nat_zones[0]]
            routes = aws.ec2.RouteTable(
                f"{name}-private-rt-{zone}",
                vpc_id=self.vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags=self._tags(f"private-rt-{zone}"),
                opts=self._vpc_child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-rta-{zone}", subnet_id=subnet.id, route_table_id=routes.id,
                opts=pulumi.ResourceOptions(parent=subnet))
