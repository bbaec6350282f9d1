"""`llmserve emulate`: an OpenAI-compatible server on 127.0.0.1 answering in real time from the
plan's step model. The API as vLLM answers it (streamed and whole completions and chats, the model
list, health, errors), vLLM's /metrics, the bounds a hostile client meets, a clean stop on
SIGINT/SIGTERM, the zone loss of `simulate`, and the acceptance check: a Poisson streaming client
at the plan's rate sees the mean TTFT and TPOT of `simulate` within 25%."""
from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from emulator.openai import TOKEN_TEXT
from emulator.server import from_plan
from llmserve.cli import main
from tests.emulated import serving
from tests.stacks import plan_for

LLMSERVE = str(Path(sys.executable).parent / "llmserve")
DEV_MAX_MODEL_LEN = 1300


@pytest.fixture(scope="module")
def dev():
    with serving("dev") as served:
        yield served


def call(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    conn.request(method, path, body=data, headers=headers or {})
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def events(body: bytes) -> list:
    """A stream's events: the JSON objects, then "[DONE]"."""
    out = []
    for event in body.decode().split("\n\n"):
        if event:
            assert event.startswith("data: "), event
            payload = event[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


# -- where it listens --------------------------------------------------------------------------------
def test_it_listens_on_loopback_only(dev):
    port, emulator = dev
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        assert s.getpeername() == ("127.0.0.1", port)
    assert emulator_listening(port) == ["0100007F"]            # 127.0.0.1 (little-endian hex), no IPv6


def emulator_listening(port: int) -> list[str]:
    """The addresses listening on `port`, as the kernel lists its sockets (/proc/net/tcp, tcp6)."""
    found = []
    for proto in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{proto}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if int(hex_port, 16) == port and state == "0A":       # 0A: LISTEN
                found.append(address)
    return found


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "localhost", "192.168.1.10", "127.0.0.2"])
def test_any_other_bind_address_is_refused(capsys, host):
    assert main(["emulate", "--stack", "dev", "--host", host]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --host: emulate serves on 127.0.0.1 only (got {host!r}): its API has no authentication"]


@pytest.mark.parametrize("args, message", [
    (["--port", "65536"], "--port: a port number from 0 to 65535 (got 65536)"),
    (["--port", "-1"], "--port: a port number from 0 to 65535 (got -1)"),
    (["--router", "random"], "--router: unknown value 'random'; choose one of: round-robin, least-outstanding, "
                             "least-pending-tokens"),
    (["--slowdown", "0"], "--slowdown: must be a finite number greater than 0 (got 0)"),
    (["--slowdown", "11"], "--slowdown: 11 is above the limit of 10 (steps that many times the plan's)"),
    (["--max-connections", "0"], "--max-connections: from 1 to 4096 (got 0)"),
    (["--fail-zone", "us-east-1z@5"], "--fail-zone: zone us-east-1z holds no replica of this plan (zones: us-east-1a)"),
    (["--fail-zone", "us-east-1a@5:4"], "--fail-zone: 'us-east-1a@5:4': the zone comes back at 4 s, not after it "
                                        "fails at 5 s"),
    (["--fail-node", "us-east-1a-g6e/node-9@5"], "--fail-node: 'us-east-1a-g6e/node-9@5': no node "
                                                 "us-east-1a-g6e/node-9 in the plan (nodes: us-east-1a-g6e/node-0)"),
    (["--fail-zone", "us-east-1a@5", "--fail-node", "us-east-1a-g6e/node-0@5"],
     "--fail-node: give --fail-zone or --fail-node, not both (one failure a run)"),
])
def test_bad_options_are_one_line(capsys, args, message):
    assert main(["emulate", "--stack", "dev", *args]) == 2
    captured = capsys.readouterr()
    assert (captured.err.splitlines(), captured.out) == ([f"error: {message}"], "")


def test_a_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["emulate", "--stack", "dev", "--port", str(port)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --port: cannot listen on 127.0.0.1:{port}: Address already in use"]


# -- what it serves ------------------------------------------------------------------------------------
def test_health_is_an_empty_200(dev):
    status, headers, body = call(dev[0], "GET", "/health")
    assert (status, headers["content-length"], body) == (200, "0", b"")


def test_models_lists_the_served_name_and_context(dev):
    status, _, body = call(dev[0], "GET", "/v1/models")
    card = json.loads(body)["data"]
    settings, plan = plan_for("dev")
    assert status == 200 and len(card) == 1
    assert (card[0]["id"], card[0]["object"], card[0]["max_model_len"]) == (plan.request.model, "model",
                                                                           DEV_MAX_MODEL_LEN)


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "Say something.", "max_tokens": 7}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 7}),
])
def test_a_whole_answer_has_max_tokens_tokens_and_usage(dev, path, body):
    status, headers, raw = call(dev[0], "POST", path, body)
    answer = json.loads(raw)
    choice = answer["choices"][0]
    text = choice["message"]["content"] if "messages" in body else choice["text"]
    assert (status, headers["content-type"], choice["finish_reason"]) == (200, "application/json", "length")
    assert text == TOKEN_TEXT * 7
    prompt = 4 + 4 if "messages" in body else 4          # 14 characters / 4, rounded up; a chat adds 4 a message
    assert answer["usage"] == {"prompt_tokens": prompt, "total_tokens": prompt + 7, "completion_tokens": 7,
                               "prompt_tokens_details": None}
    assert answer["object"] == ("chat.completion" if "messages" in body else "text_completion")


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_a_stream_sends_max_tokens_tokens_then_usage_then_done(dev, chat):
    body = ({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": [1, 2, 3]}) | {
        "max_tokens": 9, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    status, headers, raw = call(dev[0], "POST", "/v1/chat/completions" if chat else "/v1/completions", body)
    got = events(raw)
    assert (status, headers["content-type"], headers["transfer-encoding"]) == (
        200, "text/event-stream; charset=utf-8", "chunked")
    assert got[-1] == "[DONE]"
    usage, chunks = got[-2], got[:-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 9
    if chat:
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        chunks = chunks[1:]
    texts = [c["choices"][0]["delta"]["content"] if chat else c["choices"][0]["text"] for c in chunks]
    assert "".join(texts) == TOKEN_TEXT * 9
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    assert {c["object"] for c in got[:-1]} == {"chat.completion.chunk" if chat else "text_completion"}
    assert len({c["id"] for c in got[:-1]}) == 1


def test_a_stream_without_include_usage_ends_with_its_last_token(dev):
    _, _, raw = call(dev[0], "POST", "/v1/completions", {"prompt": "x", "max_tokens": 3, "stream": True})
    got = events(raw)
    assert got[-1] == "[DONE]" and got[-2]["choices"][0]["finish_reason"] == "length" and "usage" not in got[-2]


# -- what it refuses ----------------------------------------------------------------------------------
BAD_BODIES = [
    (b"not json", "the body is not valid JSON: Expecting value: line 1 column 1 (char 0)", None),
    (b"\xff\xfe", "the body is not valid JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
     None),
    (b"[" * 20_000 + b"]" * 20_000, "the body is not valid JSON: nested too deeply", None),
    (b'{"prompt": "x", "max_tokens": NaN}', "the body is not valid JSON: NaN is not JSON", None),
    (b'{"prompt": "x", "max_tokens": 1' + b"0" * 5000 + b"}", None, None),     # past int's digit limit
    (b"[1, 2]", "the body must be a JSON object, not list", None),
    (b'{"prompt": ""}', "prompt: a non-empty string or a non-empty list of non-negative token ids is required",
     "prompt"),
    (b'{"prompt": [1, -2]}', "prompt: a non-empty string or a non-empty list of non-negative token ids is required",
     "prompt"),
    (b'{"prompt": ["a", "b"]}', "the emulator serves one prompt a request: send a string or one token-id list",
     "prompt"),
    (b'{"prompt": "x", "max_tokens": "5"}', 'max_tokens: must be an integer (got "5")', "max_tokens"),
    (b'{"prompt": "x", "max_tokens": true}', "max_tokens: must be an integer (got true)", "max_tokens"),
    (b'{"prompt": "x", "max_tokens": 0}', "max_tokens must be at least 1, got 0.", "max_tokens"),
    (b'{"prompt": "x", "stream": "yes"}', 'stream: must be true or false (got "yes")', "stream"),
    (b'{"prompt": "x", "stream_options": {"include_usage": true}}',
     "Stream options can only be defined when `stream=True`.", "stream_options"),
    (b'{"prompt": "x", "n": 2}', "n: the emulator serves one choice a request (n = 1)", "n"),
]


@pytest.mark.parametrize("body, message, param", BAD_BODIES, ids=lambda v: repr(v)[:40] if isinstance(v, bytes) else "")
def test_a_bad_body_is_a_400_error_object(dev, body, message, param):
    status, headers, raw = call(dev[0], "POST", "/v1/completions", body)
    error = json.loads(raw)["error"]
    assert (status, headers["content-type"], error["type"], error["code"], error["param"]) == (
        400, "application/json", "BadRequestError", 400, param)
    if message is not None:
        assert error["message"] == message


@pytest.mark.parametrize("path, body, message", [
    ("/v1/chat/completions", {"messages": []}, "messages: a non-empty list of messages is required"),
    ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "messages[0]: an object with a string 'role' is required"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content: the emulator serves text parts only ({'type': 'text', 'text': ...})"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]},
     "messages[0].content: a string, a list of text parts or null"),
])
def test_a_bad_chat_is_a_400_error_object(dev, path, body, message):
    status, _, raw = call(dev[0], "POST", path, body)
    assert (status, json.loads(raw)["error"]["message"]) == (400, message)


@pytest.mark.parametrize("body, message", [
    ({"prompt": [7] * DEV_MAX_MODEL_LEN},
     f"This model's maximum context length is {DEV_MAX_MODEL_LEN} tokens. However, your request has "
     f"{DEV_MAX_MODEL_LEN} input tokens. Please reduce the length of the input messages."),
    ({"prompt": "abcd" * 2000},
     f"This model's maximum context length is {DEV_MAX_MODEL_LEN} tokens. However, your request has 2000 input "
     "tokens. Please reduce the length of the input messages."),
    ({"prompt": [7] * 1000, "max_tokens": 301},
     f"'max_tokens' or 'max_completion_tokens' is too large: 301. This model's maximum context length is "
     f"{DEV_MAX_MODEL_LEN} tokens and your request has 1000 input tokens (301 > {DEV_MAX_MODEL_LEN} - 1000)."),
])
def test_a_request_over_max_model_len_is_a_400_as_vllms(dev, body, message):
    status, _, raw = call(dev[0], "POST", "/v1/completions", body)
    assert (status, json.loads(raw)["error"]["message"]) == (400, message)


def test_a_request_at_max_model_len_is_served(dev):
    status, _, raw = call(dev[0], "POST", "/v1/completions", {"prompt": [7] * 1296, "max_tokens": 4})
    assert (status, json.loads(raw)["usage"]["total_tokens"]) == (200, DEV_MAX_MODEL_LEN)


@pytest.mark.parametrize("method, path, body, status, answer", [
    ("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404,
     {"error": {"message": "The model `gpt-4` does not exist.", "type": "NotFoundError", "param": "model",
                "code": 404}}),
    ("GET", "/v1/embeddings", None, 404, {"detail": "Not Found"}),
    ("GET", "/v1/completions", None, 405, {"detail": "Method Not Allowed"}),
    ("POST", "/health", None, 405, {"detail": "Method Not Allowed"}),
])
def test_other_paths_and_models_are_answered_as_vllm_does(dev, method, path, body, status, answer):
    got, _, raw = call(dev[0], method, path, body)
    assert (got, json.loads(raw)) == (status, answer)


def raw_exchange(port: int, data: bytes) -> tuple[int, dict]:
    """Send raw bytes; the status and JSON body of the answer (the server closes after an error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(data)
        received = b""
        while chunk := s.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize("data, status, message", [
    (b"GARBAGE\r\n\r\n", 400, "malformed request line (expected METHOD /path HTTP/1.1)"),
    (b"GET /health HTTP/2.0\r\n\r\n", 400, "malformed request line (expected METHOD /path HTTP/1.1)"),
    (b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed header line"),
    (b"GET /health HTTP/1.1\r\nx: " + b"a" * 20_000 + b"\r\n\r\n", 431,
     "the request line and headers exceed 16384 bytes"),
    (b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", 411,
     "send the body with Content-Length (chunked request bodies are not accepted)"),
    (b"POST /v1/completions HTTP/1.1\r\ncontent-length: -5\r\n\r\n", 400, "Content-Length must be a number of bytes"),
    (b"POST /v1/completions HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n", 400,
     "content-length given twice"),
    (b"POST /v1/completions HTTP/1.1\r\ncontent-length: 999999999\r\n\r\n", 413,
     "the body is 999999999 bytes; at most 86336 are accepted"),
])
def test_malformed_http_is_a_4xx_error_object(dev, data, status, message):
    assert raw_exchange(dev[0], data) == (status, {"error": {
        "message": message, "type": {400: "BadRequestError", 411: "LengthRequired", 413: "PayloadTooLarge",
                                     431: "RequestHeaderFieldsTooLarge"}[status], "param": None, "code": status}})


def test_a_client_waiting_for_100_continue_is_told_to_send_its_body(dev):
    body = json.dumps({"prompt": [1] * 2000, "max_tokens": 2}).encode()
    with socket.create_connection(("127.0.0.1", dev[0]), timeout=15) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nexpect: 100-continue\r\nconnection: close\r\n"
                  b"content-length: %d\r\n\r\n" % len(body))
        assert s.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"maximum context length is 1300" in answer


def test_connections_beyond_the_cap_get_a_503():
    with serving("dev", max_connections=2) as (port, _):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        time.sleep(0.2)
        try:
            assert raw_exchange(port, b"GET /health HTTP/1.1\r\n\r\n") == (503, {"error": {
                "message": "more than 2 connections open", "type": "ServiceUnavailableError", "param": None,
                "code": 503}})
        finally:
            for s in idle:
                s.close()


# -- /metrics ---------------------------------------------------------------------------------------------
def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    status, headers, body = call(port, "GET", "/metrics")
    assert (status, headers["content-type"]) == (200, "text/plain; version=0.0.4; charset=utf-8")
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def sample_sum(families: dict, family: str, sample: str, **labels) -> float:
    return sum(s.value for s in families[family].samples
               if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_parse_and_carry_every_vllm_series_the_twin_serves():
    from observability import contract
    from twin import vllm_metrics as vm

    with serving("prod") as (port, _):
        families = scrape(port)
    # prometheus_client names a counter's family without its _total
    served = {f.name + ("_total" if f.type == "counter" else "") for f in families.values()}
    assert {f.name for f in vm.FAMILIES} <= served
    assert {s.name for s in contract.SERIES if s.source == "vllm"} <= served      # what the rules and alerts read
    engines = {s.labels["engine"] for s in families["vllm:num_requests_running"].samples}
    assert engines == {"0", "1"}           # prod's two replicas, one engine label each


def test_metrics_count_what_was_served(dev):
    port = dev[0]
    before = scrape(port)
    call(port, "POST", "/v1/completions", {"prompt": [5] * 100, "max_tokens": 11})
    after = scrape(port)
    for family, sample, grew in (("vllm:generation_tokens", "vllm:generation_tokens_total", 11),
                                 ("vllm:prompt_tokens", "vllm:prompt_tokens_total", 100),
                                 ("vllm:request_success", "vllm:request_success_total", 1),
                                 ("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count", 1),
                                 ("vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count", 1)):
        assert sample_sum(after, family, sample) - sample_sum(before, family, sample) == grew, family


@pytest.mark.promtool
def test_promtool_finds_nothing_in_the_fleets_exposition_it_does_not_find_in_vllms(dev, upstream_file, metrics_lints):
    ours = call(dev[0], "GET", "/metrics")[2].decode()
    assert metrics_lints(ours) <= metrics_lints(upstream_file("samples/vllm-metrics-0.29.0-inferstack.txt").read_text())


# -- slowdown and failures --------------------------------------------------------------------------------
def test_a_slowdown_multiplies_the_plans_step_cost():
    settings, plan = plan_for("prod")
    plain, slow = from_plan(plan, settings).fleet, from_plan(plan, settings, slowdown=1.5).fleet
    for n, c in ((1, 0), (40, 0), (20, 500)):
        assert slow.config.cost.step_s(n, c) == pytest.approx(1.5 * plain.config.cost.step_s(n, c))


def stream_in_thread(port: int, body: dict, out: list) -> threading.Thread:
    def run() -> None:
        out.append(call(port, "POST", "/v1/completions", body))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_lost_zone_fails_its_streams_and_the_other_zone_serves_on():
    from simulator import parse_fail_zone

    body = {"prompt": [3] * 50, "max_tokens": 400, "stream": True}
    with serving("prod", failure=parse_fail_zone("us-east-1b@0.8:1.6", 1e9)) as (port, emulator):
        results: list = []
        threads = [stream_in_thread(port, body, results) for _ in range(4)]
        time.sleep(1.0)
        during = scrape(port)
        after_loss = call(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        for t in threads:
            t.join(30)
        time.sleep(0.8)
        back = scrape(port)
    outcomes = sorted(events(raw)[-2].get("error", {}).get("code", 200) for _, _, raw in results)
    assert outcomes == [200, 200, 503, 503]          # two streams on each replica; us-east-1b's fail
    assert after_loss[0] == 200
    assert {s.labels["engine"] for s in during["vllm:num_requests_running"].samples} == {"0"}
    assert {s.labels["engine"] for s in back["vllm:num_requests_running"].samples} == {"0", "1"}
    assert sample_sum(back, "vllm:request_success", "vllm:request_success_total", engine="1") == 0   # a new pod
    assert (emulator.fleet.failed, emulator.fleet.retried) == (2, 0)


# -- a clean stop -------------------------------------------------------------------------------------
def children_of(pid: int) -> list[int]:
    """Every process whose parent is `pid` (/proc/<n>/stat's fourth field)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def start_cli(stack: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([LLMSERVE, "emulate", "--stack", stack, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+) ", line)
    assert found, line + proc.stderr.read()
    return proc, int(found.group(1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_closes_the_listener_fails_what_is_in_flight_and_exits(sig):
    proc, port = start_cli("dev")
    results: list = []
    stream = stream_in_thread(port, {"prompt": [1] * 10, "max_tokens": 1000, "stream": True}, results)
    time.sleep(0.5)
    assert children_of(proc.pid) == []
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=15)
    stream.join(15)
    assert (proc.returncode, err.splitlines()) == (128 + sig, [
        f"emulate: stopped on {sig.name}; 1 request(s) in flight answered 503 (0 retried and 1 failed in all)"])
    got = events(results[0][2])
    assert got[-2:] == [{"error": {"message": "the emulator is shutting down", "type": "ServiceUnavailableError",
                                   "param": None, "code": 503}}, "[DONE]"]
    assert got[0]["choices"][0]["text"] == TOKEN_TEXT            # it was streaming when stopped
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


# -- the acceptance check ------------------------------------------------------------------------------
ACCEPTANCE_S = 12.0      # `make bench` runs 40 s (bench/bench_emulate.py)


def test_a_poisson_client_sees_the_simulated_ttft_and_tpot_within_25_percent():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_emulate", Path(__file__).parent.parent / "bench" /
                                                  "bench_emulate.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.measure("prod", ACCEPTANCE_S)
    assert (result["emulated"]["failed"], result["emulated"]["requests"]) == (0, result["simulated"]["requests"])
    assert result["exit_code"] == 128 + signal.SIGTERM
    for figure, error in bench.errors(result).items():
        assert abs(error) <= bench.TARGET, (figure, result)


@pytest.mark.servers
def test_the_twins_prometheus_scrapes_it(dev, tmp_path):
    """The twin's own Prometheus (twin.servers, scraping every 250 ms) reads the emulator's /metrics."""
    import urllib.parse

    from twin.exporters import Target
    from twin.lifecycle import get_json, until
    from twin.servers import Servers

    port = dev[0]
    call(port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 5})
    target = Target("vllm", port, "/metrics", {"namespace": "llm-serving", "pod": "emulate-0", "zone": "us-east-1a"})
    with Servers(tmp_path, [], [target], scale=60.0) as servers:
        query = urllib.parse.quote('sum(vllm:generation_tokens_total{pod="emulate-0"})')

        def scraped() -> bool:
            result = get_json(f"{servers.prometheus_url}/api/v1/query?query={query}")["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) >= 5
        assert until(scraped, 30)
        up = get_json(f"{servers.prometheus_url}/api/v1/query?query=up")["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"]


@pytest.mark.parametrize("stream, retried, failed", [(False, 1, 0), (True, 0, 1)], ids=["whole", "streamed"])
def test_a_request_on_a_lost_replica_is_retried_once_unless_its_stream_has_begun(stream, retried, failed):
    """As `simulate` retries what a lost replica held, through the router once more from scratch;
    tokens a stream has sent cannot be taken back, so that stream fails."""
    from simulator import parse_fail_zone

    settings, plan = plan_for("prod")
    fleet = from_plan(plan, settings, failure=parse_fail_zone("us-east-1b@0.3", 1e9)).fleet

    async def run() -> list:
        fleet.start(asyncio.get_running_loop())
        jobs = [fleet.submit(100, 60, stream) for _ in range(2)]         # one on each replica
        while not all(j.done or j.error for j in jobs):
            await asyncio.sleep(0.05)
        return jobs
    jobs = asyncio.run(run())
    assert (fleet.retried, fleet.failed) == (retried, failed)
    assert sorted(j.request.attempts for j in jobs) == [1, 1 + retried]
    assert sum(j.done for j in jobs) == 2 - failed
