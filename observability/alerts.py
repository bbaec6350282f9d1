"""An alert as typed data: what it reads, what it compares with, and what it should do.

`rules.plan_alerts` builds one `Alert` per alert from the plan. Everything else reads these
objects, never a list of alert names: the Prometheus rule file (`Alert.rule`), the dashboard's
threshold lines (`guards`, `threshold`), `llmserve twin`'s expectations (`expected`) and
`llmserve check` (the latency alerts' `statistic` of their `family`, against their `threshold`).

The three scenarios the plan makes claims about:
- planned load: the plan's own load, within what the replicas left after a loss carry and below
  the capacity-share alert;
- zone loss: the same load while one zone (or the plan's failure domain) is down;
- overload: an offered load past a threshold (`Expected.overload_above_qps`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Behaviour(str, Enum):
    SILENT = "silent"            # must not fire
    FIRES = "fires"              # must fire, once the condition has lasted its `for` (plus detection lag)
    NOT_JUDGED = "not judged"    # may or may not fire: the plan says nothing about it


@dataclass(frozen=True)
class Expected:
    """What the alert should do under the planned load, a zone loss and an overload."""
    planned_load: Behaviour = Behaviour.SILENT
    zone_loss: Behaviour = Behaviour.NOT_JUDGED
    overload: Behaviour = Behaviour.NOT_JUDGED
    overload_above_qps: float | None = None   # overload: it must fire once the offered load passes this
    # How far past overload_above_qps the load must be before firing is required: alerts that
    # compare the measured request rate itself with the threshold see the Poisson noise of it.
    overload_margin: float = 1.0
    per_zone: bool = False                    # zone loss: it fires with the lost zone as its `zone` label


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str                     # a Prometheus duration
    severity: str                 # critical | warning
    summary: str
    description: str
    guards: str                   # the plan (or alert policy) figure it guards, by its attribute name
    threshold: float | None       # that figure as the expression compares with it (None: no single number)
    statistic: str | None = None  # latency alerts: the SLO statistic the expression reads (mean, p95, ...)
    family: str | None = None     # latency alerts: the vLLM histogram they read at that statistic
    expected: Expected = Expected()

    def rule(self) -> dict:
        """The Prometheus alerting rule."""
        return {"alert": self.name, "expr": self.expr, "for": self.for_, "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description}}
