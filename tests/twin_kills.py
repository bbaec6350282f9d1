"""A real signal sent to the twin's own Prometheus or Alertmanager at a chosen phase of a run, for
tests/test_twin_fail_closed.py and the fuzz suite's "killed servers" class (tests/test_fuzz.py).

`signalled(server, sig, phase)` patches the twin for a `with` block: every twin run in it sends
`sig` with kill(2) to that server's process (`Popen.send_signal`, which never signals a pid the
twin has already reaped) at `phase`:

- "starting": as soon as both servers are ready, while the twin waits for its first scrapes;
- "running": when the twin's clock reads RUNNING_AT_S, amid the arrivals;
- "settling": when the clock passes the arrivals' end (the twin waits for the last resolves);
- "ending": as the twin reads Prometheus' own counters after its wait (only the last check is left).

The run itself is `llmserve twin` in this process (`tests.inprocess_cli.run_cli`), on the short
scenario SHORT: a few seconds each, most of them Prometheus handing its targets to its scrapers.
The fixed cases (FIXED) play in a background lane of tests/twin_runs.py; the fuzz suite plays its
draws itself.
"""
from __future__ import annotations

import re
import signal
import threading
import time
from contextlib import contextmanager

import pytest

from tests.inprocess_cli import CliResult, run_cli

SERVERS = ("Prometheus", "Alertmanager")
PHASES = ("starting", "running", "settling", "ending")
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP)
# The fixed table of tests/test_twin_fail_closed.py (played in the background: tests/twin_runs.py).
FIXED = (
    ("Prometheus", signal.SIGKILL, "running"),
    ("Alertmanager", signal.SIGKILL, "running"),
    ("Prometheus", signal.SIGSTOP, "running"),          # stops answering: stopped, not dead
    ("Alertmanager", signal.SIGKILL, "starting"),       # before the clock: no bounded wait runs to its end
    ("Prometheus", signal.SIGTERM, "ending"),           # after the wait, as its counters are read
)
DURATION_S = 60                    # simulated arrivals; the twin then waits SETTLE_S (420 s) more
SHORT = ["twin", "--stack", "prod", "--time-scale", "150", "--duration", str(DURATION_S)]   # the fastest clock
RUNNING_AT_S = 30.0
LIMIT_S = 60.0                     # one run, start to error line (about 6 s)
SETTLED_S = 5.0                    # the longest a signal takes to show in the process's state
# What each signal does to the server, as the error line says it.
WHAT = {signal.SIGKILL: "was killed by SIGKILL", signal.SIGTERM: "exited with status 0",
        signal.SIGSTOP: r"was stopped \(SIGSTOP, SIGTSTP or a tracer\)"}
LOSES = {"Prometheus": "its rule evaluations and alert states are", "Alertmanager": "its notifications are"}


def error_line(server: str, pid: int, sig: signal.Signals, phase: str) -> re.Pattern:
    """The one line the twin prints: the server, its pid, what happened, when (simulated seconds vary)."""
    when = "while the twin was starting" if phase == "starting" else r"at [\d,]+ simulated s"
    return re.compile(rf"error: {server} \(pid {pid}\) {WHAT[sig]} {when}: {LOSES[server]} lost, so whether the "
                      r"alerts behaved as the plan expects cannot be judged")


def _send(servers, server: str, sig: signal.Signals, sent: dict) -> None:
    """Signal the server and wait until its process shows it (exited, or stopped)."""
    from twin.health import is_stopped
    proc = next(w.proc for w in servers.watch.servers if w.name == server)
    sent["pid"] = proc.pid
    proc.send_signal(sig)
    deadline = time.monotonic() + SETTLED_S
    while time.monotonic() < deadline and not (is_stopped(proc.pid) if sig == signal.SIGSTOP else proc.poll() is not None):
        time.sleep(0.01)


def _at_clock(twin, at_s: float, send) -> None:
    """In the background: `send()` once the twin's clock reads `at_s` (gives up with the twin)."""
    def wait_and_send():
        deadline = time.monotonic() + LIMIT_S
        while twin.clock.now() < at_s and twin._servers is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        if twin._servers is not None:
            send()
    threading.Thread(target=wait_and_send, daemon=True).start()


@contextmanager
def signalled(server: str, sig: signal.Signals, phase: str):
    """Within the block, each twin sends `sig` to its `server` at `phase`; yields {"pid": the signalled pid}."""
    from twin import scenario, servers as servers_module
    sent: dict = {}
    real_servers_start, real_twin_start = servers_module.Servers.start, scenario.Twin.start
    real_diagnostics = scenario.Twin.diagnostics

    def servers_start(self):
        real_servers_start(self)
        if phase == "starting":
            _send(self, server, sig, sent)

    def twin_start(self):
        real_twin_start(self)
        if phase in ("running", "settling"):
            at_s = RUNNING_AT_S if phase == "running" else DURATION_S + 10.0
            _at_clock(self, at_s, lambda: _send(self._servers, server, sig, sent))

    def diagnostics(self):
        if phase == "ending":
            _send(self._servers, server, sig, sent)
        return real_diagnostics(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(servers_module.Servers, "start", servers_start)
        patch.setattr(scenario.Twin, "start", twin_start)
        patch.setattr(scenario.Twin, "diagnostics", diagnostics)
        yield sent


def twin_with_a_signalled_server(server: str, sig: signal.Signals, phase: str) -> tuple[CliResult, int | None]:
    """`llmserve twin` on SHORT with `server` signalled at `phase`: (its result, the pid signalled)."""
    with signalled(server, sig, phase) as sent:
        result = run_cli(SHORT, limit_s=LIMIT_S)
    return result, sent.get("pid")


def no_server_left(pid: int) -> bool:
    """The signalled server is gone after the run (a stopped one too: the twin continues, then ends it)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")
