"""Example values a real deploy must not carry: the committed stacks hold them so that the offline
preview runs as shipped, and `llmserve preflight` and the Pulumi program on a real engine refuse
them, one line per key naming what belongs there.

What counts as an example (pure: no Pulumi, no AWS):
- a hosted zone id spelling EXAMPLE (`Z0EXAMPLE00000000000`): Route 53 ids are upper-case
  letters and digits, and AWS's documentation writes its placeholders this way;
- a hostname or e-mail domain under the names RFC 2606 reserves for documentation: example.com,
  example.net, example.org and the `.example` top-level domain;
- a CIDR inside the IPv4 blocks RFC 5737 reserves for documentation (TEST-NET-1..3:
  192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24). With one of those in `apiAllowedCidrs`, EKS
  accepts the range and `pulumi up` locks itself out of the cluster API once the control plane is
  up. A range that merely contains one (0.0.0.0/0) is not an example.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from conventions import PROJECT

EXAMPLE_DOMAINS = ("example.com", "example.net", "example.org", "example")          # RFC 2606
DOCUMENTATION_NETWORKS = tuple(ipaddress.ip_network(c) for c in (
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))                           # RFC 5737

# What belongs in each key instead, said once for preflight and the program alike.
WHAT_BELONGS = {
    "gateway.hostedZoneId": "the id of the Route 53 public hosted zone that holds gateway.hostname "
                            "(`aws route53 list-hosted-zones-by-name --dns-name <your domain>`)",
    "gateway.hostname": "the name clients will call, in a domain you own and whose zone is in Route 53",
    "gateway.acmeEmail": "an address you read: Let's Encrypt sends expiry notices there",
    "apiAllowedCidrs": "the egress ranges of the machines that run `pulumi up` and kubectl "
                       "(`curl -s https://checkip.amazonaws.com` gives yours; add /32)",
    "gatewayAllowedCidrs": "the ranges of the clients that call the gateway (or 0.0.0.0/0 for all)",
}


@dataclass(frozen=True)
class ExampleValue:
    key: str        # the stack key, without the namespace (gateway.hostname)
    value: str

    @property
    def detail(self) -> str:
        """The value and what belongs there."""
        return f"{self.value} is an example value; put {WHAT_BELONGS[self.key]}"

    @property
    def line(self) -> str:
        """One line: the key, the value, what belongs there."""
        return f"{PROJECT}:{self.key}: {self.detail}"


def example_domain(name: str) -> bool:
    name = name.rstrip(".").lower()
    return any(name == d or name.endswith("." + d) for d in EXAMPLE_DOMAINS)


def documentation_cidr(cidr: str) -> bool:
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return any(net.version == doc.version and net.subnet_of(doc) for doc in DOCUMENTATION_NETWORKS)


def example_values(settings) -> list[ExampleValue]:
    """Every example value in the stack's settings, in the order of WHAT_BELONGS."""
    gw = settings.gateway
    found: list[ExampleValue] = []
    if gw.hostedZoneId and "EXAMPLE" in gw.hostedZoneId.upper():
        found.append(ExampleValue("gateway.hostedZoneId", gw.hostedZoneId))
    if example_domain(gw.hostname):
        found.append(ExampleValue("gateway.hostname", gw.hostname))
    if gw.acmeEmail and example_domain(gw.acmeEmail.rpartition("@")[2]):
        found.append(ExampleValue("gateway.acmeEmail", gw.acmeEmail))
    for key in ("apiAllowedCidrs", "gatewayAllowedCidrs"):
        found += [ExampleValue(key, c) for c in getattr(settings, key) if documentation_cidr(c)]
    return found
