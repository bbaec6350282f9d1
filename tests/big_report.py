"""A GuideLLM report at a prod sweep's real size, for the reader's memory test and `make bench`.

The captured 0.8.0.dev18 report (.upstream/samples) was saved with its per-request lists empty; a real
0.8.1 report keeps every request's record in each benchmark's `requests` (guidellm 0.8.1
benchmark/schemas/benchmark.py L62-71, all of them while metrics.sample_size is unset,
schemas/benchmark/entrypoints.py L132-141): that is what makes a sweep's report 200-330 MB. Here the
capture's benchmarks get copies of one such record (tests/fixtures/guidellm/request-stats-0.8.1.json,
made by GuideLLM 0.8.1's own model, 6,493 bytes) in their `successful` lists until the file has the
size asked for. The statistics stay the capture's, so the verdict on it is the capture's.

Written in pieces: making it never holds more than one record's text.
"""
from __future__ import annotations

import json
from pathlib import Path

RECORD = Path(__file__).resolve().parent / "fixtures" / "guidellm" / "request-stats-0.8.1.json"
_HOLE = '"@@requests@@"'


def inflate(sample: Path, out: Path, target_bytes: int) -> int:
    """Write `sample` with per-request lists to `out`, about `target_bytes` long; returns the record count."""
    data = json.loads(sample.read_text())
    for bench in data["benchmarks"]:
        bench["requests"] = "@@requests@@"
    head, *rest = json.dumps(data).split(_HOLE)        # one line, as GuideLLM writes it (report.py L111)
    record = json.dumps(json.loads(RECORD.read_text()))
    per_bench = max(1, (target_bytes - len(head) - sum(map(len, rest))) // ((len(record) + 2) * len(rest)))
    with out.open("w") as fh:
        fh.write(head)
        for i, tail in enumerate(rest):
            fh.write('{"successful": [')
            for k in range(per_bench):
                fh.write(record if k == 0 else ", " + record)
            fh.write('], "errored": [], "incomplete": [], "total": null}')
            fh.write(tail)
    return per_bench * len(rest)
