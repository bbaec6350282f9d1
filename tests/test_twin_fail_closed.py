"""The twin and `check` fail closed (issue 32): a Prometheus or Alertmanager that dies, stops,
stops answering or restarts during a run fails it with one line naming the server and what
happened (exit 1), never "the alerts behaved as the plan expects" or "within its plan".

- `twin.health.Watch` on stand-in processes and status servers: each way a server is lost, named;
- `llmserve twin` with its real Prometheus or Alertmanager killed (SIGKILL) or stopped (SIGSTOP)
  part-way (tests/twin_kills.py sends the signal; the runs play in the background, tests/twin_runs.py);
- `llmserve check` and `calibrate` against a Prometheus that restarts, stops answering or hangs
  up between its queries, or does not say when it started.
"""
from __future__ import annotations

import http.server
import json
import signal
import socket
import subprocess
import threading
import time

import pytest

from tests.inprocess_cli import run_cli
from tests.twin_kills import FIXED, error_line
from tests.twin_runs import killed_name
from twin import health
from twin.lifecycle import LoopbackHTTPServer

STARTED = "2026-01-05T10:00:00.000Z"
RESTARTED = "2026-01-05T10:07:00.000Z"


# -- the watch, on stand-ins ---------------------------------------------------------------------------
class _Status(http.server.BaseHTTPRequestHandler):
    """An Alertmanager's /api/v2/status, as `answer` says."""
    answer: dict = {"uptime": STARTED}

    def do_GET(self):  # noqa: N802
        body = json.dumps(type(self).answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def status_server():
    server = LoopbackHTTPServer(("127.0.0.1", 0), _Status)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _kill(proc, url):
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return url


def _stop(proc, url):
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not health.is_stopped(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return url


def _restart(proc, url):
    _Status.answer = {"uptime": RESTARTED}
    return url


def _not_its_status(proc, url):
    _Status.answer = {"status": "success"}
    return url


def _hung(proc, url, listener):
    return f"http://127.0.0.1:{listener.getsockname()[1]}"        # connects, never answers


def _refusing(proc, url, listener):
    port = listener.getsockname()[1]
    listener.close()
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("what_happens, problem", [
    (lambda proc, url, _: url, None),
    (lambda proc, url, _: _kill(proc, url), "was killed by SIGKILL"),
    (lambda proc, url, _: _stop(proc, url), "was stopped (SIGSTOP, SIGTSTP or a tracer)"),
    (lambda proc, url, _: _restart(proc, url), f"restarted (it started at {STARTED}, and now says {RESTARTED})"),
    (lambda proc, url, _: _not_its_status(proc, url), "answered /api/v2/status without its start time (KeyError)"),
    (_hung, "stopped answering (no answer to /api/v2/status within 0.3 s)"),
    (_refusing, "stopped answering (/api/v2/status: Connection refused)"),
], ids=["as-started", "killed", "stopped", "restarted", "not-its-status", "hung", "refusing"])
def test_the_watch_names_how_a_server_was_lost(status_server, monkeypatch, what_happens, problem):
    monkeypatch.setattr(health, "ANSWER_TIMEOUT_S", 0.3)
    monkeypatch.setattr(health, "EXIT_GRACE_S", 0.1)
    monkeypatch.setattr(_Status, "answer", {"uptime": STARTED})
    proc = subprocess.Popen(["sleep", "60"])
    listener = socket.create_server(("127.0.0.1", 0), backlog=4)        # never accepts
    try:
        watched = health.Watched("Alertmanager", proc, f"{status_server}/api/v2/status", health.alertmanager_start,
                                 "its notifications are")
        watch = health.Watch([watched])
        assert watch.record() is None and watched.started == STARTED
        watched.status_url = what_happens(proc, status_server, listener) + "/api/v2/status"
        found = watch.problem()
        assert (found and (found[0].name, found[1])) == (problem and ("Alertmanager", problem))
    finally:
        listener.close()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("code, text", [(-9, "was killed by SIGKILL"), (-15, "was killed by SIGTERM"),
                                        (0, "exited with status 0"), (2, "exited with status 2"),
                                        (-99, "was killed by signal 99")])
def test_an_exit_in_words(code, text):
    assert health.exit_text(code) == text


# -- the twin with its real servers killed or stopped part-way ------------------------------------------
@pytest.fixture
def killed_run(request, twin_runs) -> tuple[tuple, dict]:
    """(server, signal, phase) and its run, played in the background (tests/twin_runs.py, lane "killed")."""
    return request.param, twin_runs.result(killed_name(*request.param))


@pytest.mark.servers
@pytest.mark.parametrize("killed_run", FIXED, indirect=True, ids=[f"{s}-{sig.name}-{p}" for s, sig, p in FIXED])
def test_a_server_lost_during_a_run_fails_the_twin_naming_it(killed_run):
    (server, sig, phase), run = killed_run
    assert run["pid"] is not None, run["stderr"]
    assert run["exit_code"] == 1, (run["stdout"], run["stderr"])
    lines = run["stderr"].splitlines()
    assert len(lines) == 1 and error_line(server, run["pid"], sig, phase).fullmatch(lines[0]), run["stderr"]
    assert "Result:" not in run["stdout"] and "Traceback" not in run["stdout"] + run["stderr"]
    assert run["gone"] and run["wall_s"] < 30


# -- check and calibrate against a Prometheus that is lost between its queries ---------------------------
class _Flaky(http.server.BaseHTTPRequestHandler):
    """Empty answers to every query; after AFTER queries it does what `mode` says."""
    AFTER = 3
    mode = "steady"
    queries = 0

    def log_message(self, *args):
        pass

    def _send(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        late = type(self).queries >= self.AFTER
        if type(self).mode == "no runtimeinfo":
            self._send(404, {"status": "error", "error": "404 page not found"})
            return
        start = RESTARTED if late and type(self).mode == "restarts" else STARTED
        self._send(200, {"status": "success", "data": {"startTime": start, "CWD": "/prometheus"}})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).queries += 1
        late = type(self).queries > self.AFTER
        if late and type(self).mode == "stops answering":
            time.sleep(3)                   # past the 1 s deadline the test sets
            return
        if late and type(self).mode == "hangs up":
            self.close_connection = True    # no status line: the connection just ends
            return
        self._send(200, {"status": "success", "data": {"resultType": "vector", "result": []}})


@pytest.fixture
def flaky(monkeypatch):
    from twin import promapi
    monkeypatch.setattr(promapi, "DEADLINE_S", 1.0)
    monkeypatch.setattr(_Flaky, "queries", 0)
    server = LoopbackHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("command, mode, line", [
    ("check", "restarts", "error: {url} restarted while it was read (it had started at " + STARTED + ", and now says "
                          + RESTARTED + "): its answers span two runs of the server, so nothing is judged"),
    ("calibrate", "restarts", "error: {url} restarted while it was read (it had started at " + STARTED + ", and now "
                              "says " + RESTARTED + "): its answers span two runs of the server, so nothing is judged"),
    ("check", "stops answering", "error: {url}: no full answer within 1 s; is it a Prometheus?"),
    ("check", "hangs up", "error: cannot reach Prometheus at {url}: Remote end closed connection without response"),
    ("check", "no runtimeinfo", "error: {url} did not answer /api/v1/status/runtimeinfo as Prometheus does (HTTP 404; "
                                "status: Input should be 'success'): without its start time a restart while it is "
                                "read cannot be told"),
], ids=["check-restarts", "calibrate-restarts", "stops-answering", "hangs-up", "no-runtimeinfo"])
def test_a_prometheus_lost_between_queries_fails_the_read_naming_it(flaky, tmp_path, command, mode, line):
    _Flaky.mode = mode
    argv = [command, "--stack", "prod", "--prometheus", flaky]
    if command == "calibrate":
        (tmp_path / "profiles.yaml").write_text("profiles: {}\n")
        argv += ["--profiles-file", str(tmp_path / "profiles.yaml")]
    started = time.monotonic()
    result = run_cli(argv, limit_s=20)
    assert (result.exit_code, result.stderr) == (1, line.format(url=flaky) + "\n"), result.stdout
    assert "within its plan" not in result.stdout and time.monotonic() - started < 10


def test_a_steady_prometheus_is_read_to_the_verdict(flaky):
    """The control: the same server, not lost, reaches check's own verdict (it has no vLLM series)."""
    _Flaky.mode = "steady"
    result = run_cli(["check", "--stack", "prod", "--prometheus", flaky], limit_s=20)
    assert (result.exit_code, result.stderr) == (1, "")
    assert "FAIL no vLLM series over the last 10m" in result.stdout and _Flaky.queries > _Flaky.AFTER
