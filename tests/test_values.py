"""The one walk over recorded values (offline/values.py): each reader's rule, as a table."""
from __future__ import annotations

import pytest

from offline.values import (
    SECRET_SIG, SIG_KEY, is_secret, manifest_value, redacted, scrubbed, unwrap, walk, wrap_secret,
)

INPUT_SECRET = {SIG_KEY: SECRET_SIG, "value": "hf_token"}            # as deserialized resource inputs hold one
OUTPUT_SECRET = wrap_secret({"team-a": "key-a", "team-b": "key-b"})   # as the engine records a secret output


@pytest.mark.parametrize("value, secret", [
    (INPUT_SECRET, True), (OUTPUT_SECRET, True), ({"value": "x"}, False), ("hf_token", False), (None, False),
])
def test_what_counts_as_a_secret(value, secret):
    assert is_secret(value) is secret


@pytest.mark.parametrize("reader, value, expected", [
    (redacted, {"env": [{"name": "HF_TOKEN", "value": INPUT_SECRET}], "n": 2.0},
     {"env": [{"name": "HF_TOKEN", "value": "[secret]"}], "n": 2.0}),
    (unwrap, {"env": [INPUT_SECRET], "keys": OUTPUT_SECRET},
     {"env": ["hf_token"], "keys": {"team-a": "key-a", "team-b": "key-b"}}),
    (unwrap, (1, [INPUT_SECRET]), [1, ["hf_token"]]),                             # tuples walk as lists
    (manifest_value, {"b": 1.0, "a": [3.0, 0.5], "s": OUTPUT_SECRET},
     {"a": [3, 0.5], "b": 1, "s": {"team-a": "[secret]", "team-b": "[secret]"}}),  # keys sorted, keys kept
    (manifest_value, {"token": INPUT_SECRET}, {"token": "[secret]"}),
])
def test_each_reader(reader, value, expected):
    result = reader(value)
    assert result == expected
    if reader is manifest_value:
        assert list(result) == sorted(result)


def test_scrubbed_hides_strings_carrying_a_leaked_placeholder():
    value = {"data": {"token": "offline-preview-secret-hubToken", "other": "fine"}, "list": ["x-offline-preview-secret"]}
    assert scrubbed(value, "offline-preview-secret") == {
        "data": {"token": "[secret]", "other": "fine"}, "list": ["[secret]"]}


def test_walk_folds_containers_bottom_up():
    text = walk({"a": [1, INPUT_SECRET]}, secret=lambda _: "?", leaf=str,
                mapping=lambda d: "{" + ",".join(f"{k}:{v}" for k, v in d.items()) + "}",
                sequence=lambda items: "[" + ",".join(items) + "]")
    assert text == "{a:[1,?]}"


def test_a_redacted_copy_leaves_the_recording_alone():
    value = {"token": INPUT_SECRET}
    redacted(value)
    assert value == {"token": INPUT_SECRET}
