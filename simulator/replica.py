"""One vLLM-like replica: continuous batching with chunked prefill, a step at a time.

The scheduler follows vLLM's V1 engine: each step first gives every decoding sequence one token
of the step's budget (`max_num_batched_tokens`), then continues the partial prefills, then admits
waiting requests first-come first-served while budget, `max_num_seqs` and free KV cache allow
(a request takes KV for the tokens it has computed, not for its whole context, and is admitted
only when its whole prompt fits); `_prefill_chunks` says where this is vLLM 0.29.0's code.
When the decoding sequences' next tokens do not fit in the KV cache, the most recently admitted
request is preempted: it frees its cache and goes back to the front of the queue to be
recomputed, and that step admits no waiting request.

Speed (the simulator's point): a decoding sequence is never touched per step. Its last step is
known when its decode starts (`finish`), so a step only costs O(1) plus its prefill chunks, and a
run of pure-decode steps (no prefill, nothing admissible) is one event up to the next finish,
the next arrival, or the KV limit. Completions come off a heap keyed by finish step.

Speculative decoding (`Speculation`): each decode step verifies k drafts per sequence; a
sequence's accepted drafts are drawn per step (each accepted with probability a given the ones
before it, so truncated-geometric at k) and the step emits them plus the bonus token. The draws of
a sequence's whole decode are made when its decode starts, so its last step is still known then
(the O(1) step above holds). The step is the verify step's cost (`Speculation.verify`), it takes
k + 1 tokens of the step's budget per sequence, and each sequence's KV grows by the mean
acceptance length (rounded) per step.

Disaggregated serving (`simulator.disagg`) uses two more inputs: a request's `pf_remote` prompt
tokens whose KV arrived from a prefill replica (resident from admission, never computed here),
and `kv_held`, KV the loop holds on the replica outside its running requests (a finished
prefill's KV until the decode has pulled it; a decode's blocks allocated for a transfer in
flight).
"""
from __future__ import annotations

import math
import random
from collections import deque
from heapq import heappop, heappush
from typing import Any

from .cost import StepCost
from .workload import Request


class Speculation:
    """k drafts per sequence and decode step, each accepted with probability `acceptance_rate`
    given the ones before it (Leviathan, Kalman and Matias, arXiv 2211.17192, section 3.1): a
    step emits (1 - a^(k+1)) / (1 - a) tokens on average, the bonus token included. `verify`
    prices a step (`decode_s(n)`, `step_s(n, c)`, in seconds: the verify over n x (k + 1) tokens
    and the drafter's passes)."""

    def __init__(self, draft_tokens: int, acceptance_rate: float, verify: Any, seed: str):
        if draft_tokens < 1:
            raise ValueError(f"speculation needs at least one draft token (got {draft_tokens})")
        if not 0.0 <= acceptance_rate < 1.0:
            raise ValueError(f"acceptance rate {acceptance_rate!r}: must be in [0, 1)")
        self.draft_tokens = draft_tokens
        self.acceptance_rate = acceptance_rate
        self.verify: Any = verify
        self.rng = random.Random(seed)
        a = acceptance_rate
        self.mean_acceptance_length = (1.0 - a ** (draft_tokens + 1)) / (1.0 - a)
        self.kv_tokens_per_step = max(1, round(self.mean_acceptance_length))

    def steps_for(self, tokens: int) -> tuple[int, int]:
        """(verify steps, drafts accepted in them) to emit `tokens` tokens, drawn step by step."""
        rnd, a, k = self.rng.random, self.acceptance_rate, self.draft_tokens
        steps = accepted = emitted = 0
        while emitted < tokens:
            j = 0
            while j < k and rnd() < a:
                j += 1
            steps += 1
            accepted += j
            emitted += j + 1
        return steps, accepted


class Replica:
    def __init__(self, name: str, zone: str, cost: StepCost, max_num_batched_tokens: int,
                 max_num_seqs: int, kv_capacity_tokens: int, on_done, long_prefill_token_threshold: int = 0,
                 speculation: Speculation | None = None):
        if max_num_batched_tokens < max_num_seqs:
            # vLLM refuses this too: the decodes alone could exceed the step's budget.
            raise ValueError(f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least "
                             f"max_num_seqs ({max_num_seqs})")
        self.name, self.zone = name, zone
        # a pure-decode step of n sequences, by n (at most max_num_seqs decode), n = 0 costing
        # nothing: one list lookup a step instead of its arithmetic
        self._dec = [0.0] + [cost.decode_s(n) for n in range(1, max_num_seqs + 1)]
        # a per-operation step (`sizing.ops`) prices a prefill step with StepModel.step_s itself
        self._ops: Any = cost if cost.terms or cost.moe else None
        self._spec = speculation
        self.kv_step = 1                 # KV tokens a decoding sequence adds per step
        self.dec_tokens = 1              # budget tokens a decoding sequence takes per step
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = 0   # vLLM's spec_decode counters
        if speculation is not None:
            verify = speculation.verify
            self._dec = [0.0] + [verify.decode_s(n) for n in range(1, max_num_seqs + 1)]
            self._ops = verify           # a step with prefill chunks verifies its decodes too
            self.kv_step = speculation.kv_tokens_per_step
            self.dec_tokens = speculation.draft_tokens + 1
        # StepModel.step_s(n, c) = max(a1 + b1 n + g1 c, a2 + b2 n + g2 c) + k n + e c, its terms
        # in n by n: a prefill step adds the c terms inline (the same operations in the same order
        # as step_s, so the same floats)
        self._pf_n = [(cost.a1 + cost.b1 * n, cost.a2 + cost.b2 * n, cost.k * n) for n in range(max_num_seqs + 1)]
        self._g1, self._g2, self._e, self._gated = cost.g1, cost.g2, cost.e, cost.gated
        self.budget, self.max_seqs, self.kv_cap = max_num_batched_tokens, max_num_seqs, kv_capacity_tokens
        self.long_prefill = long_prefill_token_threshold     # vLLM's: a chunk's cap per request (0: none)
        self._on_done = on_done
        self.up = True
        self.busy_s = self.prefill_s = self.batch_s = 0.0   # utilisation: busy, prefill, sum of n x dt
        self.up_s = 0.0
        self._up_since = 0.0
        self.preemptions = 0
        self.served = 0
        self._seq = 0
        # requests routed here still in its API server (simulator.loop), and their tokens: the
        # router counts them with the engine's
        self.admitting = 0
        self.admitting_tokens = 0
        self.kv_held = 0
        self._reset(0.0)

    def _reset(self, t: float) -> None:
        self.clock = t
        self.kv_held = 0                 # KV held for the disaggregated loop (module docstring)
        self.k = 0                       # steps completed
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}   # admission order; popitem() gives the newest
        self.prefilling: list[Request] = []
        self.n = 0                       # decoding sequences
        self.kv_dec = 0                  # sum over decoders of (pf_total - k0); KV = kv_dec + n k
        self.kv_pf = 0                   # KV held by partial prefills
        self.heap: list[tuple[int, int, int, Request]] = []   # (finish step, seq, epoch, request)
        self.fin_sum = 0                 # sum of decoders' finish steps (pending decode tokens)
        self.pend = 0                    # pending prefill + output tokens of non-decoding requests
        self.busy = False
        self.next_end = math.inf         # when the pending step(s) end (inf: idle); the loop reads it
        self.s_start = self.s_dur = 0.0
        self.s_count = 0
        self.s_n = 0
        self.s_prefill = 0.0
        self.s_chunks: list[tuple[Request, int]] | None = None   # a prefill step's (request, tokens); None: decode

    # -- what the router sees --------------------------------------------------------------------
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running) + self.admitting

    def pending_tokens(self, t: float) -> int:
        """Prefill and output tokens still to compute, at time t (inside a pure-decode run too)."""
        k = self.k
        if self.busy and self.s_chunks is None and t > self.s_start:
            k += min(self.s_count, int((t - self.s_start) / self.s_dur))
        return self.pend + self.fin_sum - self.n * k + self.admitting_tokens

    # -- driving the clock -------------------------------------------------------------------------
    def run_until(self, t: float) -> None:
        """Apply every step that ends by t (the step in progress at t stays pending)."""
        start, heap = self._start, self.heap
        while self.next_end <= t and self.busy:
            # _apply(self.s_count), inline: its `end` (s_start + s_count * s_dur) is next_end, the
            # same expression in _start and _cut
            self.clock = end = self.next_end
            steps, dur = self.s_count, self.s_dur
            self.busy_s += steps * dur
            self.batch_s += self.s_n * steps * dur
            self.k = k = self.k + steps
            if self.s_chunks is not None:
                self._apply_chunks(self.s_chunks, k, end)
            if heap and heap[0][0] <= k:
                self._finish_decodes(k, end)
            start()                         # schedules the next step, or sets busy False (idle)

    def enqueue(self, r: Request, t: float) -> None:
        """A request arrives at t (after run_until(t)); it joins the next step."""
        r.replica = self.name
        self.waiting.append(r)
        self.pend += r.pf_total - r.pf_remote + r.out - r.gen
        if self.busy:
            self._cut(t)
        else:
            self.clock = t
            self._start()

    def hold(self, tokens: int, t: float) -> None:
        """Hold `tokens` of KV outside the running requests from t (after run_until(t)): a pure-decode
        run in progress ends at its current step, so the next step sees the smaller cache."""
        self.kv_held += tokens
        if self.busy:
            self._cut(t)

    def release(self, tokens: int, t: float) -> None:
        """Give back held KV at t (after run_until(t)); an idle replica with waiting requests starts."""
        self.kv_held -= tokens
        if self.busy:
            self._cut(t)
        elif self.up and self.waiting:
            self.clock = t
            self._start()

    def kv_free(self) -> int:
        """KV tokens neither running requests nor holds use (at the last step's end)."""
        return self.kv_cap - self.kv_used()

    def _cut(self, t: float) -> None:
        """End a pure-decode run at the step in progress at t, so that t's arrival joins the next."""
        if self.s_chunks is not None or self.s_count == 1:
            return
        done = int((t - self.s_start) / self.s_dur)
        if done >= self.s_count:
            done = self.s_count - 1
        if done > 0:
            self._apply(done)
            self.s_start += done * self.s_dur
        self.s_count = 1
        self.next_end = self.s_start + self.s_dur

    # -- one step ------------------------------------------------------------------------------------
    def _start(self) -> None:
        """Schedule the next step at self.clock, or go idle. (The hottest code of a run, with
        `_apply`: attributes read once into locals, StepModel.step_s inline.)"""
        cap = self.kv_cap
        g = self.kv_step
        preempted = False                   # vLLM admits no waiting request in a step that preempted
        while True:
            n = self.n
            used = self.kv_pf + self.kv_dec + n * self.k * g + self.kv_held
            if used + n * g > cap and self.running:
                self._preempt()
                preempted = True
                continue
            if self.prefilling or self.waiting:
                chunks, c_total = self._prefill_chunks(self.budget - n * self.dec_tokens, cap - used - n * g,
                                                       not preempted)
            else:                           # nothing to prefill: skip the call
                chunks, c_total = None, 0
            if n == 0 and c_total == 0:
                if self.prefilling:         # partial prefills stuck on a full cache: make room
                    self._preempt()
                    preempted = True
                    continue
                if preempted and self.waiting:
                    preempted = False       # an empty step: the next one admits
                    continue
                self.busy = False           # idle until the next arrival
                self.next_end = math.inf
                return
            break
        clock = self.clock
        self.s_start, self.s_n, self.busy = clock, n, True
        dec = self._dec[n]
        if c_total:
            if self._ops is not None:
                dur = self._ops.step_s(n, c_total)
            elif n <= 0 and self._gated:    # StepModel.step_s(n, c_total), inline
                dur = self._e * c_total
            else:
                a, b, kn = self._pf_n[n]
                a += self._g1 * c_total
                b += self._g2 * c_total
                dur = (b if b > a else a) + kn + self._e * c_total    # max(a, b)
            self.s_dur, self.s_count, self.s_chunks = dur, 1, chunks
            self.s_prefill = dur - dec          # the prefill's part of this step
            self.next_end = clock + dur
            return
        # Pure decode: run to the next finish, or until the cache holds no more tokens.
        heap = self.heap
        top = heap[0]
        while top[2] != top[3].epoch:      # stale: its request was preempted or lost since
            heappop(heap)
            top = heap[0]
        steps = top[0] - self.k
        room = (cap - used) // (n * g)
        count = steps if steps < room else room
        self.s_dur, self.s_count, self.s_chunks = dec, count, None
        self.next_end = clock + count * dec

    # What vLLM 0.29.0's V1 scheduler does (the release's own sources, vllm-0.29.0 on PyPI; lines
    # of vllm/v1/core/sched/scheduler.py unless named), and where this follows it:
    # - RUNNING first (`schedule`, :501; "First, schedule the RUNNING requests.", :550-552): every
    #   running request in admission order gets min(tokens it still lacks,
    #   long_prefill_token_threshold if > 0 (:590-591), the budget left) while budget is left; a
    #   decode lacks one token, a partial prefill the rest of its prompt; when blocks run out the
    #   newest running request is preempted (`self.running.pop()`, :705).
    # - then WAITING (:774), only when this step preempted nothing (`if not preempted_reqs`, :775),
    #   first come first served while the budget lasts and fewer than max_num_seqs run (:784), a
    #   new request's chunk capped the same way (:984-986) and by the budget (:998), admitted only
    #   when its whole sequence fits in the free KV cache (`full_sequence_must_fit=
    #   scheduler_reserve_full_isl`, :1086, True by default, vllm/config/scheduler.py:161;
    #   vllm/v1/core/kv_cache_manager.py:471-473), stopping at the first that does not
    #   (`if new_blocks is None: ... break`, :1091-1098); admitted, it joins the end of `running`
    #   (:1159). (vLLM's block watermark and block rounding are not modelled.)
    # - `max_num_partial_prefills` and `max_long_partial_prefills` do not exist in 0.29.0 (not in
    #   vllm/config/scheduler.py, vllm/engine/arg_utils.py or vllm/v1/core/sched/): the only
    #   partial-prefill limit is long_prefill_token_threshold (vllm/config/scheduler.py:70,
    #   default 0: off), here `long_prefill` (SimConfig.long_prefill_token_threshold).
    # With the threshold 0 a prompt is admitted only with the budget the running requests leave,
    # so a step holds at most one partial prefill, the newest running request: every decode comes
    # before it and gets its token, as here. With a threshold several prompts prefill at once and
    # vLLM serves them and the decodes in admission order, so a decode behind a partial prefill
    # can miss a step's budget, which this does not model (the decodes always come first).
    def _prefill_chunks(self, budget: int, free: int, admit: bool = True) -> tuple[list, int]:
        """This step's prefill chunks within the token budget and the free cache: the partial
        prefills first, then (with `admit`) waiting requests admitted while a sequence slot is left.
        (vLLM's own order: the comment above)."""
        chunks: list = []
        append = chunks.append
        c_total = 0
        cap = self.long_prefill
        for r in self.prefilling:
            if budget <= 0 or free <= 0:
                break
            c = r.pf_left
            if 0 < cap < c:
                c = cap
            if c > budget:
                c = budget
            if c > free:
                c = free
            append((r, c))
            budget -= c
            free -= c
            c_total += c
        if not admit:
            return chunks, c_total
        waiting, running, max_seqs = self.waiting, self.running, self.max_seqs
        while waiting and budget > 0 and len(running) < max_seqs:
            r = waiting[0]
            pf = r.pf_total
            if pf > free:                   # its whole sequence must fit (scheduler_reserve_full_isl)
                break
            remote = r.pf_remote            # KV already here (disaggregated): resident, not computed
            todo = pf - remote
            c = cap if 0 < cap < todo else todo
            if c > budget:
                c = budget
            waiting.popleft()
            r.pf_left = todo
            if remote:
                self.kv_pf += remote
                free -= remote
            running[r.id] = r
            self.prefilling.append(r)
            if r.t_sched is None:
                r.t_sched = self.clock
            append((r, c))
            budget -= c
            free -= c
            c_total += c
        return chunks, c_total

    def _apply(self, steps: int) -> None:
        """Apply `steps` steps of the pending work (all of a prefill step's one step)."""
        dur = self.s_dur
        self.busy_s += steps * dur
        self.batch_s += self.s_n * steps * dur
        end = self.s_start + steps * dur
        self.k = k = self.k + steps
        if self.s_chunks is not None:
            self._apply_chunks(self.s_chunks, k, end)
        heap = self.heap
        if heap and heap[0][0] <= k:
            self._finish_decodes(k, end)

    def _apply_chunks(self, chunks: list, k: int, end: float) -> None:
        """A prefill step's chunks, computed by step k (ending at `end`)."""
        for r, c in chunks:
            r.pf_left = left = r.pf_left - c
            self.pend -= c
            if left:
                self.kv_pf += c
                continue
            # prefill done: the step samples a token
            self.kv_pf -= r.pf_total - c
            self.prefilling.remove(r)
            r.gen = gen = r.gen + 1
            out = r.out
            self.pend -= out - gen + 1
            if r.t_first is None:
                r.t_first = end
            if gen >= out:
                del self.running[r.id]
                r.t_done = end
                self.served += 1
                self._on_done(r)
                continue
            r.decoding = True
            r.k0 = k
            spec = self._spec
            if spec is None:
                r.finish = fin = k + out - gen
            else:
                steps, r.spec_accepted = spec.steps_for(out - gen)
                r.finish = fin = k + steps
            self.kv_dec += r.pf_total - k * self.kv_step
            self.fin_sum += fin
            self.n += 1
            self._seq = seq = self._seq + 1
            heappush(self.heap, (fin, seq, r.epoch, r))
        self.prefill_s += self.s_prefill

    def _finish_decodes(self, k: int, end: float) -> None:
        """The decoding sequences whose last token is step k's (or earlier)."""
        heap, running = self.heap, self.running
        while heap and heap[0][0] <= k:
            _, _, epoch, r = heappop(heap)
            if epoch != r.epoch:
                continue
            r.gen = r.out
            r.decoding = False
            self.kv_dec -= r.pf_total - r.k0 * self.kv_step
            self.fin_sum -= r.finish
            if self._spec is not None:
                steps = r.finish - r.k0
                self.spec_drafts += steps
                self.spec_draft_tokens += steps * self._spec.draft_tokens
                self.spec_accepted += r.spec_accepted
            self.n -= 1
            del running[r.id]
            r.t_done = end
            self.served += 1
            self._on_done(r)

    def _preempt(self) -> None:
        """Evict the newest running request; it is recomputed from the front of the queue."""
        _, r = self.running.popitem()
        self.preemptions += 1
        r.preemptions += 1
        if r.decoding:
            done = self.k - r.k0
            if self._spec is not None and r.finish > r.k0:   # its tokens so far, in proportion
                done = (r.out - r.gen) * done // (r.finish - r.k0)
            r.gen += done
            r.spec_accepted = 0
            self.kv_dec -= r.pf_total - r.k0 * self.kv_step
            self.fin_sum -= r.finish
            self.n -= 1
            r.decoding = False
            r.epoch += 1
        else:
            self.prefilling.remove(r)
            self.kv_pf -= r.pf_total - r.pf_left
            self.pend += r.pf_total - r.pf_left      # its computed tokens are lost
            self.pend -= r.pf_total + r.out - r.gen  # re-added below with the new prefill size
        r.pf_remote = 0                              # its cache is freed: recomputed here
        r.pf_total = r.pf_left = r.prompt + r.gen
        self.pend += r.pf_total + r.out - r.gen
        self.waiting.appendleft(r)

    # -- failure -------------------------------------------------------------------------------------
    def fail(self, t: float) -> list[Request]:
        """The replica is lost at t: its step in progress is wasted; returns what it held."""
        if self.busy:
            self._cut(t)
            self.busy_s += max(0.0, t - self.s_start)
        held = list(self.running.values()) + list(self.waiting)
        for r in held:
            r.restart()
        self.up_s += t - self._up_since
        self.up = False
        self._reset(t)
        return held

    def recover(self, t: float) -> None:
        self._reset(t)
        self.up = True
        self._up_since = t

    def finish_accounting(self, t: float) -> None:
        if self.up:
            self.up_s += t - self._up_since
            self._up_since = t

    # -- checks (tests) --------------------------------------------------------------------------------
    def kv_used(self) -> int:
        return self.kv_pf + self.kv_dec + self.n * self.k * self.kv_step + self.kv_held

    def pending_tokens_slow(self) -> int:
        """pending_tokens recomputed from every request: the incremental sums must agree."""
        total = sum(r.pf_total - r.pf_remote + r.out - r.gen for r in self.waiting)
        for r in self.running.values():
            total += r.finish - self.k if r.decoding else r.pf_left + r.out - r.gen
        return total
