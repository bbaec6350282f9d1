"""The workload a plan is sized for, and the error a configuration the model cannot serve raises.

`Workload`: the request lengths (fixed, or a distribution from `sizing.traffic`), the load (an
open-loop QPS or closed-loop clients), the TTFT and TPOT SLOs and the statistic they hold at, the
served context limit as stated, and what the prefix cache is counted on for. Its figures are
checked once, when it is built (`check_finite_workload`). `SizingError` names the `PlanRequest`
field that can fix a refusal; every sizing module raises it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .queueing import STATISTICS
from .traffic import LengthDistribution, fixed as fixed_lengths
from .vllm_engine import BLOCK_TOKENS


class SizingError(ValueError):
    """A configuration the model cannot serve; the message names the constraint that fails.

    `field` names the `PlanRequest` field that can fix it ("tp", "weights", "workload.qps", ...;
    None when it is the layout): the settings turn it into the stack key, the CLI into the flag,
    whichever the user wrote (settings.schema.REQUEST_KEYS, llmserve/size_flags.py). The message
    itself names neither.
    """

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Workload:
    input_tokens: int = 1000
    output_tokens: int = 300
    ttft_slo_s: float = 1.0
    tpot_slo_s: float = 0.040
    qps: float | None = 10.0
    concurrency: int | None = None     # closed loop: this many clients, each waits for its answer
    slo_statistic: str = "p95"         # mean | p50 | p90 | p95 | p99: the SLOs hold at this statistic
    # The lengths as a distribution (sizing.traffic); None: every request is input/output_tokens.
    # With one, input_tokens and output_tokens are its means (`with_lengths`).
    lengths: LengthDistribution | None = None
    stated_max_model_len: int | None = None   # workload.maxModelLen; None: the longest the lengths allow
    # Prefix caching (vLLM's automatic prefix caching, on by default in 0.29.0): the prompt tokens
    # every request shares (a system prompt or template), or the share of prompt tokens found in
    # the cache (multi-turn chats). 0: the plan does not count on it.
    shared_prefix_tokens: int = 0
    prefix_hit_fraction: float = 0.0

    def __post_init__(self):
        check_finite_workload(self)

    @classmethod
    def with_lengths(cls, lengths: LengthDistribution, **kwargs) -> "Workload":
        """A workload whose mean lengths come from `lengths`."""
        return cls(input_tokens=max(1, round(lengths.mean_input)), output_tokens=max(1, round(lengths.mean_output)),
                   lengths=lengths, **kwargs)

    @property
    def is_closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def distribution(self) -> LengthDistribution:
        return self.lengths or fixed_lengths(self.input_tokens, self.output_tokens)

    @property
    def cached_prompt_tokens(self) -> int:
        """Prompt tokens per request served from the prefix cache: whole 16-token blocks only (vLLM
        caches full blocks), and never the last prompt token (it is recomputed for its logits)."""
        cached = max(self.shared_prefix_tokens, self.prefix_hit_fraction * self.input_tokens)
        return max(0, min(int(cached), self.input_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS)

    @property
    def counts_on_prefix_cache(self) -> bool:
        return self.cached_prompt_tokens > 0

    def without_prefix_cache(self) -> "Workload":
        return replace(self, shared_prefix_tokens=0, prefix_hit_fraction=0.0)

    @property
    def served_max_model_len(self) -> int:
        """vLLM's max_model_len: the stated maximum, else the longest request the traffic holds."""
        d = self.lengths      # fixed lengths: their sum (what `distribution` would say, without building it)
        return self.stated_max_model_len or (d.max_request_tokens if d else self.input_tokens + self.output_tokens)

    @property
    def prompt_attention_tokens(self) -> float:
        """The prompt length one prompt token's causal attention sees, on average over tokens."""
        return self.input_tokens if self.lengths is None else self.lengths.prompt_attention_tokens

    @property
    def decode_context_tokens(self) -> float:
        """A decoding sequence's context, averaged over decode steps (its KV read per step)."""
        if self.lengths is None:
            return self.input_tokens + self.output_tokens / 2
        return self.lengths.decode_context_tokens


WORKLOAD_FIGURES = ("input_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s", "qps", "concurrency")


def check_finite_workload(w: Workload) -> None:
    """Refuse nan, inf and non-positive figures up front, naming the field."""
    for name in WORKLOAD_FIGURES:
        value = getattr(w, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SizingError(f"expected a number (got {value!r})", f"workload.{name}")
        if not math.isfinite(value) or value <= 0:
            raise SizingError(f"must be a finite number greater than 0 (got {value!r})", f"workload.{name}")
    if isinstance(w.shared_prefix_tokens, bool) or not isinstance(w.shared_prefix_tokens, int) or w.shared_prefix_tokens < 0:
        raise SizingError(f"must be a whole number of tokens, 0 or more (got {w.shared_prefix_tokens!r})",
                          "workload.shared_prefix_tokens")
    if not (isinstance(w.prefix_hit_fraction, (int, float)) and 0 <= w.prefix_hit_fraction < 1):
        raise SizingError(f"must be from 0 to below 1 (got {w.prefix_hit_fraction!r})", "workload.prefix_hit_fraction")
    if w.stated_max_model_len is not None and (isinstance(w.stated_max_model_len, bool) or not isinstance(w.stated_max_model_len, int)
                                        or w.stated_max_model_len <= 0):
        raise SizingError(f"must be a whole number of tokens above 0 (got {w.stated_max_model_len!r})",
                          "workload.stated_max_model_len")
    if w.slo_statistic not in STATISTICS:
        raise SizingError(f"unknown statistic '{w.slo_statistic}'; choose one of: {', '.join(STATISTICS)}",
                          "workload.slo_statistic")
