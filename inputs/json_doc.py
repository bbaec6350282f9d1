"""JSON from a file we do not control (a model's config.json, a GuideLLM report): `loads`.

Python's `json` calls `int()` on every integer literal, and `int()` of more than 4,300 digits
raises a bare ValueError (CPython's integer string conversion limit, 3.11): a 5,000-digit number
in a report was a traceback. Here an integer over MAX_INT_DIGITS digits reads as an infinity, as
`json` already reads `1e999`; the readers' validation then names the field ("not a finite number")
instead of the parser failing on the whole file.
"""
from __future__ import annotations

import json

MAX_INT_DIGITS = 30      # far above any count a config or a report holds (10^30)


def _bounded_int(text: str):
    if len(text) - text.startswith("-") <= MAX_INT_DIGITS:
        return int(text)
    return float("-inf") if text.startswith("-") else float("inf")


def loads(text: str):
    """`json.loads`, with integers over MAX_INT_DIGITS digits read as an infinity (JSONDecodeError as usual)."""
    return json.loads(text, parse_int=_bounded_int)
