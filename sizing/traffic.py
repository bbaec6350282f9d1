"""Request lengths as a distribution: fixed, percentiles (p50, p95, max), or observed pairs.

One `LengthDistribution` serves the analytic model (means, the time-weighted context a decode
reads, the prompt quantiles the TTFT tail needs, the longest request), the simulator and the
twin (which draw from it) and the GuideLLM load test (its synthetic-data options). Pure: no I/O;
reading a file is the caller's (settings, CLI), which hands the text to `parse_lengths_text`.

Forms:
- fixed: every request is input_tokens in, output_tokens out (the seed's form, unchanged);
- percentiles: p50, p95 and max per field. The body is a lognormal through p50 and p95
  (sigma = ln(p95 / p50) / z95), clipped at max; kept as QUANTILE_POINTS evenly spaced quantiles,
  input and output drawn independently;
- observed: (input, output) pairs as logged (CSV or JSONL with input_tokens and output_tokens,
  the shape vLLM's and GuideLLM's benchmark outputs and gateway access logs reduce to), drawn as
  pairs so their correlation is kept.

The served limit (`max_model_len`): a stated maximum, else the longest request the form allows
(fixed: in + out; percentiles: max in + max out; observed: the longest pair rounded up to
ROUND_TOKENS). Never a mean.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from functools import cached_property

from inputs.untrusted import described

FORMS = ("fixed", "percentiles", "observed")
QUANTILE_POINTS = 256          # quantiles kept for a percentile form: smooth enough for p99
Z95 = 1.6448536269514722
ROUND_TOKENS = 1024            # an observed longest request is rounded up to this
MAX_ROWS = 1_000_000
MAX_TOKENS = 10_000_000        # a length above this is a unit error, not a request
LENGTH_FIELDS = ("input_tokens", "output_tokens")


class LengthsError(ValueError):
    """A length input that cannot be used; `field` names what to fix (a key, a column, a row)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


def _sub(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


@dataclass(frozen=True)
class Percentiles:
    p50: int
    p95: int
    max: int

    def check(self, field: str) -> "Percentiles":
        for name in ("p50", "p95", "max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise LengthsError(_sub(field, name), f"must be a whole number of tokens above 0 (got {value!r})")
        if self.p95 < self.p50:
            raise LengthsError(_sub(field, "p95"), f"{self.p95} is below p50 {self.p50}; a p95 is at least the median")
        if self.max < self.p95:
            raise LengthsError(_sub(field, "max"), f"{self.max} is below p95 {self.p95}; the longest is at least the p95")
        return self

    def points(self) -> tuple[int, ...]:
        """QUANTILE_POINTS quantiles of the lognormal through p50 and p95, clipped at max."""
        from statistics import NormalDist
        sigma = math.log(self.p95 / self.p50) / Z95
        nd = NormalDist()
        out = []
        for i in range(QUANTILE_POINTS):
            z = nd.inv_cdf((i + 0.5) / QUANTILE_POINTS)
            out.append(min(self.max, max(1, round(self.p50 * math.exp(sigma * z)))))
        return tuple(out)


@dataclass(frozen=True)
class LengthDistribution:
    """Prompt and output lengths. `inputs`/`outputs` are equally likely values (paired: row i
    is one request; else each field drawn on its own)."""
    form: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    paired: bool
    max_request_tokens: int           # the longest request the traffic holds (prompt + output)
    source: str = ""                  # the file it came from, for the plan's words

    # -- the figures the sizing reads (computed once: the model reads them in its inner loops) ----
    @cached_property
    def mean_input(self) -> float:
        return sum(self.inputs) / len(self.inputs)

    @cached_property
    def mean_output(self) -> float:
        return sum(self.outputs) / len(self.outputs)

    @cached_property
    def prompt_attention_tokens(self) -> float:
        """E[s_in^2] / E[s_in]: the prompt length a prompt token's causal attention sees on average
        (a long prompt has more tokens, each attending further)."""
        return sum(x * x for x in self.inputs) / sum(self.inputs)

    @cached_property
    def decode_context_tokens(self) -> float:
        """The context a decoding sequence holds, averaged over decode steps: a request decodes
        s_out steps over s_in + s_out / 2 on average, so E[s_out (s_in + s_out / 2)] / E[s_out]."""
        if self.paired:
            num = sum(o * (i + o / 2) for i, o in zip(self.inputs, self.outputs))
            return num / sum(self.outputs)
        mo = self.mean_output
        return self.mean_input + sum(o * o for o in self.outputs) / (2 * len(self.outputs) * mo)

    def spread(self, field: str) -> tuple[float, float, int, int]:
        """(mean, standard deviation, min, max) of `input` or `output` lengths."""
        values, mean = (self.inputs, self.mean_input) if field == "input" else (self.outputs, self.mean_output)
        var = sum((v - mean) ** 2 for v in values) / len(values)
        return mean, math.sqrt(var), min(values), max(values)

    @cached_property
    def _sorted(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(sorted(self.inputs)), tuple(sorted(self.outputs))

    def input_quantile(self, q: float) -> int:
        return _quantile_sorted(self._sorted[0], q)

    def output_quantile(self, q: float) -> int:
        return _quantile_sorted(self._sorted[1], q)

    def summary(self) -> dict:
        """What the plan shows: the form and the percentiles it sized for."""
        def stats(mean, quantile, values):
            return {"mean": round(mean, 1), "p50": quantile(0.5), "p95": quantile(0.95), "max": max(values)}
        out = {"form": self.form, "input_tokens": stats(self.mean_input, self.input_quantile, self.inputs),
               "output_tokens": stats(self.mean_output, self.output_quantile, self.outputs),
               "longest_request_tokens": self.max_request_tokens}
        if self.source:
            out["source"] = self.source
            out["requests"] = len(self.inputs)
        return out


def _quantile_sorted(s, q: float) -> int:
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def fixed(input_tokens: int, output_tokens: int) -> LengthDistribution:
    return LengthDistribution("fixed", (input_tokens,), (output_tokens,), True, input_tokens + output_tokens)


def from_percentiles(inputs: Percentiles, outputs: Percentiles) -> LengthDistribution:
    inputs.check("inputTokens")
    outputs.check("outputTokens")
    return LengthDistribution("percentiles", inputs.points(), outputs.points(), False, inputs.max + outputs.max)


def from_pairs(pairs: list[tuple[int, int]], source: str = "") -> LengthDistribution:
    if not pairs:
        raise LengthsError(source or "lengths", "no requests in it; give one row per request with "
                                                "input_tokens and output_tokens")
    inputs = tuple(p[0] for p in pairs)
    outputs = tuple(p[1] for p in pairs)
    longest = max(i + o for i, o in pairs)
    return LengthDistribution("observed", inputs, outputs, True, -(-longest // ROUND_TOKENS) * ROUND_TOKENS, source)


# -- reading observed lengths ------------------------------------------------------------------
def parse_lengths_text(text: str, source: str) -> LengthDistribution:
    """CSV (a header naming input_tokens and output_tokens) or JSONL (one object per line).
    Errors name the file, the row (1-based, the header is row 1 of a CSV) and the field."""
    stripped = text.lstrip()
    if not stripped:
        raise LengthsError(source, "is empty; give one row per request with input_tokens and output_tokens")
    pairs = _jsonl_pairs(text, source) if stripped.startswith("{") else _csv_pairs(text, source)
    return from_pairs(pairs, source)


MAX_DIGITS = 12         # a length's digits read at most: more is above MAX_TOKENS (and int() of 5,000 digits raises)


def _length(value, where: str, field: str) -> int:
    """A token count from a CSV field or a JSON value. The message names the row and the field and
    says what kind of value it found, never the value (inputs.untrusted.described): a file named
    by mistake may hold a secret."""
    if isinstance(value, str):
        text = value.strip()
        digits = text.removeprefix("-")
        if digits.isascii() and digits.isdigit():     # ASCII only: int() would also take '١٢٣'
            value = int(text) if len(digits) <= MAX_DIGITS else MAX_TOKENS + 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise LengthsError(f"{where}: {field}", f"expected a whole number of tokens (got {described(value)})")
    if value <= 0:
        raise LengthsError(f"{where}: {field}", f"must be above 0 (got {'0' if value == 0 else 'a negative number'})")
    if value > MAX_TOKENS:
        raise LengthsError(f"{where}: {field}", f"is above {MAX_TOKENS:,} tokens; check the unit")
    return value


def _csv_header(row: list[str], source: str) -> tuple[int, int]:
    """The columns of input_tokens and output_tokens; every column named once."""
    header = [h.strip() for h in row]
    seen: dict[str, int] = {}
    for n, name in enumerate(header, start=1):
        if name and name in seen:
            what = name if name in LENGTH_FIELDS else "the same name"
            raise LengthsError(f"{source}: row 1", f"columns {seen[name]} and {n} are both {what}; "
                                                   "name each column once")
        seen.setdefault(name, n)
    missing = [f for f in LENGTH_FIELDS if f not in seen]
    if missing:
        raise LengthsError(f"{source}: row 1", f"the header ({len(header)} column{'s' if len(header) != 1 else ''}) has no {' or '.join(missing)} "
                                               "column; row 1 names the columns, e.g. input_tokens,output_tokens")
    return seen["input_tokens"] - 1, seen["output_tokens"] - 1


def _csv_pairs(text: str, source: str) -> list[tuple[int, int]]:
    # newline=None: CR-only (classic Mac) and CRLF line ends read as rows, as Python's own files do.
    reader = csv.reader(io.StringIO(text, newline=None))
    try:
        ci, co = _csv_header(next(reader), source)
        width = max(ci, co)
        pairs = []
        for row in reader:
            if not row:
                continue
            where = f"{source}: row {reader.line_num}"
            if len(row) <= width:
                raise LengthsError(where, f"{len(row)} field{'s' if len(row) > 1 else ''}; the header names "
                                         f"column {width + 1}")
            pairs.append((_length(row[ci], where, "input_tokens"), _length(row[co], where, "output_tokens")))
            if len(pairs) > MAX_ROWS:
                raise LengthsError(source, f"more than {MAX_ROWS:,} rows; sample it")
    except csv.Error:          # a field over csv's 131,072 characters, a NUL, a stray quote
        raise LengthsError(f"{source}: row {reader.line_num}", "not CSV (a field over 131,072 characters, "
                                                               "a NUL byte or an unclosed quote)") from None
    return pairs


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    for k in LENGTH_FIELDS:
        if keys.count(k) > 1:
            raise LengthsError(k, "given twice in one object; give each field once")
    return dict(pairs)


def _bounded_int(text: str):
    """JSON integers of more than MAX_DIGITS digits are over MAX_TOKENS (json would call int() on 5,000)."""
    return int(text) if len(text.removeprefix("-")) <= MAX_DIGITS else MAX_TOKENS + 1


def _jsonl_pairs(text: str, source: str) -> list[tuple[int, int]]:
    pairs = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}: line {n}"
        try:
            obj = json.loads(line, parse_int=_bounded_int, object_pairs_hook=_unique_keys)
        except LengthsError as exc:
            raise LengthsError(f"{where}: {exc.field}", "given twice in one object; give each field once") from None
        except (ValueError, RecursionError):
            raise LengthsError(where, "not a JSON object; one object per line, e.g. "
                                      '{"input_tokens": 812, "output_tokens": 240}') from None
        if not isinstance(obj, dict):
            raise LengthsError(where, "not a JSON object; one object per line")
        for field in LENGTH_FIELDS:
            if field not in obj:
                raise LengthsError(f"{where}: {field}", "missing")
        pairs.append((_length(obj["input_tokens"], where, "input_tokens"),
                      _length(obj["output_tokens"], where, "output_tokens")))
        if len(pairs) > MAX_ROWS:
            raise LengthsError(source, f"more than {MAX_ROWS:,} rows; sample it")
    return pairs
