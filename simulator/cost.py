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
    """The per-step cost of one analytic replica model."""
    return model.step


def kv_capacity_tokens(model: ReplicaModel) -> int:
    """Tokens the replica's KV cache holds (vLLM's block pool, counted in tokens)."""
    mem = model.memory
    return mem.kv_cache_tokens if mem.kv_cache_tokens else int(mem.kv_budget_gb * GB // mem.kv_bytes_per_token)
