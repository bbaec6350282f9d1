"""The KV hand-off, an explicit prefill/decode layout and speculative decoding, as plain data (part of
the contract in sizing.roles, which hands them out on first use)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KvTransfer:
    """One request's KV from its prefill replica to its decode replica (vLLM NixlConnector)."""
    link: str                    # nvlink (same node) | efa (across nodes, same zone)
    bytes_per_request: float     # prompt tokens x KV bytes per token (the mean prompt)
    bandwidth_gbps: float        # the link's nominal bandwidth, Gbit/s
    efficiency: float            # at this message size (sizing.kv_transfer's cited curve)
    fixed_ms: float              # per-request cost: handshake, metadata, notification
    transfer_ms: float           # fixed_ms + bytes / (bandwidth x efficiency), at the mean prompt
    transfer_ms_at_statistic: float   # at the prompt quantile of the SLO statistic
    kv_lease_s: float            # KV held on the prefill side until the decode pulls it


@dataclass(frozen=True)
class PoolLayout:
    """An explicit disaggregated layout to evaluate (fleet totals), as `size --prefill-replicas ...`."""
    prefill_replicas: int
    prefill_tp: int
    decode_replicas: int
    decode_tp: int


@dataclass(frozen=True)
class SpeculativeRequest:
    """What the user states: the method, k and the measured per-token acceptance."""
    method: str                  # eagle3 | mtp | ngram | draft
    draft_tokens: int | None     # k; None: the plan chooses it per expected batch
    acceptance_rate: float | None   # per-token acceptance a in (0, 1); None is refused
    draft_model: str | None = None  # method draft / eagle3: the drafter's checkpoint or catalog id


@dataclass(frozen=True)
class SpeculativePlan:
    method: str
    draft_tokens: int                    # k chosen for the expected batch (0: speculation off)
    acceptance_rate: float
    mean_acceptance_length: float        # tokens emitted per verify step, bonus token included
    stops_paying_batch: float | None     # decode batch above which speculation slows TPOT (None: never in range)
    expected_batch: float                # decode batch the plan expects per replica
    enabled: bool                        # False: the plan runs without it (the batch is past stops_paying_batch)
    tpot_gain: float                     # TPOT without / with, at the expected batch (1.0: off)
    draft_memory_gb: float               # drafter weights + its KV, per replica
    reason: str                          # words: why this k, or why off
    draft_model: str | None = None       # vLLM's speculative `model` (the drafter's checkpoint); None: ngram or the target's own MTP layers
