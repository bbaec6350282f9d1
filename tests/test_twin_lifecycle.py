"""The twin's servers die with it: a process that runs the twin's real Prometheus and Alertmanager
(`twin.servers.Servers`, as the twin starts them) is killed with SIGKILL, as the OOM killer or
`kill -9` would, so no `close()` and no atexit handler runs; the kernel must kill both servers
(PR_SET_PDEATHSIG, `twin.lifecycle.spawn`)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GONE_WITHIN_S = 10.0

# A twin-like parent: start the servers, print their pids, then wait to be killed.
PARENT = """
import sys, time
from pathlib import Path
from twin.servers import Servers
with Servers(Path(sys.argv[1]), [], [], 60.0) as servers:
    print(" ".join(str(pid) for pid in servers.pids), flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that never comes counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_the_twin_takes_its_servers_with_it(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, f"the parent printed {line!r}: {parent.stderr.read() if parent.poll() else ''}"
        assert all(alive(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        parent.kill()
        parent.wait(timeout=10)
        for pid in pids if "pids" in locals() else ():
            try:
                os.killpg(pid, signal.SIGKILL)      # never leave a server behind, even if the test fails
            except ProcessLookupError:
                pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_parent_is_already_gone_kills_itself(monkeypatch):
    """The window between fork and prctl: had the parent died in it, no signal would come, so the
    child checks its parent and goes. (prctl and kill are stubbed: this runs in the test process.)"""
    from twin import lifecycle
    calls = []

    class Libc:
        @staticmethod
        def prctl(*args):
            calls.append(("prctl", args))
    monkeypatch.setattr(lifecycle.ctypes, "CDLL", lambda *a, **k: Libc())
    hook = lifecycle._pdeathsig_preexec()
    monkeypatch.setattr(lifecycle.os, "getppid", lambda: -1)
    monkeypatch.setattr(lifecycle.os, "kill", lambda pid, sig: calls.append(("kill", sig)))
    hook()
    assert calls == [("prctl", (lifecycle.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)), ("kill", signal.SIGKILL)]
