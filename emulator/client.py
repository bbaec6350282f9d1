"""A plain Poisson streaming client of the emulator (the standard library only): each request is
a streamed completion of a token-id prompt, sent at its arrival time on its own connection; the
client notes when each event arrives and reads the token count from the usage chunk.

TTFT is arrival to the first token's event; TPOT is (last token - first token) / (tokens - 1),
as vLLM and the simulator count it (`simulator.report.latencies`).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from .wire import LOOPBACK


@dataclass(frozen=True)
class Timing:
    sent_s: float
    first_s: float | None
    last_s: float | None
    tokens: int
    status: int

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_s is None else self.first_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_s is None or self.last_s is None or self.tokens < 2:
            return None
        return (self.last_s - self.first_s) / (self.tokens - 1)


def completion_body(prompt_tokens: int, max_tokens: int) -> bytes:
    return json.dumps({"prompt": [1] * prompt_tokens, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()


async def _chunks(reader: asyncio.StreamReader):
    """The pieces of a chunked body, as they arrive."""
    while True:
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def stream_completion(port: int, body: bytes) -> Timing:
    """One streamed completion; its Timing (times on the event loop's clock)."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: emulate\r\ncontent-type: application/json\r\n"
                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    first = last = None
    tokens = 0
    try:
        status = int((await reader.readuntil(b"\r\n\r\n")).split(b" ", 2)[1])
        if status != 200:
            return Timing(sent, None, None, 0, status)
        buffer = b""
        async for data in _chunks(reader):
            now = loop.time()
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                payload = event.removeprefix(b"data: ")
                if payload == b"[DONE]":
                    continue
                chunk = json.loads(payload)
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    first = now if first is None else first
                    last = now
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    finally:
        writer.close()
    return Timing(sent, first, last, tokens, 200)


async def replay(port: int, requests: list[tuple[float, int, int]]) -> list[Timing]:
    """(arrival s from now, prompt tokens, max tokens) each sent at its time, all streamed; their
    Timings in order. Poisson arrivals: `simulator.workload.generate` of a Poisson WorkloadSpec,
    which also gives `simulate` the same requests."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for at, prompt, out in requests:
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(stream_completion(port, completion_body(prompt, out))))
    return list(await asyncio.gather(*tasks))


def means_ms(timings: list[Timing]) -> dict:
    """Mean TTFT and TPOT (ms) of the answered requests, and how many were not answered in full."""
    ttft = [t.ttft_s for t in timings if t.ttft_s is not None]
    tpot = [t.tpot_s for t in timings if t.tpot_s is not None]
    return {"ttft_ms": 1e3 * sum(ttft) / len(ttft) if ttft else None,
            "tpot_ms": 1e3 * sum(tpot) / len(tpot) if tpot else None,
            "requests": len(timings), "failed": sum(1 for t in timings if t.status != 200 or t.first_s is None)}
