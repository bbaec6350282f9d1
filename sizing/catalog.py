"""The hardware and model catalog, loaded once from `data/catalog.yaml`.

Frozen dataclasses with units in their names. Lookups raise `CatalogError` with the valid
choices, so the CLI and the settings can show one clear line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from inputs.untrusted import nfkc_ascii

from .architecture import Architecture, ConfigError, element_bytes
from .config_parse import read_config

DATA_DIR = Path(__file__).parent / "data"
MODELS_DIR = DATA_DIR / "models"
PRECISIONS = ("fp8", "bf16", "fp16", "fp4", "int4")   # weights (fp4: NVFP4 or MXFP4, as the checkpoint has it;
#                                                    int4: a compressed-tensors W4A16 checkpoint, BF16 math)
KV_PRECISIONS = ("fp8", "bf16", "fp16")
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
    fp4_tflops: float | None = None   # FP4 tensor cores (Blackwell); None: no FP4 math

    def peak_tflops(self, weights: str) -> float:
        # FP8 weights on a GPU without FP8 tensor cores run as W8A16: BF16 math, FP8 bytes. FP4
        # weights on a GPU without FP4 tensor cores (gpt-oss's MXFP4 on Hopper) run as W4A16.
        if weights == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
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
    hf_id: str | None = None
    arch: Architecture | None = None       # None: a legacy entry sized from the figures above
    source: dict = field(default_factory=dict)   # where its config.json was transcribed from
    card: dict = field(default_factory=dict)     # the model card's parameter counts, cited
    # config.json's max_position_embeddings of the checkpoint served: the longest context it takes
    max_position_embeddings: int | None = None

    @classmethod
    def from_architecture(cls, key: str, name: str, arch: Architecture, checkpoints: dict | None = None,
                          hf_id: str | None = None, source: dict | None = None, card: dict | None = None) -> "Model":
        return cls(id=key, name=name, layers=arch.num_hidden_layers, hidden=arch.hidden_size,
                   heads=arch.num_attention_heads, kv_heads=arch.num_key_value_heads, head_dim=arch.head_dim,
                   ffn=arch.intermediate_size, vocab=arch.vocab_size, params_b=arch.total_params / 1e9,
                   active_params_b=arch.active_params / 1e9, checkpoints=dict(checkpoints or {}), hf_id=hf_id,
                   arch=arch, source=dict(source or {}), card=dict(card or {}))

    @property
    def context_tokens(self) -> int | None:
        """The longest context the served checkpoint takes (config.json's max_position_embeddings)."""
        return self.arch.max_position_embeddings if self.arch is not None else self.max_position_embeddings

    @property
    def is_moe(self) -> bool:
        return self.arch is not None and self.arch.is_moe

    @property
    def is_mla(self) -> bool:
        return self.arch is not None and self.arch.is_mla

    def weight_bytes(self, weights: str) -> float:
        """All weights at `weights` precision for the quantizable layers (the rest as stored)."""
        if self.arch is not None:
            return self.arch.weight_bytes(weights)
        return self.params_b * 1e9 * bytes_per_element(weights)

    def kv_bytes_per_token(self, kv_dtype: str, context: float | None = None) -> float:
        """KV bytes per token of context, all layers, one copy (`context`: sliding layers' share)."""
        if self.arch is not None:
            return self.arch.kv_bytes_per_token(bytes_per_element(kv_dtype), context)
        return self.layers * self.kv_heads * self.head_dim * 2 * bytes_per_element(kv_dtype)

    def expert_weight_bytes(self, weights: str) -> float:
        """The routed experts' bytes, all layers (0 for a dense model)."""
        return self.arch.bytes_by_group(weights)["experts"] if self.is_moe else 0.0

    def decode_read_bytes(self, weights: str, batch: float) -> float:
        """Weight bytes one decode step of `batch` sequences reads: everything but the routed
        experts, plus the distinct experts the batch touches (`Architecture.experts_touched`).
        The input embedding is a lookup of `batch` rows, not a read of the table."""
        if not self.is_moe:
            return self.weight_bytes(weights)
        a = self.arch
        by = a.bytes_by_group(weights)
        touched = a.experts_touched(batch) * (by["experts"] / (a.moe_layer_count * a.num_experts)) * a.moe_layer_count
        return sum(by.values()) - by["embed"] - by["experts"] + touched


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, Gpu]
    links: dict[str, Link]
    instances: dict[str, Instance]
    models: dict[str, Model]
    gpu_default_instance: dict[str, str | None]
    gpu_default_link: dict[str, str]

    aliases: dict[str, str] = field(default_factory=dict)   # HF repo id (lower case) -> key

    def model(self, key: str) -> Model:
        """A model by catalog key or Hugging Face repo id (case-insensitive; NFKC-normalized, ASCII)."""
        if isinstance(key, str) and not key.isascii():
            folded = nfkc_ascii(key)
            if folded is None:
                raise CatalogError(f"{key[:80]!a} is not ASCII after Unicode normalization (NFKC); a model key or "
                                   "Hugging Face id is ASCII letters, digits and -_./")
            key = folded
        if key in self.models:
            return self.models[key]
        alias = self.aliases.get(key.lower()) if isinstance(key, str) else None
        if alias:
            return self.models[alias]
        raise CatalogError(f"unknown model {str(key)[:80]!a}; choose a key ({', '.join(sorted(self.models))}) "
                           "or a Hugging Face id (docs/models.md), or give --model-config PATH")

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


def bytes_per_element(precision: str) -> float:
    try:
        return _ELEMENT_BYTES[precision]
    except KeyError:
        raise CatalogError(
            f"unknown precision '{precision}'; choose one of: {', '.join(PRECISIONS)}") from None


# Built once: the model reads it in its inner loops (memory, KV bytes per token, step costs).
_ELEMENT_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp4": element_bytes("fp4"), "int4": element_bytes("int4")}
_CHECKPOINT_PRECISION = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4", "int4": "int4"}


def default_weights(model: Model) -> str:
    """The weight precision a model plans at when none is asked for: a pre-quantized checkpoint's
    own (gpt-oss MXFP4: fp4; DeepSeek FP8: fp8; Kimi-K2.5 INT4: int4); a BF16 checkpoint fp8 (vLLM
    quantizes it at load, `--quantization fp8`) as before."""
    method = model.arch.quantization.method if model.arch is not None else "none"
    return _CHECKPOINT_PRECISION.get(method, "fp8")


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
    shipped, aliases = _shipped_models()
    models.update(shipped)
    return Catalog(gpus=gpus, links=links, instances=instances, models=models,
                   gpu_default_instance=raw["gpu_default_instance"],
                   gpu_default_link=raw["gpu_default_link"], aliases=aliases)


def _shipped_models() -> tuple[dict[str, Model], dict[str, str]]:
    """The transcribed config.json files under data/models/, by key, and their HF ids."""
    index = yaml.load((MODELS_DIR / "index.yaml").read_text(), Loader=yaml.CSafeLoader)["models"]
    models, aliases = {}, {}
    for key, entry in index.items():
        arch = read_config(MODELS_DIR / entry["config"])
        models[key] = Model.from_architecture(key, entry["name"], arch, entry.get("checkpoints"), entry["hf_id"],
                                              entry.get("source"), entry.get("card"))
        for hf in [entry["hf_id"], *entry.get("also", [])]:
            aliases[hf.lower()] = key
    return models, aliases


def model_from_config(path: str, checkpoint: str | None = None) -> Model:
    """A model from a local config.json (`--model-config`, `model.config`): its key is the path.
    Raises ConfigError naming the field."""
    arch = _read_cached(str(path))
    name = Path(path).parent.name or Path(path).stem
    quant = _CHECKPOINT_PRECISION.get(arch.quantization.method)
    checkpoints = {quant or "bf16": checkpoint or f"/models/{name}"}
    return Model.from_architecture(f"config:{path}", name, arch, checkpoints, source={"path": str(path)})


@lru_cache(maxsize=16)
def _read_cached(path: str) -> Architecture:
    return read_config(path)


def resolve_model(key: str, config_path: str | None = None) -> Model:
    """The model a request names: a local config.json when given, else the catalog's entry."""
    if config_path:
        return model_from_config(config_path)
    return load_catalog().model(key)


__all__ = ["CatalogError", "ConfigError", "Model", "default_weights", "load_catalog", "resolve_model",
           "model_from_config"]
