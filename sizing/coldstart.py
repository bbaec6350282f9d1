"""How long a new replica takes to serve, as a planned figure with each term cited.

A replica on a node that is already up (its image pulled, the checkpoint and the torch.compile
cache on the node's NVMe model cache, components/serving.py `vllm_env`) waits only for the model
load and the engine start. A replica that needs a new node first waits for the node, the image,
the checkpoint's download and the compilation the cache would have saved:

    new node:  node_provision + image_pull + model_download + compile + model_load + engine_start
    warm node:                                                           model_load + engine_start

(`sizing.roles.ColdStart`: `replica_on_new_node_s` sums every term, `replica_on_warm_node_s` the
last two.) These are expected figures for planning the scale-up's lead; the startup probe's
budget (deployment/serving.py `startup_budget_s`) is the conservative bound on the same steps.
A replica over several nodes (a group) starts its nodes together, each with its share of the
checkpoint; the group serves when its slowest node does, which these figures take as equal.
"""
from __future__ import annotations

from .roles import ColdStart, ColdStartTerm

# -- node_provision ----------------------------------------------------------------------------
# EC2 publishes no launch-to-Ready time for p5/p5en. Measured: an EKS-AMI node (c5.xlarge)
# registers with its cluster 39 s after the instance request, and "GPU instance types often take
# much longer to boot within EC2" (awslabs/amazon-eks-ami issue #1099, 2022-12-15, the timing
# table and the maintainer's comment); a GPU node shows Ready about a minute before the device
# plugin advertises its GPUs (cloudpilot-ai/karpenter-provider-gcp PR #148). ASSUMPTION: 300 s for
# a p5 (8 GPUs, NVSwitch fabric manager, EFA) from the request to schedulable nvidia.com/gpu.
NODE_PROVISION_S = 300.0
NODE_PROVISION_SOURCE = ("assumption: 300 s for a p5-class node from the EC2 request to nvidia.com/gpu "
                         "schedulable; measured EKS join of a c5.xlarge is 39 s and GPU types boot much longer "
                         "(https://github.com/awslabs/amazon-eks-ami/issues/1099)")

# -- image_pull --------------------------------------------------------------------------------
# vllm/vllm-openai:latest is 28.6 GB (vllm-project/vllm PR #22377, its 2025-12-10 update: "Size
# of official out-of-the-box vllm-openai:latest docker image: 28.6 GB"). ASSUMPTION: v0.29.0 (the
# pinned tag, conventions.VLLM_IMAGE) is no smaller; its size was not read from the registry here.
# Pull rate: "Standard Docker image pulls of 15-20 GB can take 4-6 minutes per instance" (AWS
# Machine Learning Blog, "Reducing container cold start times using SOCI index on DLAMI and
# DLC", 2026): the midpoint, 17.5 GB in 300 s. A pre-pulled image (an AMI or a Bottlerocket data
# volume snapshot) makes this term 0.
VLLM_IMAGE_GB = 28.6
IMAGE_PULL_GB_PER_S = 17.5 / 300.0
IMAGE_PULL_SOURCE = ("28.6 GB image (vllm-openai:latest, https://github.com/vllm-project/vllm/pull/22377; "
                     "assumed for v0.29.0) at 17.5 GB per 300 s (15-20 GB in 4-6 min, AWS ML Blog "
                     "https://aws.amazon.com/blogs/machine-learning/reducing-container-cold-start-times-using-soci-index-on-dlami-and-dlc/)")

# -- model_download ----------------------------------------------------------------------------
# A new node's model cache is empty: vLLM downloads the checkpoint from the hub into it. hf_transfer
# is "a power user tool, to go beyond ~500MB/s" (https://pypi.org/project/hf-transfer/): the
# hub's Python client tops out near 0.5 GB/s, the rate planned here.
HUB_DOWNLOAD_GB_PER_S = 0.5
HUB_SOURCE = "checkpoint bytes at 0.5 GB/s from the hub (~500 MB/s, https://pypi.org/project/hf-transfer/)"

# -- model_load and engine_start (vLLM issue #19824, Llama-70B-FP8 at TP=8) ----------------------
# "~10s to load weights --- from hot page cache", "~15s to convert dynamo bytecode", "~70s to run
# torch.compile", "~60s to capture the cudagraphs" (https://github.com/vllm-project/vllm/issues/19824,
# robertgshaw2-redhat's measurements in the description). With the compile cache, vLLM loads the
# compiled graphs instead of compiling: torch.compile's total is then the Dynamo transform alone
# ("Directly load the compiled graph ... from the cache"; "torch.compile takes 7.51 s in total",
# Dynamo 7.51 s, https://github.com/vllm-project/vllm/issues/20264); CUDA graphs are captured on
# every start. The checkpoint was just written to (or read from) the node's cache, so it loads at
# the page cache's rate: 70.6 GB in ~10 s. The engine terms scale with the layers traced, compiled
# and captured (ASSUMPTION: linearly, from Llama-70B's 80). Not counted: vLLM's P2P access check
# (~60 s at TP=8 in #19824; skipped with VLLM_SKIP_P2P_CHECK=1).
PAGE_CACHE_GB_PER_S = 70.6 / 10.0
REFERENCE_LAYERS = 80
DYNAMO_S, COMPILE_S, CUDA_GRAPHS_S = 15.0, 70.0, 60.0
VLLM_STARTUP = "https://github.com/vllm-project/vllm/issues/19824"
COMPILE_CACHE = "https://github.com/vllm-project/vllm/issues/20264"


def cold_start(weights_gb: float, layers: int, nodes_per_replica: int = 1, image_prepulled: bool = False) -> ColdStart:
    """The cold start of one replica whose checkpoint is `weights_gb` (a group: each node its share)."""
    per_node_gb = weights_gb / max(1, nodes_per_replica)
    scale = layers / REFERENCE_LAYERS
    image_s = 0.0 if image_prepulled else VLLM_IMAGE_GB / IMAGE_PULL_GB_PER_S
    return ColdStart(terms=(
        ColdStartTerm("node_provision", NODE_PROVISION_S, NODE_PROVISION_SOURCE),
        ColdStartTerm("image_pull", round(image_s, 1),
                      "pre-pulled image: 0 s" if image_prepulled else IMAGE_PULL_SOURCE),
        ColdStartTerm("model_download", round(per_node_gb / HUB_DOWNLOAD_GB_PER_S, 1),
                      f"{per_node_gb:,.1f} GB per node; {HUB_SOURCE}"),
        ColdStartTerm("compile", round(COMPILE_S * scale, 1),
                      f"torch.compile without the node's compile cache: ~{COMPILE_S:g} s at 80 layers ({VLLM_STARTUP}); "
                      f"with it, the compiled graphs load from the cache ({COMPILE_CACHE})"),
        ColdStartTerm("model_load", round(per_node_gb / PAGE_CACHE_GB_PER_S, 1),
                      f"{per_node_gb:,.1f} GB per node from the node's model cache at {PAGE_CACHE_GB_PER_S:.2f} GB/s "
                      f"(70.6 GB in ~10 s from the page cache, {VLLM_STARTUP})"),
        ColdStartTerm("engine_start", round((DYNAMO_S + CUDA_GRAPHS_S) * scale, 1),
                      f"Dynamo bytecode ~{DYNAMO_S:g} s and CUDA graph capture ~{CUDA_GRAPHS_S:g} s at 80 layers "
                      f"({VLLM_STARTUP}), every start; the compiled graphs from the cache ({COMPILE_CACHE})"),
    ))


def plan_cold_start(plan) -> ColdStart:
    """The cold start of one of the plan's replicas (its checkpoint at the planned weights)."""
    return cold_start(plan.weights_gb, plan.replica_model.shape.model.layers, plan.nodes_per_replica)
