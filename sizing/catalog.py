"""The hardware and model catalog, loaded once from `data/catalog.yaml`.

Frozen dataclasses with units in their names. Lookups raise `CatalogError` with the valid
choices, so the CLI and the settings can show one clear line.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DATA_DIR = Path(__file__).parent / "data"
PRECISIONS = ("fp8", "bf16", "fp16")
HGX_SUFFIX = "-hgx-8"      # a GPU with no AWS instance in the catalog is sized on an 8-GPU HGX node


class CatalogError(ValueError):
    """An unknown catalog key; the message names the valid choices."""


@dataclass(frozen=True)
class Gpu:
    id: str
    name: str
    fp8_tflops: float | None
    bf16_tflops: float
    memory_gb: float
    hbm_tbps: float

    def peak_tflops(self, weights: str) -> float:
        # FP8 weights on a GPU without FP8 tensor cores run as W8A16: BF16 math, FP8 bytes.
        if weights == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops


@dataclass(frozen=True)
class Link:
    id: str
    name: str
    bandwidth_gbps: float
    latency_us: float

    @property
    def is_nvlink(self) -> bool:
        return not self.id.startswith("pcie")


@dataclass(frozen=True)
class Instance:
    id: str
    gpu: Gpu
    gpus: int
    link: Link
    vcpus: int
    network_gbps: float
    nvme: str
    price_per_hour: float | None
    price_read_on: str | None
    price_note: str | None = None


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params_b: float
    active_params_b: float
    checkpoints: dict
    # config.json's max_position_embeddings of the checkpoint served: the longest context it takes
    max_position_embeddings: int | None = None

    def weight_bytes(self, weights: str) -> float:
        return self.params_b * 1e9 * bytes_per_element(weights)

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        return self.layers * self.kv_heads * self.head_dim * 2 * bytes_per_element(kv_dtype)


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, Gpu]
    links: dict[str, Link]
    instances: dict[str, Instance]
    models: dict[str, Model]
    gpu_default_instance: dict[str, str | None]
    gpu_default_link: dict[str, str]

    def model(self, key: str) -> Model:
        return _pick(self.models, key, "model")

    def gpu(self, key: str) -> Gpu:
        return _pick(self.gpus, key, "GPU")

    def instance(self, key: str) -> Instance:
        if key not in self.instances and key.endswith(HGX_SUFFIX) and key[: -len(HGX_SUFFIX)] in self.gpus:
            return self.node_for_gpu(key[: -len(HGX_SUFFIX)])
        return _pick(self.instances, key, "instance type")

    def node_for_gpu(self, gpu_key: str) -> Instance:
        """The node a bare `--gpu` is sized on: its AWS instance, or an 8-GPU HGX node."""
        gpu = self.gpu(gpu_key)
        instance_id = self.gpu_default_instance.get(gpu_key)
        if instance_id:
            return self.instances[instance_id]
        link = self.links[self.gpu_default_link.get(gpu_key, "nvswitch-900")]
        return Instance(id=f"{gpu_key}{HGX_SUFFIX}", gpu=gpu, gpus=8, link=link, vcpus=0,
                        network_gbps=0, nvme="", price_per_hour=None, price_read_on=None,
                        price_note="no AWS instance in the catalog: pass --gpu-hour-price")


def bytes_per_element(precision: str) -> int:
    try:
        return {"fp8": 1, "bf16": 2, "fp16": 2}[precision]
    except KeyError:
        raise CatalogError(
            f"unknown precision '{precision}'; choose one of: {', '.join(PRECISIONS)}") from None


def _pick(table: dict, key: str, what: str):
    try:
        return table[key]
    except KeyError:
        raise CatalogError(
            f"unknown {what} '{key}'; choose one of: {', '.join(sorted(table))}") from None


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    raw = yaml.load((DATA_DIR / "catalog.yaml").read_text(), Loader=yaml.CSafeLoader)
    gpus = {k: Gpu(id=k, **v) for k, v in raw["gpus"].items()}
    links = {k: Link(id=k, **v) for k, v in raw["links"].items()}
    instances = {
        k: Instance(id=k, gpu=gpus[v.pop("gpu")], link=links[v.pop("link")], **v)
        for k, v in ((k, dict(v)) for k, v in raw["instances"].items())
    }
    models = {k: Model(id=k, **v) for k, v in raw["models"].items()}
    return Catalog(gpus=gpus, links=links, instances=instances, models=models,
                   gpu_default_instance=raw["gpu_default_instance"],
                   gpu_default_link=raw["gpu_default_link"])
