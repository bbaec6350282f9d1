"""`llmserve emulate` served in this process for the tests (tests/test_emulate.py, the fuzz suite):
the stack's emulator on an ephemeral port, its event loop in a thread."""
from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

from emulator.server import from_plan
from tests.stacks import plan_for


@contextlib.contextmanager
def serving(stack: str = "dev", **options):
    """The stack's emulator on an ephemeral port, its event loop in a thread; stopped on exit."""
    settings, plan = plan_for(stack)
    emulator = from_plan(plan, settings, **options)
    loop = asyncio.new_event_loop()
    stop = loop.create_future()
    ready = threading.Event()
    ports: list[int] = []

    def on_ready(port: int) -> None:
        ports.append(port)
        ready.set()
    thread = threading.Thread(target=lambda: loop.run_until_complete(emulator.serve(0, stop, on_ready)))
    thread.start()
    assert ready.wait(10)
    try:
        yield ports[0], emulator
    finally:
        loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(signal.SIGTERM))
        thread.join(10)
        loop.close()
