"""MIG slices: a GPU partitioned into isolated instances, each planned as one small GPU.

A replica on a MIG slice sees a GPU with the slice's memory, a share of the SMs and the share of
memory bandwidth its memory slices carry. The planner plans such a replica exactly as it plans
one on a whole GPU (`sliced` turns the request and the instance into that view): a node offers
`GPUs x instances per GPU` slots, the replicas are placed N+1 by zone over those slots, and the
plan reports `replicas_per_gpu` (the slices one GPU holds). TP is 1: a MIG instance has no CUDA
IPC, so NVLink and NVSwitch are unavailable between slices (RAPIDS deployment guide, "Multi-Instance
GPU (MIG)", https://docs.rapids.ai/deployment/stable/guides/mig; NVIDIA's MIG user guide,
"Deployment Considerations"), and vLLM's tensor-parallel all-reduce needs them: a replica never
spans slices, and a model that does not fit one slice is refused.

Profiles, per GPU of the catalog, from NVIDIA's Multi-Instance GPU User Guide, "Supported MIG
Profiles" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
the H100, H200 and B200 tables give each profile's fraction of memory (eighths) and of SMs
(sevenths); "Concepts" defines a memory slice as 1/8 of the memory resources, "both capacity and
bandwidth", so a slice's bandwidth share is its memory fraction. Instances per GPU: the same
tables' "Number of Instances Available", as NVIDIA's GPU operator configures them
(NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml at 0b0b6b15, `all-<profile>`).
A slice's memory is the profile's name (NVIDIA's own figure, e.g. 3g.40gb: 40 GB).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from fractions import Fraction

from .catalog import Gpu, Instance, Model
from .workload import SizingError


@dataclass(frozen=True)
class MigProfile:
    name: str                    # NVIDIA's profile name, e.g. 3g.40gb
    memory_eighths: int          # fraction of memory (and of memory bandwidth) in eighths
    compute_sevenths: int        # fraction of SMs in sevenths
    instances_per_gpu: int       # "Number of Instances Available" (all slices of one profile)

    @property
    def memory_gb(self) -> float:
        return float(re.fullmatch(r"\d+g\.(\d+)gb", self.name).group(1))

    @property
    def compute_fraction(self) -> Fraction:
        return Fraction(self.compute_sevenths, 7)

    @property
    def memory_fraction(self) -> Fraction:
        return Fraction(self.memory_eighths, 8)

    @property
    def bandwidth_fraction(self) -> Fraction:
        """A memory slice carries its share of the bandwidth too ("Concepts": capacity and bandwidth)."""
        return self.memory_fraction

    @property
    def resource(self) -> str:
        """The extended resource the NVIDIA device plugin advertises under the mixed strategy."""
        return f"nvidia.com/mig-{self.name}"


def _table(*rows: tuple[str, int, int, int]) -> dict[str, MigProfile]:
    return {name: MigProfile(name, mem, sm, n) for name, mem, sm, n in rows}


# (profile, memory eighths, SM sevenths, instances per GPU): the same geometry on each GPU, the
# memory in the names scaled to the GPU's HBM.
PROFILES: dict[str, dict[str, MigProfile]] = {
    "h100-sxm": _table(("1g.10gb", 1, 1, 7), ("1g.20gb", 2, 1, 4), ("2g.20gb", 2, 2, 3),
                       ("3g.40gb", 4, 3, 2), ("4g.40gb", 4, 4, 1), ("7g.80gb", 8, 7, 1)),
    "h200": _table(("1g.18gb", 1, 1, 7), ("1g.35gb", 2, 1, 4), ("2g.35gb", 2, 2, 3),
                   ("3g.71gb", 4, 3, 2), ("4g.71gb", 4, 4, 1), ("7g.141gb", 8, 7, 1)),
    "b200": _table(("1g.23gb", 1, 1, 7), ("1g.45gb", 2, 1, 4), ("2g.45gb", 2, 2, 3),
                   ("3g.90gb", 4, 3, 2), ("4g.90gb", 4, 4, 1), ("7g.180gb", 8, 7, 1)),
}
SLICE_SEPARATOR = "/mig-"        # a sliced GPU's catalog id: `h100-sxm/mig-3g.40gb`


def profile_for(gpu_key: str, name: str) -> MigProfile:
    """The profile `name` of the GPU `gpu_key`; SizingError (field mig_profile) naming the choices."""
    table = PROFILES.get(gpu_key)
    if table is None:
        raise SizingError(f"no MIG profiles for {gpu_key} in the catalog; MIG is planned on "
                          f"{', '.join(PROFILES)}", "mig_profile")
    if name not in table:
        raise SizingError(f"{str(name)[:40]!a} is not a MIG profile of {gpu_key}; choose one of "
                          f"{', '.join(table)}", "mig_profile")
    return table[name]


def slice_gpu(gpu: Gpu, profile: MigProfile) -> Gpu:
    """The slice as a GPU: its memory, a share of the tensor throughput and of HBM bandwidth."""
    c, b = float(profile.compute_fraction), float(profile.bandwidth_fraction)
    return dataclasses.replace(
        gpu, id=f"{gpu.id}{SLICE_SEPARATOR}{profile.name}", name=f"{gpu.name}, MIG {profile.name}",
        fp8_tflops=gpu.fp8_tflops * c if gpu.fp8_tflops else gpu.fp8_tflops, bf16_tflops=gpu.bf16_tflops * c,
        fp4_tflops=gpu.fp4_tflops * c if gpu.fp4_tflops else gpu.fp4_tflops,
        memory_gb=profile.memory_gb, hbm_tbps=gpu.hbm_tbps * b)


def sliced_instance(instance: Instance, profile: MigProfile) -> Instance:
    """The node as the scheduler sees it under MIG: `GPUs x instances per GPU` slice GPUs."""
    return dataclasses.replace(instance, gpu=slice_gpu(instance.gpu, profile),
                               gpus=instance.gpus * profile.instances_per_gpu)


def split_slice_id(gpu_key: str) -> tuple[str, MigProfile] | None:
    """(whole GPU key, profile) for a sliced GPU's id, None for a whole GPU."""
    base, sep, name = gpu_key.partition(SLICE_SEPARATOR)
    return (base, profile_for(base, name)) if sep else None


def sliced(req, instance: Instance, model: Model):
    """(request, instance) to plan replicas on MIG slices: TP 1, one node per replica, the node's
    slices as its GPUs and the price per slice. A model whose weights alone outgrow the slice is
    refused here, naming it; KV and activations are the planner's own checks on the slice."""
    profile = profile_for(instance.gpu.id, req.mig_profile)
    if req.tp not in (None, 1) or req.nodes_per_replica not in (None, 1):
        raise SizingError(f"a replica on MIG {profile.name} takes one slice (TP=1, one node): a MIG device has "
                          "no peer access to another; drop the TP or nodes setting, or plan whole GPUs", "mig_profile")
    weights_gb = model.weight_bytes(req.weights) / 1e9
    if weights_gb >= profile.memory_gb:
        raise SizingError(f"{model.id} does not fit a MIG {profile.name} slice of {instance.gpu.id}: "
                          f"{weights_gb:,.1f} GB of {req.weights} weights against the slice's {profile.memory_gb:g} GB "
                          "(a replica takes one slice); use a larger profile or whole GPUs", "mig_profile")
    price = None if req.gpu_hour_price is None else req.gpu_hour_price / profile.instances_per_gpu
    return (dataclasses.replace(req, tp=1, nodes_per_replica=1, layout=req.layout or "tp", gpu_hour_price=price),
            sliced_instance(instance, profile))


def replicas_per_gpu(plan) -> int | None:
    """Replicas one physical GPU holds (its slices), None for a plan on whole GPUs."""
    found = split_slice_id(plan.instance.gpu.id)
    return None if found is None else found[1].instances_per_gpu
