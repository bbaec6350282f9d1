"""Where pods land: one shape of spread constraint for every workload the program schedules.

Pure data, no Pulumi: the controllers' chart values and our own pod specs build their
`topologySpreadConstraints` here, so a zone-redundant workload is spread the same way everywhere.
"""
from __future__ import annotations

from collections.abc import Mapping

ZONE_KEY, HOST_KEY = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


def spread(labels: Mapping[str, str], keys: tuple[str, ...] = (ZONE_KEY,),
           when: str = "DoNotSchedule") -> list[dict]:
    """At most one pod more on any zone (or node) than on another, for the pods matching `labels`:
    one replica per zone where there are zones enough, and a rolling update's surge pod still fits."""
    return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
             "labelSelector": {"matchLabels": dict(labels)}} for key in keys]
