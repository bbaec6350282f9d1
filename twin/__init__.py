"""A local twin of the monitoring path, and the plan checked and recalibrated from live metrics.

- `vllm_metrics`: the /metrics exposition of vLLM 0.29.0 (families, labels, buckets).
- `timeline`: a simulator run turned into per-replica metric state over time.
- `exporters`: emulated vLLM replicas, kube-state-metrics and Envoy on 127.0.0.1.
- `servers`: a real Prometheus and Alertmanager on loopback, with the program's rules.
- `scenario`: `llmserve twin`: which alerts fired and resolved, against what the plan expects.
- `promapi`, `check`, `calibrate`: `llmserve check` and `llmserve calibrate` on any Prometheus.

Imports sizing, simulator, observability and settings; never llmserve (the CLI sits on top).
"""

from __future__ import annotations

from conventions import SERVING_NAMESPACE as DEFAULT_NAMESPACE   # the reference design's (settings' default)


def load_plan(stack: str | None):
    """(plan, serving namespace) of a stack, or of the reference design when stack is None.

    ValueError names the stack and what is wrong with it.
    """
    from sizing.model import SizingError, Workload
    from sizing.planner import PlanError, PlanRequest, plan

    namespace = DEFAULT_NAMESPACE
    if stack is None:
        request = PlanRequest(workload=Workload())
    else:
        from settings import SettingsError, load_stack
        try:
            settings = load_stack(stack)
        except SettingsError as exc:
            raise ValueError(f"--stack {stack}: " + "; ".join(exc.problems)) from None
        except FileNotFoundError:
            raise ValueError(f"--stack {stack}: no stacks/Pulumi.{stack}.yaml") from None
        request, namespace = settings.plan_request(), settings.serving.namespace
    try:
        return plan(request), namespace
    except (SizingError, PlanError) as exc:
        raise ValueError(f"--stack {stack or '(reference)'}: {exc}") from None
