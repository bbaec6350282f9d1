"""The gateway's choice of replica for each request.

- round-robin: in turn, blind to load (Envoy's default).
- least-outstanding: fewest requests waiting or running, in its engine or its API server
  (Envoy's least-request; with two
  replicas its power-of-two-choices sampling is exactly this).
- least-pending-tokens: fewest prefill and output tokens still to compute, close to what the
  Gateway API Inference Extension's endpoint picker scores (queue depth and KV-cache load).
Ties go to the next replica in turn, so equal replicas share the load evenly.
"""
from __future__ import annotations

from .replica import Replica

ROUTERS = ("round-robin", "least-outstanding", "least-pending-tokens")


class Router:
    def __init__(self, policy: str, replicas: list[Replica]):
        if policy not in ROUTERS:
            raise ValueError(f"router '{policy}': choose one of {', '.join(ROUTERS)}")
        self.policy = policy
        self.replicas = replicas
        self._turn = 0
        self.healthy = [r for r in replicas if r.up]

    def refresh(self) -> None:
        """After a replica is lost or back."""
        self.healthy = [r for r in self.replicas if r.up]

    def pick(self, t: float) -> Replica | None:
        healthy = self.healthy
        count = len(healthy)
        if count == 0:
            return None
        self._turn = turn = (self._turn + 1) % count
        if self.policy == "round-robin" or count == 1:
            return healthy[turn]
        if count == 2 and self.policy == "least-outstanding":
            # the loop below for two replicas (the usual N+1 by zone): the other one only when it
            # holds strictly fewer (Replica.outstanding(), inline: this runs once per request)
            first, other = healthy[turn], healthy[1 - turn]
            if (len(other.waiting) + len(other.running) + other.admitting
                    < len(first.waiting) + len(first.running) + first.admitting):
                return other
            return first
        best, best_load = None, None
        outstanding = self.policy == "least-outstanding"
        for i in range(count):
            rep = healthy[(turn + i) % count]
            load = len(rep.waiting) + len(rep.running) + rep.admitting if outstanding else rep.pending_tokens(t)
            if best_load is None or load < best_load:
                best, best_load = rep, load
        return best
