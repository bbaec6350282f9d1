"""inputs.json_prune: a JSON file read in chunks with named values skipped, the rest parsed as before.

Whatever the chunk boundaries cut (a string, an escape, a number, a UTF-8 character), the kept text
parses to the document with the skipped values null; its memory does not grow with what it skips.
And the report reader on a GuideLLM report at a prod sweep's size (tests/big_report.py): the same
verdict as the capture it was made from, in bounded memory (the 300 MB case is `make bench`)."""
from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from inputs import json_prune
from tests.big_report import inflate

ROOT = Path(__file__).resolve().parent.parent


def chunks(data: bytes, size: int):
    return (data[i:i + size] for i in range(0, len(data), size))


def pruned(doc, size: int, skip=lambda path: False) -> str:
    return json_prune.pruned_text(chunks(json.dumps(doc).encode(), size), skip, 10**7, 64)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8"), max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=25)


@settings(max_examples=150, deadline=None)
@given(JSON, st.integers(1, 9), st.booleans())
def test_whatever_the_chunks_cut_the_kept_text_is_the_document(doc, size, ascii_only):
    text = json.dumps(doc, ensure_ascii=ascii_only)
    out = json_prune.pruned_text(chunks(text.encode(), size), lambda path: False, 10**7, 64)
    assert json.loads(out) == json.loads(text)


def _without(doc, path=()):
    """The document with the values at ("b", <index>, "r") (strings and containers) null."""
    if isinstance(doc, dict):
        return {k: None if (len(path) == 2 and path[0] == "b" and k == "r" and isinstance(v, (str, list, dict)))
                else _without(v, (*path, k)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_without(v, (*path, i)) for i, v in enumerate(doc)]
    return doc


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["r", "s", "t"]), JSON, max_size=3), max_size=3), JSON,
       st.integers(1, 9))
def test_the_named_values_come_back_null_and_nothing_else_changes(benches, other, size):
    doc = {"a": other, "b": benches, "c": other}
    out = pruned(doc, size, skip=lambda path: len(path) == 3 and path[0] == "b" and path[2] == "r")
    assert json.loads(out) == _without(doc)


@pytest.mark.parametrize("data, size", [
    (b'{"a": "caf\xe9"}', 4), (b'{"a": "\xc3\xa9\xff"}', 3), (b'{"a": "\xe2\x82"}', 2), (b"\xff\xfe{}", 1),
    (b'{"r": ["\xe2\x82\xac", "\xc3"], "x": 1}', 5),
])
def test_bytes_that_are_not_utf8_are_named_at_their_offset_in_the_file(data, size):
    with pytest.raises(json_prune.NotUTF8) as exc:
        json_prune.pruned_text(chunks(data, size), lambda path: path == ["r"], 10**6, 64)
    expected = None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        expected = (data[err.start], err.start)
    assert (exc.value.byte, exc.value.offset) == expected


def test_a_deep_value_is_skipped_at_any_depth_and_a_deep_kept_one_refused():
    deep = "[" * 200_000 + "]" * 200_000
    text = '{"r": ' + deep + ', "k": 1}'
    assert json.loads(json_prune.pruned_text(chunks(text.encode(), 4096), lambda p: p == ["r"], 100, 64)) == \
        {"r": None, "k": 1}
    with pytest.raises(json_prune.TooDeep):
        json_prune.pruned_text(chunks(text.encode(), 4096), lambda p: False, 10**7, 64)


def test_a_skipped_string_longer_than_a_chunk_is_never_held_whole():
    data = ('{"r": "' + "x\\\"" * 5_000_000 + '", "k": 1}').encode()     # a 15 MB string with escapes
    tracemalloc.start()
    out = json_prune.pruned_text(chunks(data, 1 << 16), lambda p: p == ["r"], 1000, 64)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert json.loads(out) == {"r": None, "k": 1}
    assert peak < 8 * 2**20, peak          # a few chunks' worth (the regex's own state included), not 15 MB


def test_kept_text_over_the_limit_is_refused():
    with pytest.raises(json_prune.TooLarge):
        json_prune.pruned_text(chunks(b'{"a": "' + b"y" * 5000 + b'"}', 64), lambda p: False, 1000, 64)


# -- the report reader at a prod sweep's size ---------------------------------------------------------
@pytest.fixture(scope="session")
def big_report(tmp_path_factory):
    """The capture with 30 MB of 0.8.1 per-request records (4,600 of them): a tenth of a prod sweep's."""
    from tests.conftest import upstream_path
    path = tmp_path_factory.mktemp("big") / "benchmarks.json"
    inflate(upstream_path("samples/guidellm-report-0.8.0.dev18.json"), path, 30 * 10**6)
    return path


def test_a_report_with_per_request_lists_reads_as_its_statistics(big_report, upstream_file):
    from proving.loadtest_report import read_report
    assert big_report.stat().st_size > 29 * 10**6
    assert read_report(big_report) == read_report(upstream_file("samples/guidellm-report-0.8.0.dev18.json"))


PEAK = ("import resource, sys; from pathlib import Path; from proving.loadtest_report import read_report; "
        "read_report(Path(sys.argv[1])); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


def test_reading_it_costs_no_memory_for_the_lists(big_report, upstream_file):
    """Peak RSS of a fresh process reading the 30 MB report is within 16 MiB of one reading the 96 KB
    capture (json.loads of the whole file needed ~10x the file: 300 MB here, 3 GB at a prod size)."""
    def peak_kib(path: Path) -> int:
        out = subprocess.run([sys.executable, "-c", PEAK, str(path)], cwd=ROOT, capture_output=True, text=True,
                             check=True)
        return int(out.stdout)
    small = peak_kib(upstream_file("samples/guidellm-report-0.8.0.dev18.json"))
    assert peak_kib(big_report) - small < 16 * 1024
