"""What one engine step costs, derived from the analytic engine's `ReplicaModel` (never re-derived).

The analytic model splits a replica's time into prefill (a share u = QPS x
`share_per_request_s`) and decode steps (`step_s(n)` for n running sequences), and gets
TPOT = step(n) / (1 - u). A chunked-prefill step that decodes n sequences and prefills c prompt
tokens therefore costs

    step_s(n) + c x share_per_request_s / input_tokens

and over any stretch of time the prefill tokens take exactly the share u of it, so the mean step
(the mean TPOT) is step(n) / (1 - u), as in the analytic model. A step with nothing to decode
costs only its prefill: the analytic model charges no decode step while there is no batch.

Approximations, stated where they matter (README):
- prefill is charged per token at the workload's mean (its attention term grows with the
  square of the prompt; at 1,000 tokens on a 70B model that term is about 1% of the FLOPs);
- a decode step reads the KV cache of the workload's mean context (`input + output / 2`),
  whatever the lengths of the sequences actually in the batch;
- the analytic TTFT charges the profile's real_factor on the prefill latency, but the analytic
  prefill share (and so TPOT and capacity) does not; the simulator follows the share, so its
  prefill of an idle replica is faster than the analytic TTFT0 by that factor.
"""
from __future__ import annotations

from dataclasses import dataclass

from sizing.model import GB, ReplicaModel


@dataclass(frozen=True)
class StepCost:
    # step(n) = max over (a + b n) of the roofline branches, for n >= 1 decoding sequences
    decode_branches: tuple[tuple[float, float], ...]
    prefill_s_per_token: float

    def decode_s(self, n: int) -> float:
        if n <= 0:
            return 0.0
        return max(a + b * n for a, b in self.decode_branches)

    def step_s(self, n_decode: int, prefill_tokens: int) -> float:
        return self.decode_s(n_decode) + prefill_tokens * self.prefill_s_per_token


def step_cost(model: ReplicaModel) -> StepCost:
    """The per-step cost implied by one analytic replica model."""
    return StepCost(
        decode_branches=tuple((float(a), float(b)) for a, b in model.branches),
        prefill_s_per_token=model.share_per_request_s / model.workload.input_tokens,
    )


def kv_capacity_tokens(model: ReplicaModel) -> int:
    """Tokens the replica's KV budget holds (vLLM's block pool, counted in tokens)."""
    mem = model.memory
    return int(mem.kv_budget_gb * GB // mem.kv_bytes_per_token)
