"""Whether the servers the twin started are still the ones it started, and answering.

The twin's verdict rests on everything Prometheus evaluated and Alertmanager notified over the
whole run. A server that died, stopped or restarted part-way has lost part of that (a restarted
Prometheus its TSDB head and each alert's pending state, a restarted Alertmanager its
notification log), and "no alert fired, as the plan expects" would then be made up. `Watch`
names the first server that is not fine, and how:

- its process exited: `Popen.poll` (the exit status, or the signal that killed it);
- it is stopped (SIGSTOP, SIGTSTP, a tracer): the state in /proc/PID/stat (Linux; elsewhere a
  stopped server is caught by the next item, a timeout);
- it did not answer its status endpoint within ANSWER_TIMEOUT_S (hung, or refusing
  connections), or answered with another start time than at first (Prometheus'
  /api/v1/status/runtimeinfo `startTime`, Alertmanager's /api/v2/status `uptime`, which is its
  start instant): another process is answering on its port.

The process checks cost a system call and run at every poll; the HTTP probe (`probe=True`)
costs a request to each server, and the twin makes it every PROBE_INTERVAL_S and at the end.
"""
from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inputs.untrusted import printable

ANSWER_TIMEOUT_S = 5.0      # a loopback server answers its status in milliseconds, even on a busy machine
PROBE_INTERVAL_S = 1.0      # wall seconds between two HTTP probes while the twin runs
EXIT_GRACE_S = 1.0          # a dying process closes its sockets before it exits: time for the exit to show
STOPPED_STATES = ("T", "t")  # /proc/PID/stat: stopped by a signal, stopped by a tracer
# What asking a server can raise: no connection or no answer in time (OSError), a cut-off answer
# (HTTPException), not JSON (ValueError), JSON without the start instant (KeyError, TypeError).
ANSWER_ERRORS = (OSError, http.client.HTTPException, ValueError, KeyError, TypeError)


@dataclass
class Watched:
    """One server process and where it says when it started."""
    name: str                            # as messages print it: "Prometheus"
    proc: subprocess.Popen
    status_url: str                      # a JSON answer that holds the process's start instant
    start_of: Callable[[dict], str]      # reads that instant from the answer
    loses: str                           # what the twin loses with it: "its notifications are"
    started: str = ""                    # the instant first read (`Watch.record`)


def prometheus_start(answer: dict) -> str:
    return str(answer["data"]["startTime"])


def alertmanager_start(answer: dict) -> str:
    return str(answer["uptime"])


def exit_text(code: int) -> str:
    """Popen's returncode in words: negative is the signal that killed the process."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def is_stopped(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in STOPPED_STATES


def read_start(server: Watched, timeout_s: float) -> str:
    with urllib.request.urlopen(server.status_url, timeout=timeout_s) as resp:
        return server.start_of(json.load(resp))


def _no_answer(server: Watched, exc: Exception) -> str:
    path = urllib.parse.urlsplit(server.status_url).path
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"stopped answering (no answer to {path} within {ANSWER_TIMEOUT_S:g} s)"
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        return f"answered {path} without its start time ({type(exc).__name__})"
    return f"stopped answering ({path}: {printable(getattr(reason, 'strerror', None) or reason, 120)})"


class Watch:
    """The twin's servers, checked against what they were when `record` ran."""

    def __init__(self, servers: list[Watched]):
        self.servers = servers

    def record(self) -> tuple[Watched, str] | None:
        """Read each server's start instant; a problem if one cannot be read (see `problem`)."""
        for server in self.servers:
            try:
                server.started = printable(read_start(server, ANSWER_TIMEOUT_S), 60)
            except ANSWER_ERRORS as exc:
                return self._exit_or(server, _no_answer(server, exc))
        return None

    def process_problem(self) -> tuple[Watched, str] | None:
        """The first server whose process exited or is stopped, and what happened to it."""
        for server in self.servers:
            code = server.proc.poll()
            if code is not None:
                return server, exit_text(code)
            if is_stopped(server.proc.pid):
                return server, "was stopped (SIGSTOP, SIGTSTP or a tracer)"
        return None

    def problem(self, probe: bool = True) -> tuple[Watched, str] | None:
        """`process_problem`, then (with `probe`) whether each server answers with its first start instant."""
        found = self.process_problem()
        if found is not None or not probe:
            return found
        for server in self.servers:
            try:
                now = printable(read_start(server, ANSWER_TIMEOUT_S), 60)
            except ANSWER_ERRORS as exc:
                return self._exit_or(server, _no_answer(server, exc))
            if now != server.started:
                return server, f"restarted (it started at {server.started}, and now says {now})"
        return None

    def _exit_or(self, server: Watched, no_answer: str) -> tuple[Watched, str]:
        """A server that did not answer may be dying (refusing connections before it exits):
        name its exit if it shows within EXIT_GRACE_S, else the missing answer."""
        try:
            server.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        return self.process_problem() or (server, no_answer)
