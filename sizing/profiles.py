"""Efficiency profiles: the factors that turn datasheet peaks into what an engine delivers.

`reference` keeps the seed's assumptions (50% MFU, steps 1.6x the ideal) so that the reference
figures reproduce; `calibrated` is fitted to published measurements by `sizing.calibration`
and written to `data/profiles.yaml` with its fit report.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import yaml

from .catalog import DATA_DIR


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    mfu: float                      # share of the dense peak that prefill reaches
    real_factor: float              # real decode/prefill step time over the ideal step
    gpu_memory_utilization: float   # vLLM --gpu-memory-utilization: share of each GPU it may use
    runtime_overhead_gb: float      # per GPU: activations, CUDA graphs, NCCL buffers
    max_num_seqs: int               # engine cap on running sequences
    comm_baseline_link: str         # link the factors were measured on (its all-reduce is inside them)


@lru_cache(maxsize=1)
def load_profiles() -> dict[str, Profile]:
    raw = yaml.load((DATA_DIR / "profiles.yaml").read_text(), Loader=yaml.CSafeLoader)
    return {name: Profile(name=name, **{k: v for k, v in body.items() if k in Profile.__dataclass_fields__})
            for name, body in raw["profiles"].items()}


def get_profile(name: str) -> Profile:
    profiles = load_profiles()
    if name not in profiles:
        from .catalog import CatalogError
        raise CatalogError(f"unknown profile '{name}'; choose one of: {', '.join(profiles)}")
    return profiles[name]
