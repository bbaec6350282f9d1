"""The recording engine registers on the event loop's own thread (offline/engine.py): each piece
that replaces a worker-thread hop keeps upstream's results (pulumi 3.272.0, pinned)."""
from __future__ import annotations

import asyncio
import threading

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.rpc import UNKNOWN

from offline.engine import InlineExecutor, inline_executor, settled, without_unknowns

SECRET = {rpc._special_sig_key: rpc._special_secret_sig, "value": UNKNOWN}


def _struct(value: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


@pytest.mark.parametrize("request_object", [
    {"name": "vpc", "cidr": "10.0.0.0/16", "n": 2.0, "tags": {"a": "b"}},
    {"id": UNKNOWN, "keep": "x"},                                          # a top-level unknown: the key goes
    {"spec": {"replicas": UNKNOWN, "image": "vllm"}},                      # a nested one
    {"routes": [UNKNOWN, {"cidr": UNKNOWN, "gw": "igw"}, ["a", UNKNOWN]]},  # in lists: None, keys still go
    {"token": SECRET, "list": [SECRET]},                                   # a secret holding an unknown
    {},
])
def test_the_mocks_get_the_inputs_upstream_gives_them(request_object):
    struct = _struct(request_object)
    kept = rpc.deserialize_properties(struct, keep_unknowns=True)
    assert without_unknowns(kept) == rpc.deserialize_properties(struct)


def test_the_mocks_get_a_copy_of_the_recorded_inputs():
    kept = rpc.deserialize_properties(_struct({"spec": {"ports": [{"port": 80.0}]}}), keep_unknowns=True)
    copy = without_unknowns(kept)
    copy["spec"]["ports"][0]["port"] = 443.0
    assert kept == {"spec": {"ports": [{"port": 80.0}]}}


def test_serializing_plain_data_settles_without_an_event_loop():
    state = {"name": "vpc", "tags": {"team": "ml"}, "ports": [80.0, 443.0]}
    assert settled(rpc.serialize_properties(state, {})) == asyncio.run(rpc.serialize_properties(state, {}))


def test_a_coroutine_that_suspends_is_refused_not_dropped():
    async def waits():
        await asyncio.sleep(0)
        return "late"

    with pytest.raises(RuntimeError, match="awaited an unresolved value"):
        settled(waits())


def test_the_inline_executor_runs_each_call_at_once_on_the_callers_thread():
    executor = InlineExecutor()
    assert executor.submit(threading.get_ident).result() == threading.get_ident()
    failed = executor.submit(int, "not a number")
    assert failed.done() and isinstance(failed.exception(), ValueError)


def test_the_loops_own_executor_comes_back_after_a_build():
    loop = asyncio.new_event_loop()
    try:
        with inline_executor(loop):
            assert isinstance(loop._default_executor, InlineExecutor)
            assert loop.run_until_complete(loop.run_in_executor(None, threading.get_ident)) == threading.get_ident()
        assert loop._default_executor is None
    finally:
        loop.close()
