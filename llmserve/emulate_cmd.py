"""Serve the plan's fleet as an OpenAI-compatible API on 127.0.0.1, answering in real time from
its step model: /v1/completions and /v1/chat/completions (streamed or not), /v1/models, /health
and vLLM's /metrics. One simulator engine per planned replica behind the plan's router; there
is no model, so tokens are placeholders and every answer runs to max_tokens. Stops on SIGINT or
SIGTERM (exit 130 or 143), failing what is in flight."""
from __future__ import annotations

import math
import os
import sys
from typing import Optional

import typer

from . import options
from .errors import check_positive, fail
from .stack_arg import load, requested_failure

MAX_CONNECTIONS = 4096      # each a file descriptor; the usual soft limit is 1024 or more


def emulate(
    stack: Optional[str] = options.STACK_OR_REFERENCE,
    port: int = typer.Option(8000, help="Port on 127.0.0.1 (0: any free one, printed). vLLM's default is 8000."),
    host: str = typer.Option("127.0.0.1", help="Bind address: 127.0.0.1 only (the API has no authentication)."),
    router: str = typer.Option("least-outstanding", help="round-robin, least-outstanding or least-pending-tokens."),
    slowdown: float = typer.Option(1.0, help="Every step this many times the plan's (1.2: a fleet 20% slower)."),
    fail_zone: Optional[str] = typer.Option(None, "--fail-zone", help="ZONE@T[:T2]: lose a zone T s after the start "
                                            "(back at T2)."),
    fail_node: Optional[str] = typer.Option(None, "--fail-node", help="POOL/node-I@T[:T2]: lose one node (and every "
                                            "replica on it) T s after the start (back at T2)."),
    max_connections: int = typer.Option(512, "--max-connections",
                                        help="Connections open, and requests in flight, at most (503 beyond)."),
) -> None:
    from simulator import ROUTERS
    from simulator.workload import MAX_SLOWDOWN

    _check(host, port, router, ROUTERS, slowdown, MAX_SLOWDOWN, max_connections)
    loaded = load(stack, plan=True)
    plan = loaded.plan
    failure = requested_failure(fail_zone, fail_node, math.inf, plan)
    from emulator.server import from_plan, run
    try:
        emulator = from_plan(plan, loaded.settings, router=router, slowdown=slowdown, failure=failure,
                             max_connections=max_connections)
    except ValueError as exc:
        fail(str(exc))

    def ready(bound: int) -> None:
        _ready_lines(emulator, bound, router, slowdown)
    try:
        signum, failed = run(emulator, port, ready)
    except OSError as exc:
        fail(f"--port: cannot listen on 127.0.0.1:{port}: {os.strerror(exc.errno) if exc.errno else exc}")
    import signal
    fleet = emulator.fleet
    print(f"emulate: stopped on {signal.Signals(signum).name}; {failed} request(s) in flight answered 503 "
          f"({fleet.retried} retried and {fleet.failed} failed in all)", file=sys.stderr)
    raise typer.Exit(128 + signum)


def _check(host: str, port: int, router: str, routers, slowdown: float, max_slowdown: float, connections: int) -> None:
    if host != "127.0.0.1":
        fail(f"--host: emulate serves on 127.0.0.1 only (got {host!r}): its API has no authentication")
    if not 0 <= port <= 65535:
        fail(f"--port: a port number from 0 to 65535 (got {port})")
    if router not in routers:
        fail(f"--router: unknown value '{router}'; choose one of: {', '.join(routers)}")
    check_positive({"--slowdown": slowdown})
    if slowdown > max_slowdown:
        fail(f"--slowdown: {slowdown:g} is above the limit of {max_slowdown:g} (steps that many times the plan's)")
    if not 1 <= connections <= MAX_CONNECTIONS:
        fail(f"--max-connections: from 1 to {MAX_CONNECTIONS} (got {connections})")


def _ready_lines(emulator, port: int, router: str, slowdown: float) -> None:
    fleet, served = emulator.fleet, emulator.served
    names = ", ".join(f"engine {i}: {rep.name}" for i, rep in enumerate(fleet.replicas))
    print(f"Serving {served.model} on http://127.0.0.1:{port} (OpenAI API and vLLM /metrics): "
          f"{len(fleet.replicas)} emulated replica(s) ({names}), router {router}, steps {slowdown:g}x the plan's. "
          "SIGINT or SIGTERM stops.", flush=True)
    f = fleet.config.failure
    if f is not None:
        lost = ", ".join(s.name for s in fleet.config.replicas if f.hits(s))
        back = f", back at {f.end_s:g} s" if f.end_s is not None else ", not back"
        print(f"{'Node ' + f.node if f.node else 'Zone ' + f.zone} lost {f.start_s:g} s from now{back} ({lost}).",
              flush=True)


def register(app: typer.Typer) -> None:
    app.command("emulate", help=__doc__)(emulate)
