"""The one step model: what a step that decodes n sequences and prefills c prompt tokens costs.

Used by the analytic engine (`sizing.model`), the simulator (`simulator.cost`) and the plot.

    t(n, c) = gate(n) x max(a1 + b1 n + g1 c, a2 + b2 n + g2 c) + k n + e c

- `mixed` profiles: one roofline over all the step's tokens. Branch 1 reads the weights once
  (a1 = weight bytes / B); branch 2 computes the matmuls of all n + c tokens (b2 = g2 = 2 P / F).
  Each part's attention comes on top: decode reads its KV cache (k = context x KV bytes / B),
  prefill computes its causal attention (e per token). gate(n) = 1. This reproduces the H200
  mixed-step measurements (a mixed step 0.64-1.0 x the sum of its parts), where the sum of a
  decode step and a prefill over-counts the weight read.
- `additive` profiles (the seed's formulas, kept for the reference table): the decode roofline
  times real_factor, max(a1 + b1 n, a2 + b2 n), plus e = prefill seconds per prompt token; a
  step with nothing to decode costs only its prefill (gate(0) = 0).

An MoE model's a1 and b1 are the tangent of the weights a decode step reads (dense and attention
weights plus the experts the batch touches, `sizing.parallel.decode_read_line`) at the batch the
replica runs; its KV bytes count the copies its layout keeps (MLA under TP: one per rank).

B = tp x HBM bandwidth (x decode_bw_fraction), F = tp x peak x mfu. Two ring all-reduces per
layer are added (`comm_terms`): in full when the profile's `comm_baseline_link` is `none`, else
only what a slower link costs beyond the one the profile was measured on.

A replica over `nodes` nodes (pipeline parallel, one stage per node): a step's tokens pass the
stages one after another, so B and F stay one node's (each stage reads its share of the weights
and KV at its node's bandwidth, in turn: the sum is the whole model's at one node's), and each of
the nodes - 1 hops between stages sends the step's activations over the instance's EFA
(`pp_terms`). This is one batch in flight through the pipeline: vLLM can keep several (one per
stage), which raises throughput but not a sequence's TPOT; the capacity here is the lower bound.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import ops, parallel
from .catalog import bytes_per_element, load_catalog

GB = 1e9


@dataclass(frozen=True)
class StepModel:
    a1: float
    b1: float
    g1: float
    a2: float
    b2: float
    g2: float
    k: float           # per decoding sequence, outside the max (its attention)
    e: float           # per prefill token, outside the max (its attention, or all of it when additive)
    gated: bool        # additive: no decode part without a decode batch
    # `ops` profiles (`sizing.ops`): the step is a sum of operations, each the max of its pieces
    # (alpha, beta per decode, gamma per prompt token); `needs` says when it runs ("n": decodes,
    # "c": a prompt chunk, "c0": a decode-only step, "": always). `moe`: the fused-MoE layers,
    # (floor, s per touched expert read, s per touched expert computed, s per token, local experts,
    # 1 - k/E, the touched experts' tangent a + b n), `sizing.ops.moe_terms`.
    terms: tuple = ()
    moe: tuple = ()
    # `ops`: decode_branches(), computed once (a decode-only step is their max, exactly)
    lines: tuple = field(init=False, default=(), compare=False, repr=False)
    # `ops`: the pieces a step with a prompt chunk runs, with decodes and without
    with_chunk: tuple = field(init=False, default=(), compare=False, repr=False)
    chunk_only: tuple = field(init=False, default=(), compare=False, repr=False)
    # `ops`: the last (n, c, seconds) priced: the capacity search asks for the same full-chunk step
    # twice in a row (its prompt cost and its prefill queue)
    last: list = field(init=False, default_factory=lambda: [-1.0, -1.0, 0.0], compare=False, repr=False)

    def __post_init__(self):
        if self.terms or self.moe:
            object.__setattr__(self, "lines", self.decode_branches())
            object.__setattr__(self, "with_chunk", _flat(p for needs, p in self.terms if needs != "c0"))
            object.__setattr__(self, "chunk_only", _flat(p for needs, p in self.terms if needs in ("", "c")))

    @classmethod
    def additive(cls, branches, prefill_s_per_token: float) -> "StepModel":
        """The seed's step from its decode branches [(a, b), ...] and a prefill cost per token."""
        (a1, b1), (a2, b2) = (branches[0], branches[1]) if len(branches) > 1 else (branches[0], branches[0])
        return cls(a1, b1, 0.0, a2, b2, 0.0, 0.0, prefill_s_per_token, True)

    # The larger branch is written `y if y > x else x`: what max(x, y) returns (NaN included),
    # without a call; these two run in every inner loop of the sizing (issue 21's profile).
    def decode_s(self, n: float) -> float:
        """A step with n decodes and no prefill."""
        if n <= 0 and self.gated:
            return 0.0
        if self.lines:
            best = -1.0
            for a, b in self.lines:
                v = a + b * n
                if v > best:
                    best = v
            return best
        x, y = self.a1 + self.b1 * n, self.a2 + self.b2 * n
        return (y if y > x else x) + self.k * n

    def step_s(self, n: float, c: float) -> float:
        if n <= 0 and self.gated:
            return self.e * c
        if self.lines:
            if c <= 0:
                return self.decode_s(n)
            last = self.last
            if last[0] == n and last[1] == c:
                return last[2]
        x, y = self.a1 + self.b1 * n + self.g1 * c, self.a2 + self.b2 * n + self.g2 * c
        t = (y if y > x else x) + self.k * n + self.e * c
        if self.terms or self.moe:
            t += self._ops_s(n, c)
            self.last[:] = (n, c, t)
        return t

    def _ops_s(self, n: float, c: float) -> float:
        """The operations of a step with a prompt chunk (c > 0): each its largest piece."""
        t = 0.0
        for a1, b1, g1, a2, b2, g2, a3, b3, g3 in (self.with_chunk if n > 0 else self.chunk_only):
            x, y, z = a1 + b1 * n + g1 * c, a2 + b2 * n + g2 * c, a3 + b3 * n + g3 * c
            if y > x:
                x = y
            t += z if z > x else x
        for floor, read, compute, per_token, e_local, miss, ta, tb in self.moe:
            # the decode batch's experts on their tangent, the prompt tokens' own beyond them exactly
            touched = ta + tb * n + e_local * (miss ** n - miss ** (n + c))
            mem, comp = read * touched, compute * touched + per_token * (n + c)
            t += floor if floor > mem and floor > comp else (mem if mem > comp else comp)
        return t

    def decode_branches(self) -> tuple[tuple[float, float], ...]:
        """decode_s(n) = max(A + B n) over these lines (1 <= n <= BRANCH_N_MAX): two for the
        roofline profiles; for `ops` the pieces of the sum of maxes, one line per interval
        between the n where some operation changes its binding piece (convex, so exact)."""
        core = ((self.a1, self.b1 + self.k), (self.a2, self.b2 + self.k))
        if not self.terms and not self.moe:
            return core
        if self.lines:
            return self.lines
        # Each operation's upper envelope in n: its binding line at n = 1 and where it changes.
        a_sum, b_sum = core[0] if core[0][0] + core[0][1] >= core[1][0] + core[1][1] else core[1]
        events = []
        for pieces in self._decode_pieces():
            la, lb = pieces[0]
            for a, b in pieces[1:]:      # the binding piece at n = 1 (ties: the steeper)
                if a + b > la + lb or (a + b == la + lb and b > lb):
                    la, lb = a, b
            a_sum, b_sum = a_sum + la, b_sum + lb
            while True:     # the next piece to overtake it: the nearest crossing of a steeper one
                at, nxt = BRANCH_N_MAX, None
                for a, b in pieces:
                    if b > lb:
                        x = (la - a) / (b - lb)
                        if x < at:
                            at, nxt = x, (a, b)
                if nxt is None:
                    break
                events.append((at, nxt[0] - la, nxt[1] - lb))
                la, lb = nxt
        lines = [(a_sum, b_sum)]
        for _at, da, db in sorted(events):
            a_sum, b_sum = a_sum + da, b_sum + db
            lines.append((a_sum, b_sum))
        return tuple(lines)

    def _decode_pieces(self):
        """The (a, b) pieces in n of every operation a decode-only step runs."""
        for needs, pieces in self.terms:
            if needs != "c":
                yield [(a, b) for a, b, _ in pieces]
        for floor, read, compute, per_token, _e, _miss, ta, tb in self.moe:
            yield [(floor, 0.0), (read * ta, read * tb), (compute * ta, compute * tb + per_token)]

    def prefill_token_s(self) -> float:
        """What a prompt token adds to a step whose chunk is compute-bound: the largest slope in c."""
        slope = max(self.g1, self.g2) + self.e
        for needs, pieces in self.terms:
            if needs != "c0":
                slope += max(g for _, _, g in pieces)
        for _floor, _read, _compute, per_token, *_ in self.moe:
            slope += per_token
        return slope

    def prefill_s(self, tokens: float) -> float:
        """A whole prompt alone in one step (no decodes): its prefill time."""
        return self.step_s(0, tokens)


def _flat(terms) -> tuple:
    """Each operation's pieces as one 9-tuple (a fewer-piece one repeats its first piece: the max
    is the same), the shape `StepModel._ops_s` reads without an inner loop."""
    out = []
    for pieces in terms:
        first = pieces[0]
        second = pieces[1] if len(pieces) > 1 else first
        third = pieces[2] if len(pieces) > 2 else first
        out.append((*first, *second, *third))
    return tuple(out)


BRANCH_N_MAX = 16384.0     # decode batches the branches cover (a dp-ep replica runs up to 8 x 1,024)


def comm_terms(shape, profile, tokens_per_step_bytes: float) -> tuple[float, float]:
    """(fixed s, s per token) of two ring all-reduces per layer, beyond the profile's baseline link;
    with DP attention and EP (`sizing.parallel`), the MoE layers' all-to-alls instead, in full."""
    m, inst, tp = shape.model, shape.instance, shape.tp
    if parallel.layout_of(shape) == "dp-ep":
        return parallel.all_to_all_terms(shape)
    if tp <= 1:
        return 0.0, 0.0
    link = inst.link
    ring = 2 * (tp - 1)
    if profile.comm_baseline_link == "none":       # every all-reduce charged in full
        d_lat, d_inv_bw = link.latency_us * 1e-6, 1 / (link.bandwidth_gbps * GB)
    else:
        base = load_catalog().links[profile.comm_baseline_link]
        d_lat = max(0.0, link.latency_us - base.latency_us) * 1e-6
        d_inv_bw = max(0.0, 1 / (link.bandwidth_gbps * GB) - 1 / (base.bandwidth_gbps * GB))
    calls = 2 * m.layers
    return calls * ring * d_lat, calls * (ring / tp) * tokens_per_step_bytes * d_inv_bw


# vLLM 0.29.0 passes `hidden_states` and `residual` between pipeline stages (IntermediateTensors of
# vllm/model_executor/models/llama.py at v0.29.0): two BF16 vectors of `hidden` per token per hop.
PP_TENSORS_PER_TOKEN = 2


def pp_terms(shape) -> tuple[float, float]:
    """(fixed s, s per token) of the hops between a multi-node replica's pipeline stages: the
    activations cross the instance's EFA (catalog `network_gbps`: p5.48xlarge 3,200 Gbps,
    ../shared/reference/hardware.md from AWS's instance page). Per-hop latency is not modelled
    (no cited EFA figure): only bandwidth, so this is a floor on the hop's cost."""
    hops = getattr(shape, "nodes", 1) - 1
    if hops <= 0:
        return 0.0, 0.0
    bytes_per_token = PP_TENSORS_PER_TOKEN * bytes_per_element("bf16") * shape.model.hidden
    efa_bytes_per_s = shape.instance.network_gbps * 1e9 / 8
    return 0.0, hops * bytes_per_token / efa_bytes_per_s


def step_comm(shape, profile) -> tuple[float, float]:
    """(fixed s, s per token) of a step's communication: the all-reduces (or all-to-alls) of a
    token's BF16 activations and the hops between pipeline stages."""
    comm0, comm1 = comm_terms(shape, profile, bytes_per_element("bf16") * shape.model.hidden)
    pp0, pp1 = pp_terms(shape)
    return comm0 + pp0, comm1 + pp1


def build_step(shape, workload, profile, real: bool = True, comm: tuple[float, float] | None = None) -> StepModel:
    """The step model of one replica for one workload (mean contexts) under one profile.

    A dense model reads all its weights each decode step. An MoE model reads its dense and
    attention weights plus the distinct experts the batch touches, a concave function of the
    batch (`Architecture.experts_touched`): the step uses its tangent at the batch the replica
    runs (closed loop: its clients; open loop: the batch whose step takes the TPOT SLO, where
    capacity is decided), exact there and an upper bound elsewhere. `comm`: `step_comm(shape,
    profile)`, when the caller has it."""
    if profile.step_model == "ops" and real:       # ideal: the roofline below at full bandwidth
        return _ops_step(shape, workload, profile)
    m, gpu, tp = shape.model, shape.instance.gpu, shape.tp
    # A decoding sequence's context averaged over its decode steps (s_in + s_out / 2 for fixed
    # lengths; longer when long prompts also decode long: sizing.traffic), and the prompt length
    # a prompt token's attention sees on average over tokens (s_in for fixed lengths).
    ctx = workload.decode_context_tokens
    s_in = workload.prompt_attention_tokens
    p_active = m.active_params_b * 1e9
    kv_tok = parallel.kv_bytes_per_token(shape, ctx)
    comm0, comm1 = comm or step_comm(shape, profile)
    flops_f = tp * gpu.peak_tflops(shape.weights) * 1e12 * profile.mfu
    width = parallel.attention_width(m)
    attn_prefill = 2 * parallel.attention_layers_at(m, s_in / 2) * s_in * width   # causal, per prompt token
    read0, read1 = _weight_read(shape, workload, profile, real, ctx * kv_tok, comm0, comm1)
    if profile.step_model == "additive":
        rf = profile.real_factor if real else 1.0
        bw = tp * gpu.hbm_tbps * 1e12
        decode_flops = 2 * p_active + 4 * parallel.attention_layers_at(m, ctx) * width * ctx
        e = (2 * p_active + attn_prefill) / flops_f + comm1 + comm0 / workload.input_tokens
        return StepModel(a1=rf * read0 / bw + comm0, b1=rf * (ctx * kv_tok + read1) / bw + comm1, g1=0.0,
                         a2=comm0, b2=rf * decode_flops / flops_f + comm1, g2=0.0, k=0.0, e=e, gated=True)
    frac = profile.decode_bw_fraction if real else 1.0
    bw = tp * gpu.hbm_tbps * 1e12 * frac
    per_token = 2 * p_active / flops_f + comm1
    return StepModel(a1=read0 / bw + comm0, b1=read1 / bw, g1=0.0, a2=comm0, b2=per_token, g2=per_token,
                     k=ctx * kv_tok / bw, e=attn_prefill / flops_f, gated=False)


def _weight_read(shape, workload, profile, real, kv_seq, comm0, comm1) -> tuple[float, float]:
    """(bytes, bytes per sequence) a decode step reads in weights: all of them for a dense model;
    for an MoE model the tangent of the experts-touched curve at the operating batch (found with
    the step's own KV read per sequence, `kv_seq` bytes: the workload's decode context)."""
    if not shape.model.is_moe:
        return parallel.decode_read_bytes(shape, 0.0), 0.0
    gpu, tp = shape.instance.gpu, shape.tp
    if workload.concurrency is not None:       # closed loop: the batch is the clients (at most max_num_seqs)
        return parallel.decode_read_line(shape, float(min(workload.concurrency, profile.max_num_seqs)))
    frac = profile.decode_bw_fraction if real and profile.step_model == "mixed" else 1.0
    rf = profile.real_factor if real and profile.step_model == "additive" else 1.0
    bw = tp * gpu.hbm_tbps * 1e12 * frac / rf
    n = 64.0
    for _ in range(4):      # the batch whose decode step takes the TPOT SLO, capped by max_num_seqs
        read0, read1 = parallel.decode_read_line(shape, n)
        per_seq = (read1 + kv_seq) / bw + comm1
        room = workload.tpot_slo_s - read0 / bw - comm0
        n = min(float(profile.max_num_seqs), max(1.0, room / per_seq if per_seq > 0 else 1.0))
    return parallel.decode_read_line(shape, n)


def _ops_step(shape, workload, profile) -> StepModel:
    """The per-operation step (`sizing.ops`). An MoE model's expert read is the tangent at the
    batch it runs: its clients in a closed loop; in an open loop the batch whose decode step takes
    the TPOT SLO (found from the step itself, three passes), at most max_num_seqs."""
    extra = [pp_terms(shape)]
    if parallel.layout_of(shape) == "dp-ep":      # its all-to-alls; TP layouts' all-reduces are priced by ops
        extra.append(comm_terms(shape, profile, bytes_per_element("bf16") * shape.model.hidden))
    cap = float(profile.max_num_seqs)
    def at(n: float) -> StepModel:
        fixed, per_token, terms, moe = ops.build_ops_step(shape, workload, profile, n, extra)
        d, p = profile.ops_decode_factor, profile.ops_prefill_factor
        if d != 1.0 or p != 1.0:        # a fleet's fitted factors: decode pieces by d, prompt tokens by p
            terms = tuple((needs, tuple((a * d, b * d, g * p) for a, b, g in pieces)) for needs, pieces in terms)
            moe = tuple((f * d, r * d, c * d, t * d, *rest) for f, r, c, t, *rest in moe)
        return StepModel(fixed, per_token, per_token, fixed, per_token, per_token, 0.0, 0.0, False,
                         terms=terms, moe=moe)
    if workload.concurrency is not None:
        return at(min(float(workload.concurrency), cap))
    n = 64.0
    step = at(n)
    for _ in range(3 if shape.model.is_moe else 0):
        room = [(workload.tpot_slo_s - a) / b for a, b in step.decode_branches() if b > 0]
        n = min(cap, max(1.0, min(room) if room else cap))
        step = at(n)
    return step
