"""The alerts of a disaggregated or speculative plan: what its extra figures promise, watched.

Built only for a plan that runs speculative decoding (`plan.speculative.enabled`) or serves
disaggregated (`plan.serving_mode == "disaggregated"` with a KV transfer); an aggregated plan
without speculation gets none, and its rule file is unchanged.

- **Acceptance below the plan.** vLLM's own ratio, accepted / draft tokens
  (`SpecDecodingProm`'s docstring, vllm/v1/spec_decode/metrics.py), is (E - 1) / k for a
  per-token acceptance a with k drafts, E = (1 - a^(k+1)) / (1 - a) the tokens a step emits (the
  sampled mean the simulator checks); below `acceptance_share` of that, the TPOT gain the plan
  counts on is gone.
- **NIXL transfer time above the plan's.** `vllm:nixl_xfer_time_seconds` times the RDMA copy
  only, so it is compared with the plan's transfer less its fixed per-request cost:
  bytes / (bandwidth x efficiency) at the mean prompt (a transfer's time is linear in its tokens,
  so the mean transfer is the mean prompt's), times `transfer_time_factor`.
- **Failed transfers.** Any `vllm:nixl_num_failed_transfers` in the window: each is a request
  recomputed on its decode replica (`kv_load_failure_policy` recompute) or failed (fail).
- **Decode KV usage high.** A decode replica admits a transfer only when the whole prompt fits
  (simulator.disagg): above 1 - prompt / KV capacity the next mean prompt does not, and
  transfers wait while their KV stays held on the prefill side. Decode replicas are the NIXL
  readers, the pods whose `vllm:nixl_xfer_time_seconds_count` is above zero (the prefill side
  records no transfer), so the rule needs no pool label.
"""
from __future__ import annotations

from dataclasses import dataclass

from sizing.memory import GB
from sizing.planner import Plan

from .alerts import Alert, Behaviour, Expected

RATE_WINDOW = "5m"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
XFER = "vllm:nixl_xfer_time_seconds"
FAILED = "vllm:nixl_num_failed_transfers_total"
KV = "vllm:kv_cache_usage_perc"
NOT_JUDGED = Behaviour.NOT_JUDGED


@dataclass(frozen=True)
class PdAlertPolicy:
    """The shares and factors an operator chooses; the plan gives every other figure."""
    acceptance_share: float = 0.90       # of the planned accepted / draft ratio
    transfer_time_factor: float = 1.5    # of the planned RDMA copy time
    kv_cache_usage: float = 0.90         # never above the aggregated alert's share
    acceptance_for: str = "15m"
    transfer_for: str = "10m"


@dataclass(frozen=True)
class PdThresholds:
    draft_tokens: int | None             # k (None: no speculation)
    acceptance_rate: float | None        # per-token a
    planned_acceptance: float | None     # accepted / draft tokens the plan expects: (E - 1) / k
    copy_s: float | None                 # the planned RDMA copy of the mean prompt (None: not disaggregated)
    decode_kv_usage: float | None        # above it the next mean prompt does not fit on a decode replica

    @classmethod
    def from_plan(cls, plan: Plan, policy: PdAlertPolicy = PdAlertPolicy()) -> "PdThresholds":
        sp = plan.speculative
        k = a = accepted = None
        if sp is not None and sp.enabled and sp.draft_tokens > 0:
            k, a = sp.draft_tokens, sp.acceptance_rate
            e = (1 - a ** (k + 1)) / (1 - a)
            accepted = round((e - 1) / k, 4)
        copy_s = usage = None
        kv = plan.kv_transfer
        if plan.serving_mode == "disaggregated" and kv is not None:
            copy_s = round(max(0.0, kv.transfer_ms - kv.fixed_ms) / 1e3, 6)
            usage = round(min(policy.kv_cache_usage, 1 - plan.request.workload.input_tokens / _decode_kv_tokens(plan)),
                          4)
        return cls(k, a, accepted, copy_s, usage)


def _decode_kv_tokens(plan: Plan) -> int:
    """Tokens a decode replica's KV cache holds (as the simulator counts them, simulator.cost)."""
    pool = plan.pools_by_role.get("decode")
    model = pool.replica_model if pool is not None and pool.replica_model is not None else plan.replica_model
    mem = model.memory
    return mem.kv_cache_tokens if mem.kv_cache_tokens else int(mem.kv_budget_gb * GB // mem.kv_bytes_per_token)


def pd_alerts(plan: Plan, policy: PdAlertPolicy = PdAlertPolicy()) -> list[Alert]:
    """The plan's speculative and disaggregated alerts (none for an aggregated plan without speculation)."""
    t = PdThresholds.from_plan(plan, policy)
    out: list[Alert] = []
    if t.planned_acceptance is not None:
        share = round(policy.acceptance_share * t.planned_acceptance, 4)
        out.append(Alert(
            "LLMServingSpecAcceptanceBelowPlan",
            f"sum (rate({ACCEPTED}[{RATE_WINDOW}])) / sum (rate({DRAFTED}[{RATE_WINDOW}])) < {share}",
            policy.acceptance_for, "warning",
            f"speculative acceptance is below {policy.acceptance_share:.0%} of the plan's {t.planned_acceptance:g}",
            f"Accepted over draft tokens has stayed below {share:g} for {policy.acceptance_for}; the plan counts on "
            f"{t.planned_acceptance:g} (per-token acceptance {t.acceptance_rate:g} with {t.draft_tokens} drafts). "
            "TPOT is losing the speculative gain: measure the acceptance on this traffic and replan (or turn "
            "speculation off).", "planned_acceptance", share, expected=Expected(zone_loss=NOT_JUDGED)))
    if t.copy_s is not None:
        limit = round(policy.transfer_time_factor * t.copy_s, 6)
        out += [
            Alert("LLMServingKVTransferSlowerThanPlan",
                  f"sum (rate({XFER}_sum[{RATE_WINDOW}])) / sum (rate({XFER}_count[{RATE_WINDOW}])) > {limit}",
                  policy.transfer_for, "warning",
                  f"NIXL KV transfers take longer than {policy.transfer_time_factor:g}x the plan's {1e3 * t.copy_s:g} ms",
                  f"The mean NIXL copy has stayed above {1e3 * limit:g} ms for {policy.transfer_for}; the plan's TTFT "
                  "counts on the link's bandwidth and efficiency (EFA or NVLink). Check the fabric and the "
                  "pair's placement.", "copy_s", limit),
            Alert("LLMServingKVTransferFailed", f"sum (increase({FAILED}[{RATE_WINDOW}])) > 0", "1m", "critical",
                  "NIXL KV transfers are failing",
                  "Decode replicas failed to pull a prefill's KV in the last 5m: each such request was recomputed "
                  "on its decode replica (kv_load_failure_policy recompute) or failed (fail). A prefill pod lost "
                  "mid-transfer, or the fabric between the pools.", "failed_transfers", 0.0),
            Alert("LLMServingDecodeKVCacheNearlyFull",
                  f"max by (zone, pod) ({KV} and on (namespace, pod) ({XFER}_count > 0)) > {t.decode_kv_usage}",
                  "5m", "warning", f"decode replica {{{{ $labels.pod }}}} KV cache above {t.decode_kv_usage:.0%}",
                  f"Decode replica {{{{ $labels.pod }}}} in {{{{ $labels.zone }}}} uses more than "
                  f"{t.decode_kv_usage:.0%} of its KV cache: the next mean prompt no longer fits, so transfers wait "
                  "for admission while their KV stays held on the prefill side.", "decode_kv_usage",
                  t.decode_kv_usage),
        ]
    return out


def pd_group(plan: Plan, policy: PdAlertPolicy = PdAlertPolicy()) -> list[dict]:
    """The rule group, or none."""
    alerts = pd_alerts(plan, policy)
    return [{"name": "llm-serving.disaggregated-speculative", "rules": [a.rule() for a in alerts]}] if alerts else []
