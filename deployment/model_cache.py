"""The node's model cache: written by one init step, read-only to the serving containers.

A serving pod's first container, `model-download`, is the only one that may write the weights: it
mounts the node's cache (a hostPath, components/gpu_node_pool.py prepares it) read-write at
/models and downloads the checkpoint into /models/hub/<org>/<name> with huggingface_hub's
`snapshot_download(local_dir=...)`. The engine then mounts the same cache read-only and is given that
directory as `--model`, with HF_HUB_OFFLINE=1, so it never reaches the hub and never writes the cache:

- vLLM writes a lock file into the download directory whenever `--model` is a hub id
  (vllm/model_executor/model_loader/weight_utils.py `get_lock`: `lock_dir = cache_dir or temp_dir`,
  taken around every `snapshot_download`), and huggingface_hub's cache download writes
  CACHEDIR.TAG, the revision's ref and `.locks/<repo>/<etag>.lock` under the cache
  (huggingface_hub v1.28.0 src/huggingface_hub/file_download.py L1064, L1200, L1205, L1212): a
  read-only cache fails those writes. A local directory skips both: vLLM downloads only when
  `not os.path.isdir(model)` (default_loader.py `_prepare_weights`; read at vllm-project/vllm
  00b5ad07, the stored snapshot, not the v0.29.0 tag).
- The init step checks what is there already: a file whose local metadata holds the hub's etag is
  kept; a large (LFS) file without metadata is hashed and kept when its SHA-256 is the etag; anything
  else is downloaded again (file_download.py `_hf_hub_download_to_local_dir`, L1298, L1383,
  L1400-1403), each file under its own lock beside its metadata (src/huggingface_hub/_local_folder.py
  L240-266), so two pods starting on one node download a file once.
- A checkpoint given as a path in the cache (`model.checkpoint: /models/...`) is not downloaded;
  the init step only checks that the directory is there.

The compile caches (vLLM's torch.compile, FlashInfer's and DeepGEMM's JIT, CUDA's PTX cache) stay
writable, on their own sub-directory of the node's cache mounted apart from the weights, so a
restart on the node reuses the kernels. They are code the engine runs: a pod that wrote a bad
kernel there would hand it to the next pod on the node (docs/security.md says so).

Pure data, no Pulumi (components/serving.py builds the pods with it).
"""
from __future__ import annotations

from conventions import VLLM_IMAGE

from .engine import CONTAINER_CACHE_PATH
from .serving import HUB_TOKEN_DIR, HUB_TOKEN_KEY

HUB_CHECKPOINTS = f"{CONTAINER_CACHE_PATH}/hub"     # /models/hub/<org>/<name>: what the init step downloads
COMPILE_SUBDIR = "compile"                           # on the node: /mnt/models/compile
COMPILE_PATH = "/var/cache/vllm-compile"             # where the engine mounts it (read-write)
MODEL_VOLUME = "model-cache"

# Files vLLM never reads for a safetensors checkpoint: the original (consolidated .pth) copies some
# repositories carry beside the Hugging Face format, other frameworks' weights, and .bin/.pt copies
# (vLLM reads *.safetensors first, and *.bin only when there is none: default_loader.py).
IGNORED_FILES = ("original/*", "*.pth", "*.pt", "*.bin", "*.gguf", "*.onnx", "*.msgpack", "*.h5")

# No value reaches a shell: the script reads the checkpoint and its directory from the environment.
DOWNLOAD_SCRIPT = f"""\
import os, sys
os.makedirs(os.environ["COMPILE_CACHE"], exist_ok=True)
model, target = os.environ["MODEL_ID"], os.environ["MODEL_DIR"]
if model.startswith("/"):
    sys.exit(0 if os.path.isdir(target) else "model-download: the checkpoint directory is not on the node's model cache")
from huggingface_hub import snapshot_download
snapshot_download(model, local_dir=target, ignore_patterns={list(IGNORED_FILES)!r})
"""


def served_model_path(checkpoint: str) -> str:
    """The directory the engine serves: a checkpoint already in the cache as it is, a hub id
    (settings.names.checkpoint: org/name, no '..') under /models/hub."""
    return checkpoint if checkpoint.startswith(f"{CONTAINER_CACHE_PATH}/") else f"{HUB_CHECKPOINTS}/{checkpoint}"


def engine_cache_env() -> list[dict]:
    """The engine's cache paths: hub access off, its own hub home in /tmp (nothing it reads is
    there: `--model` is a directory), the compile caches on their writable mount."""
    return [{"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "HF_HOME", "value": "/tmp/hf-home"},
            {"name": "VLLM_CACHE_ROOT", "value": f"{COMPILE_PATH}/vllm"},
            {"name": "FLASHINFER_WORKSPACE_BASE", "value": f"{COMPILE_PATH}/flashinfer"},
            {"name": "DG_JIT_CACHE_DIR", "value": f"{COMPILE_PATH}/deep-gemm"},
            {"name": "CUDA_CACHE_PATH", "value": f"{COMPILE_PATH}/cuda"}]


def engine_cache_mounts() -> list[dict]:
    """The weights read-only; the compile caches read-write, apart (a subPath of the same volume,
    made by the init step before the engine starts)."""
    return [{"name": MODEL_VOLUME, "mountPath": CONTAINER_CACHE_PATH, "readOnly": True},
            {"name": MODEL_VOLUME, "mountPath": COMPILE_PATH, "subPath": COMPILE_SUBDIR}]


def download_container(checkpoint: str, security_context: dict, scratch_mount: dict) -> dict:
    """The init step: the one container that writes the weights (pure data: the component gives
    it the pods' security context and scratch mount)."""
    return {
        "name": "model-download",
        "image": VLLM_IMAGE,          # it carries huggingface_hub (and hf_xet) already
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "env": [{"name": "MODEL_ID", "value": checkpoint},
                {"name": "MODEL_DIR", "value": served_model_path(checkpoint)},
                {"name": "COMPILE_CACHE", "value": f"{CONTAINER_CACHE_PATH}/{COMPILE_SUBDIR}"},
                {"name": "HF_TOKEN_PATH", "value": f"{HUB_TOKEN_DIR}/{HUB_TOKEN_KEY}"},
                {"name": "HF_HOME", "value": "/tmp/hf-home"},
                {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
                {"name": "HOME", "value": "/tmp"},
                {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        "securityContext": security_context,
        "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": CONTAINER_CACHE_PATH},
                         {"name": "hub-token", "mountPath": HUB_TOKEN_DIR, "readOnly": True},
                         scratch_mount],
    }
