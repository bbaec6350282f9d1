"""The twin fails closed (issue 32): a Prometheus or Alertmanager that dies, stops,
stops answering or restarts during a run fails it with one line naming the server and what
happened (exit 1), never "the alerts behaved as the plan expects".

- `twin.health.Watch` on stand-in processes and status servers: each way a server is lost, named;
- `llmserve twin` with its real Prometheus or Alertmanager killed (SIGKILL) or stopped (SIGSTOP)
  part-way (tests/twin_kills.py sends the signal).
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

from tests.twin_kills import error_line, no_server_left, twin_with_a_signalled_server
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
@pytest.mark.servers
@pytest.mark.parametrize("server, sig, phase", [
    ("Prometheus", signal.SIGKILL, "running"),
    ("Alertmanager", signal.SIGKILL, "running"),
    ("Prometheus", signal.SIGSTOP, "running"),          # stops answering: stopped, not dead
    ("Alertmanager", signal.SIGKILL, "starting"),       # before the clock: no bounded wait runs to its end
    ("Prometheus", signal.SIGTERM, "ending"),           # after the wait, as its counters are read
], ids=lambda v: v.name if isinstance(v, signal.Signals) else str(v))
def test_a_server_lost_during_a_run_fails_the_twin_naming_it(server, sig, phase):
    started = time.monotonic()
    result, pid = twin_with_a_signalled_server(server, sig, phase)
    assert pid is not None, result.stderr
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and error_line(server, pid, sig, phase).fullmatch(lines[0]), result.stderr
    assert "Result:" not in result.stdout and "Traceback" not in result.stdout + result.stderr
    assert no_server_left(pid) and time.monotonic() - started < 30
