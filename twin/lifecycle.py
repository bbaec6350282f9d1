"""How the twin's parts start, wait and stop: one context-manager shape, one polling loop, and
server processes that die with the twin.

- `Started`: `with part:` runs `part.start()`; if that fails, `close()` undoes what it did; the
  block's end calls `close()`. The exporters, the servers and the twin itself are `Started`.
- `until`: poll a condition (an HTTP probe, a set of scraped ports) to a deadline.
- `spawn`: a server process in its own session (so `stop` can signal its whole group) that the
  kernel kills when the twin dies, even by SIGKILL or the OOM killer, when no `close()` runs:
  Linux's `prctl(PR_SET_PDEATHSIG, SIGKILL)` (man 2 prctl), set in the child between fork and
  exec. The signal follows the death of the parent *thread* that forked it: each part is
  entered and closed by the same thread (a `with` block), which therefore outlives its servers;
  the CLI runs the twin on its main thread.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

POLL_S = 0.05
PR_SET_PDEATHSIG = 1            # <linux/prctl.h>
STOP_TIMEOUT_S = 10.0


class Started(ABC):
    """A part of the twin as a context manager: `start()` on entry, `close()` on exit or on a
    failed start. `close()` must be idempotent and safe on a part that started only halfway."""

    @abstractmethod
    def start(self) -> None:
        """Start the part's servers or threads."""

    @abstractmethod
    def close(self) -> None:
        """Stop whatever `start` began, even halfway."""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def until(condition: Callable[[], bool], timeout_s: float, give_up: Callable[[], bool] = lambda: False,
          interval_s: float = POLL_S) -> bool:
    """Poll `condition` until it holds (True), `timeout_s` passes or `give_up()` holds (False).
    A condition that raises OSError, ValueError or KeyError (a server not answering yet, a body
    not yet in shape) counts as not holding."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not give_up():
        try:
            if condition():
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(interval_s)
    return False


class LoopbackHTTPServer(ThreadingHTTPServer):
    """The twin's own HTTP endpoints (the exporters, the webhook). A client that hangs up
    mid-answer (a Prometheus killed mid-scrape) is the client's matter, not a traceback on the
    twin's stderr; any other error in a handler still prints."""
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=1) as resp:
        return json.load(resp)


# -- processes ----------------------------------------------------------------------------------
def _pdeathsig_preexec() -> Callable[[], None] | None:
    """The child-side hook that asks for SIGKILL when the parent thread dies (Linux only; None
    elsewhere). libc and the parent's pid are looked up before fork, so the child only calls."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:          # the parent died before prctl: nothing will signal us
            os.kill(os.getpid(), signal.SIGKILL)
    return die_with_parent


def spawn(argv: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    """A server process writing to `log`, in its own session, killed when this thread dies."""
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                start_new_session=True, preexec_fn=_pdeathsig_preexec())


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, then SIGKILL; wait for the process."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            if sig == signal.SIGTERM:        # a stopped process (SIGSTOP) acts on SIGTERM only once continued
                os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue
