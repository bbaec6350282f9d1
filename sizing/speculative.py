"""Speculative decoding on a plan's decode steps: what a verify step costs, what the drafter
costs, how many tokens a step emits, and the batch above which it stops paying.

A step with speculation drafts k tokens per running sequence, then verifies them in one forward
pass of the target over n x (k + 1) tokens (n sequences, each its last token and its k drafts).
With a per-token acceptance a (each draft accepted with probability a given the ones before it
were), a step emits on average

    E = (1 - a^(k+1)) / (1 - a)

tokens per sequence, the bonus token included (Leviathan, Kalman and Matias, "Fast Inference from
Transformers via Speculative Decoding", ICML 2023, arXiv 2211.17192, eq. 1 and Theorem 3.8). So
TPOT = (verify step + draft) / E, the step priced by the project's own step model:

- verify: `sizing.step.StepModel` with every token-linear piece (GEMM rows, the LM head's logits,
  norms, all-reduce messages) at n (k + 1) tokens, and every per-sequence piece (the attention's KV
  read, a sequence's recurrent state) at n: each sequence reads its context once for its k + 1
  queries (`verify_step`). At small batch the weight read binds and the extra rows are nearly
  free; at large batch the GEMMs are compute bound and each row costs its FLOPs.
- draft (`Drafter`): eagle3 and mtp run a one-layer head (EAGLE-3: one decoder layer over the
  target's fused hidden states, with its own LM head over a reduced draft vocabulary, Li et al.,
  "EAGLE-3", arXiv 2503.01840, section 3; DeepSeek MTP: one more transformer block of the
  target's own kind sharing its embedding and output head, DeepSeek-V3 technical report, arXiv
  2412.19437, section 2.2); draft runs a catalog model; ngram looks the drafts up in the prompt
  on the CPU (no GPU cost). As vLLM's proposers run them (vllm/v1/spec_decode/eagle.py
  `EagleProposer.propose`, read in the stored copy, not at the v0.29.0 tag): a first pass over
  the step's verified tokens (priced like the verify step), then k - 1 passes of one token per
  sequence. The drafter also prefills each prompt chunk once.

Memory: the drafter's weights leave the KV cache, its KV adds bytes to every token, and each
running sequence holds k more slots (vLLM's lookahead tokens), so the batch the cache holds
shrinks in proportion (`Drafter.memory`).

k is chosen at the batch the plan runs at, at the SLO statistic (the Poisson quantile of the
replica's in-flight sequences, after the worst loss), as the k that emits the most tokens per
second there; speculation stops paying at the smallest batch where no k makes the step's time per
token shorter (`stops_paying_batch`). Past it the plan runs without speculation. vLLM runs one k at
every batch (`num_speculative_tokens`), so the capacity per replica is recomputed with that k:
the TPOT-bound batch grows where speculation pays at it, and shrinks where the capacity batch is
past the batch where it stops paying; a k that would need more GPUs than no speculation is
refused and the plan runs without it (docs/speculative.md).
"""
from __future__ import annotations

import dataclasses
import json
import math

from .catalog import CatalogError, Model, resolve_model
from .memory import Memory, Shape, engine_max_num_seqs, engine_ranks
from .model import ReplicaModel, _up_to
from .ops import arch_of
from . import parallel
from .queueing import QUANTILES, poisson_quantile_smooth
from .roles import SPECULATIVE_METHODS, SpeculativePlan, SpeculativeRequest
from .step import BRANCH_N_MAX, StepModel, build_step
from .workload import SizingError

K_MAX = 8                    # drafts per step tried when the request leaves k to the plan
# An EAGLE-3 head for Llama 3 70B is one decoder layer of the target's widths (hidden 8192,
# intermediate 28672, 64 / 8 heads) predicting over a reduced vocabulary of 32,000 tokens
# ("num_hidden_layers": 1, "draft_vocab_size": 32000, "torch_dtype": "float16": sgl-project/
# SpecForge configs/llama3-70B-ealge3.json at 82b62f6): its LM head is that wide; its input
# embedding is the target's vocabulary, shared with the target.
EAGLE3_DRAFT_VOCAB = 32000
EAGLE3_HEAD_WEIGHTS = "bf16"   # 16-bit heads (the config's float16: the same bytes)
# The model types whose checkpoints carry MTP layers vLLM loads as a drafter (vllm/config/
# speculative.py `hf_config_override`, stored copy: deepseek_v3 / deepseek_v32 -> deepseek_mtp;
# `MTPModelTypes` lists glm4_moe_mtp and qwen3_next_mtp).
MTP_MODEL_TYPES = ("deepseek_v3", "deepseek_v32", "glm4_moe", "qwen3_next")
# vLLM's names for the methods (`SpeculativeMethod` in vllm/config/speculative.py, stored copy).
VLLM_METHOD = {"eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram", "draft": "draft_model"}
# vLLM's ngram proposer needs its window (`prompt_lookup_max`, required when method is ngram).
NGRAM_LOOKUP_MAX = 4

MEASURE_HINT = ("acceptance is workload-specific: measure it on this workload with speculation on, from "
                "vLLM's counters rate(vllm:spec_decode_num_accepted_tokens_total) / "
                "rate(vllm:spec_decode_num_draft_tokens_total) at the k you ran (docs/speculative.md "
                "turns that into the per-token acceptance)")


# -- the arithmetic -------------------------------------------------------------------------------
def mean_acceptance_length(a: float, k: int) -> float:
    """Tokens a verify step emits per sequence, the bonus token included: (1 - a^(k+1)) / (1 - a)."""
    if k <= 0:
        return 1.0
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def per_token_acceptance(accepted: float, drafted: float, k: int) -> float:
    """The per-token acceptance a from vLLM's counters at k drafts per step: their ratio is the
    share of drafts accepted, (E - 1) / k, which rises with a (solved by bisection)."""
    if not (drafted > 0 and 0 <= accepted <= drafted and k >= 1):
        raise ValueError("give accepted <= drafted, drafted > 0 and k >= 1")
    target, lo, hi = accepted / drafted, 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (mean_acceptance_length(mid, k) - 1) / k < target else (lo, mid)
    return (lo + hi) / 2


def check_request(s: SpeculativeRequest) -> None:
    """The request's own values; a missing acceptance is refused, saying how to measure it."""
    if s.method not in SPECULATIVE_METHODS:
        raise SizingError(f"unknown method '{s.method}'; choose one of: {', '.join(SPECULATIVE_METHODS)}",
                          "speculative.method")
    a = s.acceptance_rate
    if a is None:
        raise SizingError(f"no acceptance rate given; {MEASURE_HINT}", "speculative.acceptance_rate")
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not (math.isfinite(a) and 0 < a < 1):
        raise SizingError(f"must be a number between 0 and 1, exclusive (got {a!r})", "speculative.acceptance_rate")
    k = s.draft_tokens
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MAX):
        raise SizingError(f"must be an integer from 1 to {K_MAX} (got {k!r})", "speculative.draft_tokens")
    if s.method == "draft" and not s.draft_model:
        raise SizingError("method draft needs the draft model: a catalog key, e.g. llama-3-8b",
                          "speculative.draft_model")


# -- the verify step --------------------------------------------------------------------------------
def verify_step(step: StepModel, k: int) -> StepModel:
    """The step that verifies k drafts for each of n sequences: token-linear pieces at n (k + 1)
    tokens, per-sequence pieces (terms that run only with decodes: attention's KV read) at n."""
    m = k + 1
    if step.terms or step.moe:
        terms = tuple((needs, pieces if needs == "n" else tuple((a, b * m, g) for a, b, g in pieces))
                      for needs, pieces in step.terms)
        moe = tuple(_verify_moe(term, m) for term in step.moe)
        return StepModel(step.a1, step.b1 * m, step.g1, step.a2, step.b2 * m, step.g2, step.k, step.e,
                         step.gated, terms=terms, moe=moe)
    # Roofline profiles: branch 1 reads the weights (and, additive, each sequence's KV) once per
    # sequence; branch 2 computes every token; k is each sequence's KV read.
    return StepModel(step.a1, step.b1, step.g1, step.a2, step.b2 * m, step.g2, step.k, step.e, step.gated)


def _verify_moe(term: tuple, m: int) -> tuple:
    """A fused-MoE term at m tokens per sequence: its FLOPs per token m times, and the experts
    touched on the tangent at m times the batch the step's tangent was taken at (`sizing.ops.
    moe_terms`: touched = e (1 - miss^T) for T tokens), in sequences."""
    floor, read, compute, per_token, e, miss, ta, tb = term
    if not (0 < miss < 1 and tb > 0 and e > 0):
        return (floor, read, compute, per_token * m, e, miss, ta, tb * m)
    n0 = max(math.log(tb / (e * -math.log(miss))) / math.log(miss), 1.0)     # where the tangent touches
    t0 = n0 * m
    slope = e * miss ** t0 * -math.log(miss)
    return (floor, read, compute, per_token * m, e, miss, e * (1 - miss ** t0) - slope * t0, slope * m)


def _sum_lines(parts: list[tuple[float, tuple]]) -> tuple:
    """The lines of sum_i w_i max(lines_i) (convex, piecewise linear): the active line of each part
    on every interval between the parts' own crossings, added."""
    cuts = {0.0, BRANCH_N_MAX}
    for _, lines in parts:
        for i, (a1, b1) in enumerate(lines):
            for a2, b2 in lines[i + 1:]:
                if b1 != b2 and 0.0 < (a1 - a2) / (b2 - b1) < BRANCH_N_MAX:
                    cuts.add((a1 - a2) / (b2 - b1))
    edges = sorted(cuts)
    out: list[tuple[float, float]] = []
    for lo, hi in zip(edges, edges[1:]):
        mid = (lo + hi) / 2
        a_sum = b_sum = 0.0
        for w, lines in parts:
            a, b = max(lines, key=lambda line: line[0] + line[1] * mid)
            a_sum, b_sum = a_sum + w * a, b_sum + w * b
        if not out or (abs(out[-1][0] - a_sum) > 1e-15 or abs(out[-1][1] - b_sum) > 1e-15):
            out.append((a_sum, b_sum))
    return tuple(out)


class SpeculativeStep:
    """A step with speculation at k drafts, in real seconds: the verify step, the drafter's passes
    (the first over the verified tokens, k - 1 of one token each) and, with a prompt chunk, the
    drafter's pass over it. Reads like `sizing.step.StepModel` where `ReplicaModel` reads one."""

    def __init__(self, base: StepModel, k: int, head: StepModel | None):
        self.base, self.k, self.head = base, k, head
        self.verify = verify_step(base, k)
        self.head_first = verify_step(head, k) if head is not None else None
        self.e, self.gated = base.e, base.gated

    def draft_s(self, n: float) -> float:
        if self.head is None or n <= 0:
            return 0.0
        return self.head_first.decode_s(n) + (self.k - 1) * self.head.decode_s(n)

    def decode_s(self, n: float) -> float:
        return self.verify.decode_s(n) + self.draft_s(n)

    def step_s(self, n: float, c: float) -> float:
        if c <= 0:
            return self.decode_s(n)
        t = self.verify.step_s(n, c) + self.draft_s(n)
        if self.head is not None:
            t += self.head.step_s(n, c) - (self.head.decode_s(n) if n > 0 else 0.0)
        return t

    def decode_branches(self) -> tuple:
        parts = [(1.0, self.verify.decode_branches())]
        if self.head is not None:
            parts += [(1.0, self.head_first.decode_branches()), (self.k - 1.0, self.head.decode_branches())]
        return _sum_lines(parts)

    def prefill_token_s(self) -> float:
        return self.verify.prefill_token_s() + (self.head.prefill_token_s() if self.head is not None else 0.0)

    def prefill_s(self, tokens: float) -> float:
        return self.step_s(0, tokens)


# -- the drafter ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Drafter:
    """What drafts: its model (None: ngram), its weights and KV per token on the replica."""
    method: str
    model: Model | None
    weights: str
    weights_gb: float
    kv_bytes_per_token: float
    checkpoint: str | None          # vLLM's `model` in --speculative-config (None: the target's own layers)

    def head_step(self, shape: Shape, workload, profile, real: bool) -> StepModel | None:
        if self.model is None:
            return None
        head = dataclasses.replace(shape, model=self.model, weights=self.weights)
        return build_step(head, workload, profile, real)

    def memory(self, mem: Memory, shape: Shape, profile, workload, k: int) -> Memory:
        """The replica's memory with the drafter: its weights out of the KV budget, its KV on every
        token, k lookahead slots per running sequence (the KV holds proportionally fewer)."""
        budget = mem.kv_budget_gb - self.weights_gb
        kv_tok = mem.kv_bytes_per_token + self.kv_bytes_per_token
        scale = max(budget, 0.0) / mem.kv_budget_gb * mem.kv_bytes_per_token / kv_tok if mem.kv_budget_gb > 0 else 0.0
        ctx = workload.decode_context_tokens
        seqs = int(mem.max_seqs_kv * scale * ctx / (ctx + k))
        cap = engine_max_num_seqs(shape, profile) * engine_ranks(shape)
        return dataclasses.replace(mem, kv_budget_gb=max(budget, 0.0), kv_bytes_per_token=kv_tok,
                                   kv_cache_tokens=int(mem.kv_cache_tokens * scale), max_seqs_kv=seqs,
                                   max_seqs=min(seqs, cap))


def _one_layer_head(target: Model, method: str) -> Model:
    """The target's last decoder layer alone, with the method's LM head (EAGLE-3: the draft vocabulary)."""
    arch = arch_of(target)
    vocab = EAGLE3_DRAFT_VOCAB if method == "eagle3" else arch.vocab_size
    ffn = arch.ffn_layers[-1]
    head = dataclasses.replace(arch, num_hidden_layers=1, layer_mixers=("attention",), ffn_layers=(ffn,),
                               moe_layers=(ffn == "moe",), sliding_layers=(), vocab_size=vocab,
                               tie_word_embeddings=False)
    return Model.from_architecture(f"{target.id}:{method}-head", f"{target.name} {method} head", head)


def build_drafter(s: SpeculativeRequest, shape: Shape, workload) -> Drafter:
    """The drafter a request names, for the replica's shape."""
    target = shape.model
    if s.method == "ngram":
        return Drafter("ngram", None, shape.weights, 0.0, 0.0, None)
    if s.method == "draft":
        try:
            model = resolve_model(s.draft_model)
        except CatalogError as exc:
            raise SizingError(str(exc), "speculative.draft_model") from exc
        if model.vocab != target.vocab:
            raise SizingError(f"{model.id} has a vocabulary of {model.vocab:,} tokens, {target.id} {target.vocab:,}: "
                              "a draft model must share the target's tokenizer", "speculative.draft_model")
        weights = shape.weights if shape.weights in model.checkpoints else "bf16"
        draft_shape = dataclasses.replace(shape, model=model, weights=weights)
        return Drafter("draft", model, weights, parallel.replica_weight_bytes(draft_shape) / 1e9,
                       parallel.kv_bytes_per_token(draft_shape, workload.decode_context_tokens),
                       model.checkpoints.get(weights))
    arch = arch_of(target)
    if s.method == "mtp" and arch.model_type not in MTP_MODEL_TYPES:
        raise SizingError(f"{target.id} ({arch.model_type}) has no MTP layers vLLM loads as a drafter; "
                          f"use eagle3, ngram or draft", "speculative.method")
    head = _one_layer_head(target, s.method)
    weights = EAGLE3_HEAD_WEIGHTS if s.method == "eagle3" else shape.weights
    groups = head.arch.bytes_by_group(weights)
    weight_bytes = sum(groups.values()) - groups["embed"]        # the input embedding is the target's
    if s.method == "eagle3":     # its fc fuses three of the target's hidden states into one (3h x h)
        weight_bytes += 3 * arch.hidden_size ** 2 * 2.0
    head_shape = dataclasses.replace(shape, model=head, weights=weights)
    return Drafter(s.method, head, weights, weight_bytes / 1e9,
                   parallel.kv_bytes_per_token(head_shape, workload.decode_context_tokens),
                   s.draft_model if s.method == "eagle3" else None)


# -- the replica with speculation --------------------------------------------------------------------
class SpeculativeReplica(ReplicaModel):
    """A replica whose decode steps speculate k drafts at acceptance a: its TPOT lines are the
    speculative step's per emitted token, its prefill and chunk costs the step's real seconds
    (the drafter prefills too), its memory the drafter's (`Drafter.memory`)."""

    def __init__(self, shape, workload, profile, real: bool = True, batched_tokens=None, checked=None, *,
                 drafter: Drafter, k: int, acceptance_rate: float):
        super().__init__(shape, workload, profile, real, batched_tokens, checked)
        self.base_step, self.drafter, self.k = self.step, drafter, k
        self.mean_acceptance_length = self.tokens_per_step = e = mean_acceptance_length(acceptance_rate, k)
        self.step = step = SpeculativeStep(self.base_step, k, drafter.head_step(shape, workload, profile, real))
        n_max = float(engine_max_num_seqs(shape, profile) * engine_ranks(shape))
        self.branches = _up_to(tuple((a / e, b / e) for a, b in step.decode_branches()), n_max)
        self.prefill_alone_s = step.prefill_s(self.s_in)
        self.prefill_token_s = step.prefill_token_s()
        self.share_per_request_s = self.s_in * self.prefill_token_s
        if not self.additive:
            self.ttft0_s = self.prefill_alone_s
        self.memory = drafter.memory(self.memory, shape, profile, workload, k)
        self.kv_tok = self.memory.kv_bytes_per_token


def factory(drafter: Drafter, k: int, acceptance_rate: float):
    """A `ReplicaModel`-shaped constructor for the planner (`plan_for_tp(replica_model=...)`)."""
    def make(shape, workload, profile, real=True, batched_tokens=None, checked=None):
        return SpeculativeReplica(shape, workload, profile, real, batched_tokens, checked,
                                  drafter=drafter, k=k, acceptance_rate=acceptance_rate)
    return make


# -- where it pays --------------------------------------------------------------------------------------
def step_gain(base: StepModel, steps: dict[int, SpeculativeStep], a: float, n: float) -> tuple[int, float]:
    """(k, gain) at batch n: the k whose step emits tokens fastest, and its time per token without
    speculation over with (> 1: it pays)."""
    plain = base.decode_s(n)
    best = max(steps, key=lambda k: mean_acceptance_length(a, k) / steps[k].decode_s(n))
    return best, plain * mean_acceptance_length(a, best) / steps[best].decode_s(n)


def stops_paying_batch(base: StepModel, steps: dict[int, SpeculativeStep], a: float, n_max: float) -> float | None:
    """The smallest batch at which no k shortens the time per token (None: it pays up to n_max)."""
    grid, n = [], 1.0
    while n < n_max:
        grid.append(n)
        n = n + 1 if n < 8 else math.ceil(n * 1.25)
    grid.append(n_max)
    prev = None
    for n in grid:
        if step_gain(base, steps, a, n)[1] <= 1.0:
            if prev is None:
                return n
            lo, hi = prev, n              # pays at lo, not at hi: the first batch that does not, to 1
            while hi - lo > 1:
                mid = math.floor((lo + hi) / 2)
                lo, hi = (mid, hi) if step_gain(base, steps, a, mid)[1] > 1.0 else (lo, mid)
            return float(hi)
        prev = n
    return None


def batch_at_statistic(in_flight: float, statistic: str) -> float:
    """The decode batch a request sees at the SLO statistic (the Poisson quantile of the mean)."""
    q = QUANTILES.get(statistic)
    if not math.isfinite(in_flight):
        return in_flight
    return max(1.0, in_flight if q is None else poisson_quantile_smooth(in_flight, q))


def speculative_config(sp: SpeculativePlan | None) -> str | None:
    """vLLM 0.29.0's --speculative-config, a JSON object (vllm/config/speculative.py SpeculativeConfig:
    `method`, `num_speculative_tokens`, `model`; ngram also `prompt_lookup_max`), or None when off."""
    if sp is None or not sp.enabled:
        return None
    body: dict = {"method": VLLM_METHOD[sp.method], "num_speculative_tokens": sp.draft_tokens}
    if sp.draft_model:
        body["model"] = sp.draft_model
    if sp.method == "ngram":
        body["prompt_lookup_max"] = NGRAM_LOOKUP_MAX
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


# -- the plan -------------------------------------------------------------------------------------------
def speculate(plan, req, replan):
    """The plan with speculative decoding where it pays: k at the plan's batch at the SLO
    statistic, the capacity recomputed with it (`replan(replica_model)`: the planner's
    `plan_for_tp` at the plan's shape), or the plan unchanged with the reason it does not pay."""
    s = req.speculative
    check_request(s)
    rm = plan.replica_model
    shape, w, profile, a = rm.shape, rm.workload, rm.profile, s.acceptance_rate
    drafter = build_drafter(s, shape, w)
    head = drafter.head_step(shape, w, profile, True)
    steps = {k: SpeculativeStep(rm.step, k, head) for k in ((s.draft_tokens,) if s.draft_tokens else range(1, K_MAX + 1))}
    stops = stops_paying_batch(rm.step, steps, a, float(engine_max_num_seqs(shape, profile) * engine_ranks(shape)))
    batch = batch_at_statistic(plan.real.in_flight, w.slo_statistic)
    chosen, k, gain = None, None, 1.0
    for _ in range(4):      # speculation shortens TPOT, so fewer sequences are in flight: settle the batch
        k_n, gain = step_gain(rm.step, steps, a, batch)
        if gain <= 1.0 or k_n == k:
            break
        k = k_n
        try:
            chosen = replan(factory(drafter, k, a))
        except SizingError as exc:       # e.g. the drafter's memory leaves too little KV
            return _off(plan, s, drafter, stops, batch, f"with k={k} the plan fails: {exc}")
        batch = batch_at_statistic(chosen.real.in_flight, w.slo_statistic)
    if chosen is None or gain <= 1.0:
        where = f"batch {stops:.0f}" if stops is not None else "no batch in range"
        return _off(plan, s, drafter, stops, batch,
                    f"at the expected batch of {batch:.1f} ({w.slo_statistic} of the sequences in flight) no k "
                    f"shortens the time per token (best gain {gain:.2f}x); it stops paying at {where}")
    before, after = _tpot_at_load(rm, plan), _tpot_at_load(chosen.replica_model, plan)
    tpot_gain = before / after if after > 0 and math.isfinite(after) and math.isfinite(before) else 1.0
    refused, effect = _judge(plan, chosen, k, batch, before, after)
    if refused:
        return _off(plan, s, drafter, stops, batch, refused)
    e = mean_acceptance_length(a, k)
    reason = (f"k={k} emits the most tokens per second at the expected batch of {batch:.1f} ({w.slo_statistic}): "
              f"{e:.2f} tokens per verify step, the step {gain:.2f}x faster per token"
              + (f"; it stops paying at batch {stops:.0f}" if stops is not None else "; it pays at every batch in range")
              + f"; {effect}")
    sp = SpeculativePlan(method=s.method, draft_tokens=k, acceptance_rate=a, mean_acceptance_length=e,
                         stops_paying_batch=stops, expected_batch=batch, enabled=True, tpot_gain=tpot_gain,
                         draft_memory_gb=_draft_memory_gb(drafter, chosen), reason=reason,
                         draft_model=drafter.checkpoint)
    return dataclasses.replace(chosen, speculative=sp)


def _judge(plan, chosen, k: int, batch: float, before: float, after: float) -> tuple[str | None, str]:
    """(why the plan with speculation is refused, or None; what it changes): it must need no more
    GPUs and keep N+1, and shorten TPOT at the plan's load (a closed loop: raise the clients'
    throughput, which also raises the prefill share and so can lengthen the tail of TPOT)."""
    effect = f"capacity per replica {plan.capacity_per_replica.qps:.2f} -> {chosen.capacity_per_replica.qps:.2f} QPS"
    if chosen.gpus_used > plan.gpus_used or (plan.survives_failure and not chosen.survives_failure):
        return (f"k={k} pays at batch {batch:.1f} but cuts the {effect} (its capacity batch is where it pays "
                "less): more GPUs"), effect
    if plan.request.workload.is_closed_loop:
        x0, x1 = plan.closed_loop["requests_per_s"], chosen.closed_loop["requests_per_s"]
        if x1 <= x0:
            return f"k={k} does not raise the clients' throughput ({x0:.2f} -> {x1:.2f} requests/s)", effect
        return None, effect + f"; the clients' throughput {x0:.2f} -> {x1:.2f} requests/s per replica"
    if not after < before:
        return f"k={k} does not shorten TPOT at the plan's load ({before:.1f} -> {after:.1f} ms)", effect
    return None, effect


def _off(plan, s: SpeculativeRequest, drafter: Drafter, stops, batch: float, reason: str):
    sp = SpeculativePlan(method=s.method, draft_tokens=0, acceptance_rate=s.acceptance_rate,
                         mean_acceptance_length=1.0, stops_paying_batch=stops, expected_batch=batch, enabled=False,
                         tpot_gain=1.0, draft_memory_gb=0.0, reason=reason, draft_model=drafter.checkpoint)
    return dataclasses.replace(plan, speculative=sp)


def _tpot_at_load(rm: ReplicaModel, plan) -> float:
    """TPOT at the SLO statistic, ms, of one replica at the plan's load per replica (after the worst loss)."""
    w = rm.workload
    if w.is_closed_loop:
        return rm.closed_point(math.ceil(w.concurrency / plan.replicas_carrying)).tpot_at_statistic_ms
    return rm.at(plan.load_per_replica_qps).tpot_at_statistic_ms


def _draft_memory_gb(drafter: Drafter, plan) -> float:
    """The drafter's weights and its KV for the sequences in flight at the plan's load, GB."""
    ctx = plan.replica_model.workload.decode_context_tokens
    in_flight = plan.real.in_flight if math.isfinite(plan.real.in_flight) else 0.0
    return drafter.weights_gb + drafter.kv_bytes_per_token * ctx * in_flight / 1e9


def summary_line(d: dict) -> str:
    """The report's one line from the JSON section."""
    head = f"Speculative decoding ({d['method']}, acceptance {d['acceptance_rate']:g})"
    if not d["enabled"]:
        return f"{head}: off; {d['reason']}."
    return (f"{head}: on, k={d['draft_tokens']}, TPOT without / with {d['tpot_gain']:.2f}x at the plan's load; "
            f"{d['reason']}; drafter {d['draft_memory_gb']:.1f} GB per replica.")


def to_dict(sp: SpeculativePlan) -> dict:
    """The plan's JSON `speculative` section."""
    def num(x, nd=4):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(x, nd)
    return {"method": sp.method, "draft_tokens": sp.draft_tokens, "acceptance_rate": sp.acceptance_rate,
            "mean_acceptance_length": num(sp.mean_acceptance_length), "stops_paying_batch": num(sp.stops_paying_batch, 1),
            "expected_batch": num(sp.expected_batch, 2), "enabled": sp.enabled, "tpot_gain": num(sp.tpot_gain),
            "draft_memory_gb": num(sp.draft_memory_gb, 3), "draft_model": sp.draft_model, "reason": sp.reason}
