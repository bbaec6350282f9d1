"""What one engine step costs: the analytic engine's step model (`sizing.step`), never re-derived.

A step that decodes n sequences and prefills c prompt tokens costs `StepModel.step_s(n, c)`,
the same function the analytic engine's TPOT, TTFT and capacity come from: under a `mixed`
profile one roofline over all n + c tokens (weights read once) plus each part's attention; under
the `additive` reference profile the seed's decode step plus the prefill tokens.

Approximations, stated where they matter (README):
- a decode step reads the KV cache of the workload's mean context (`input + output / 2`),
  whatever the lengths of the sequences actually in the batch;
- prefill attention is charged per token at the workload's mean prompt length.
"""
from __future__ import annotations

from sizing.memory import GB
from sizing.model import ReplicaModel
from sizing.step import StepModel

StepCost = StepModel     # the simulator's name for it


def step_cost(model: ReplicaModel) -> StepModel:
    """The per-step cost of one analytic replica model: a speculative replica's plain step (its
    `step` prices a verify step, which `verify_cost` hands to the simulator's speculation)."""
    step = model.step
    return step if isinstance(step, StepModel) else getattr(model, "base_step")


class VerifyStep:
    """A speculative verify step priced by the plain step model, for a plan whose replica model
    prices none: n sequences each verify their last token and k drafts, so the step is a step of
    n decodes plus n k more tokens priced as prompt tokens (the weights read once; each extra row
    costs its GEMM work and its attention at the mean context). The drafter's own passes are not
    counted (ngram's run on the CPU); a plan from `sizing.speculative` prices them itself."""

    def __init__(self, step: StepModel, draft_tokens: int):
        self.step, self.draft_tokens = step, draft_tokens

    def decode_s(self, n: float) -> float:
        return self.step.step_s(n, n * self.draft_tokens) if n > 0 else 0.0

    def step_s(self, n: float, c: float) -> float:
        return self.step.step_s(n, c + n * self.draft_tokens)


def verify_cost(model: ReplicaModel, draft_tokens: int):
    """What a speculative decode step costs on this replica model: its own verify step when the
    planner priced one (`sizing.speculative`'s replica, whose `step` is that), else `VerifyStep`."""
    step = model.step
    if not isinstance(step, StepModel) and hasattr(step, "decode_s") and hasattr(step, "step_s"):
        return step
    return VerifyStep(step, draft_tokens)


def kv_capacity_tokens(model: ReplicaModel) -> int:
    """Tokens the replica's KV cache holds (vLLM's block pool, counted in tokens)."""
    mem = model.memory
    return mem.kv_cache_tokens if mem.kv_cache_tokens else int(mem.kv_budget_gb * GB // mem.kv_bytes_per_token)
