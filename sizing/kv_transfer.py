"""The prefill -> decode hand-off of one request's KV cache (vLLM's NixlConnector), priced.

    transfer_s = fixed + prompt tokens x KV bytes per token / (bandwidth x efficiency(message))

- KV bytes per token: the decode replica's own memory model (`sizing.parallel.kv_bytes_per_token`
  at the prompt's length, the figure `sizing.memory` reserves per token: copies kept under TP
  included, sliding-window layers held to their window, which is what NIXL sends:
  `get_exchange_clipped_blocks` keeps a sliding-window group's in-window tail).
- The link: NVLink (the catalog's `link` of the instance, GB/s per GPU) when a zone's prefill and
  decode replicas all sit on one node; else EFA (the catalog's `network_gbps`, the node's Gbit/s,
  spread evenly over its GPUs: each rank sends its own shard over its own NICs). A pair moves
  min(prefill TP, decode TP) ranks' worth of links at once (the side with fewer ranks bottlenecks).
- Efficiency(message): NIXL posts one descriptor per KV block per layer (K and V apart unless
  MLA) per rank, so a transfer is a batch of small messages of block_tokens x per-layer bytes
  per rank. Measured throughput of a batch of RDMA READs/WRITEs by message size: Mooncake's
  transfer_engine_bench, one ConnectX-7 400 Gbit/s port, one thread, batch 1,538
  (PaddlePaddle/FastDeploy fastdeploy/cache_manager/transfer_factory/kvcache_transfer/README_CN.md,
  table "KVTransferManager 与 Mooncake 性能对比", column Mooncake), over the port's 50 GB/s.
  Between the table's sizes the efficiency is interpolated in log(message size); below 1 KiB it
  falls in proportion to the size (a fixed cost per message), above 256 KiB it stays at 256 KiB's.
  ASSUMPTION (no cited measurement found): EFA (libfabric, SRD) and NVLink (UCX cuda_ipc) follow
  the same curve; one thread is conservative (the same table's note: several threads reach the
  port's line rate).
- The fixed per-request cost: ASSUMPTION (no published per-request figure found),
  `FIXED_MS`: the router's second hop (the decode request after the prefill's answer), NIXL's
  notification, and the decode engine noticing the finished read at its next step.
- The lease: the prefill replica keeps the request's KV until the decode replica has read it, or
  until the lease lapses without the decode's heartbeats: vLLM's `kv_lease_duration`
  (kv_connector_extra_config, default 30 s: vllm-project/vllm
  vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py:81-85,
  NixlBaseConnectorScheduler.__init__, read at commit 0050936b, the stored snapshot, not the
  v0.29.0 tag; older releases bound it by VLLM_NIXL_ABORT_REQUEST_TIMEOUT, default 480 s,
  vllm/envs.py). In steady state the KV is held on the prefill side for the transfer (the read
  completes it); the lease bounds it only when the decode side is lost.
"""
from __future__ import annotations

import math

from . import parallel
from .roles import KvTransfer

KIB = 1024
# (message bytes, GB/s): Mooncake transfer_engine_bench, one CX-7 400G port, one thread (see above).
MOONCAKE_BENCH_GBPS = ((1 * KIB, 1.54), (2 * KIB, 3.40), (4 * KIB, 6.95), (8 * KIB, 12.48), (16 * KIB, 23.42),
                       (32 * KIB, 31.58), (64 * KIB, 38.39), (128 * KIB, 40.11), (256 * KIB, 40.71))
MOONCAKE_PORT_GBPS = 400 / 8      # the port's line rate, GB/s
FIXED_MS = 2.0                    # ASSUMPTION: per-request cost beyond the bytes (see the docstring)
KV_LEASE_S = 30.0                 # vLLM kv_lease_duration default (base_scheduler.py:81-85)
LINKS = ("nvlink", "efa")


def efficiency(message_bytes: float) -> float:
    """Share of the link's bandwidth a batch of messages of this size reaches (0..1)."""
    table = MOONCAKE_BENCH_GBPS
    if message_bytes <= table[0][0]:
        return table[0][1] / MOONCAKE_PORT_GBPS * max(message_bytes, 1.0) / table[0][0]
    for (s0, g0), (s1, g1) in zip(table, table[1:]):
        if message_bytes <= s1:
            f = math.log(message_bytes / s0) / math.log(s1 / s0)
            return (g0 + f * (g1 - g0)) / MOONCAKE_PORT_GBPS
    return table[-1][1] / MOONCAKE_PORT_GBPS


def message_bytes(decode_shape, prompt_tokens: float, block_tokens: int) -> float:
    """One NIXL descriptor: one KV block of one layer on one rank (K and V apart unless MLA)."""
    m = decode_shape.model
    layers = m.arch.attention_layer_count if m.arch is not None else m.layers
    per_rank_layer = parallel.kv_bytes_per_token(decode_shape, prompt_tokens) / (decode_shape.tp * max(layers, 1))
    return block_tokens * per_rank_layer / (1 if m.is_mla else 2)


def link_bandwidth_gbps(instance, link: str, ranks: int) -> float:
    """Gbit/s a pair moves KV at: `ranks` GPUs' share of the node's EFA, or of NVLink."""
    if link == "nvlink":
        return ranks * instance.link.bandwidth_gbps * 8          # the catalog's GB/s per GPU
    return ranks * instance.network_gbps / instance.gpus


def transfer_s(bytes_: float, bandwidth_gbps: float, eff: float, fixed_ms: float = FIXED_MS) -> float:
    """Seconds to hand one request's KV over: the fixed cost plus the bytes at the effective rate."""
    if bandwidth_gbps <= 0 or eff <= 0:
        return math.inf
    return fixed_ms / 1e3 + bytes_ * 8 / (bandwidth_gbps * 1e9 * eff)


def kv_transfer(decode_shape, prefill_tp: int, link: str, prompt_mean: float, prompt_at_statistic: float,
                block_tokens: int) -> KvTransfer:
    """The hand-off of the mean prompt and of the prompt at the SLO statistic."""
    if link not in LINKS:
        raise ValueError(f"link must be one of {', '.join(LINKS)} (got {link!r})")
    ranks = min(prefill_tp, decode_shape.tp)
    bw = link_bandwidth_gbps(decode_shape.instance, link, ranks)

    def one(tokens: float) -> tuple[float, float, float]:
        b = tokens * parallel.kv_bytes_per_token(decode_shape, tokens)
        eff = efficiency(message_bytes(decode_shape, tokens, block_tokens))
        return b, eff, transfer_s(b, bw, eff)

    b_mean, eff, t_mean = one(prompt_mean)
    _, _, t_stat = one(prompt_at_statistic)
    return KvTransfer(link=link, bytes_per_request=b_mean, bandwidth_gbps=bw, efficiency=eff, fixed_ms=FIXED_MS,
                      transfer_ms=1e3 * t_mean, transfer_ms_at_statistic=1e3 * max(t_stat, t_mean),
                      kv_lease_s=KV_LEASE_S)
