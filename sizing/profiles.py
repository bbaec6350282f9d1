"""Efficiency profiles: the factors that turn datasheet peaks into what an engine delivers.

Two step models (`sizing.step`), one per profile:
- `additive` (the `seed` profile): the seed's assumptions kept exactly, so the reference
  figures reproduce: a step is the decode roofline times `real_factor` plus the prefill tokens
  at `mfu`, the two never overlapping.
- `mixed` (`calibrated`): one roofline over all the step's tokens, weights read once, plus each
  part's attention (../shared/reference/h200-layer-measurements.md). Prefill efficiency (`mfu`)
  and decode efficiency (`decode_bw_fraction` of HBM bandwidth) are separate parameters, each
  fitted to its own measurements (`sizing.calibration`) and bounded by what an H200 measures.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from inputs import safe_yaml
from inputs.files import read_text

from .catalog import DATA_DIR

MAX_PROFILES_BYTES = 1_000_000

STEP_MODELS = ("additive", "mixed", "ops")
KV_ACCOUNTING = ("fixed", "vllm")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    mfu: float                      # prefill efficiency: share of the dense peak prefill reaches
    gpu_memory_utilization: float   # vLLM --gpu-memory-utilization: share of each GPU it may use
    runtime_overhead_gb: float      # per GPU, fixed: non-torch memory (NCCL, cuBLAS workspaces, ...)
    max_num_seqs: int               # engine cap on running sequences
    comm_baseline_link: str         # link the factors were measured on (its all-reduce is inside them)
    step_model: str = "additive"    # additive | mixed (see the module docstring)
    real_factor: float = 1.0        # additive only: real decode step over the ideal roofline
    decode_bw_fraction: float = 1.0  # mixed only: share of HBM bandwidth a decode step reaches
    kv_accounting: str = "fixed"    # fixed: runtime_overhead_gb covers all; vllm: + activations + graphs
    cuda_graph_gb: float = 0.0      # vllm accounting: per GPU, CUDA-graph capture memory
    block_tokens: int = 16          # vllm accounting: KV blocks hold this many tokens
    # vllm accounting: "grow" (vLLM's paged cache: a sequence holds the blocks of its tokens so
    # far, preempted when they run out) or "whole" (a request reserves prompt + output up front:
    # TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler, which the calibration rows ran).
    kv_reservation: str = "grow"
    # ops only: a fleet's measured step time over the per-operation model's, for the decode
    # operations and for a prompt token (`llmserve calibrate` fits both; 1.0: the tables as measured)
    ops_decode_factor: float = 1.0
    ops_prefill_factor: float = 1.0
    # The API server's serial CPU time per request (tokenize, schedule and admit, detokenize and
    # stream): a FIFO single server in front of the engine, so a replica serves at most
    # 1000 / request_overhead_ms requests per second whatever its GPUs do. 0: not modelled.
    # The default profile's 3.9 ms (vLLM PR #27407) is cited in profiles.yaml and docs/sizing-model.md.
    request_overhead_ms: float = 0.0


@lru_cache(maxsize=1)
def load_profiles() -> dict[str, Profile]:
    path = DATA_DIR / "profiles.yaml"      # `llmserve calibrate` writes fleet profiles into it
    raw = safe_yaml.load(read_text(path, MAX_PROFILES_BYTES, "profiles file"), str(path))
    return {name: Profile(name=name, **{k: v for k, v in body.items() if k in Profile.__dataclass_fields__})
            for name, body in raw["profiles"].items()}


RENAMED = {"reference": "seed"}      # the seed's assumptions were the `reference` profile before the per-operation model became the default


def unknown_profile(name: str) -> str:
    """The error for a profile name that is not in profiles.yaml (a renamed one says its new name)."""
    if name in RENAMED:
        return f"the profile '{name}' is now named '{RENAMED[name]}'"
    return f"unknown profile '{name}'; choose one of: {', '.join(load_profiles())}"


def get_profile(name: str) -> Profile:
    profiles = load_profiles()
    if name not in profiles:
        from .catalog import CatalogError
        raise CatalogError(unknown_profile(name))
    return profiles[name]
