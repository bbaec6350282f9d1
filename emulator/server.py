"""The emulator's HTTP routes over the fleet, on 127.0.0.1 only, and its clean stop.

Routes, as vLLM's API server answers them: `POST /v1/completions` and `/v1/chat/completions`
(streamed or whole), `GET /v1/models`, `GET /health` (200, empty), `GET /metrics` (vLLM's
exposition, one `engine` per replica). Bounded: at most `max_connections` connections open and as
many requests in flight (503 beyond, as a gateway's circuit breaker answers), bodies at most
`max_body` bytes. Stopping (`serve`'s `stop` resolves, on SIGINT or SIGTERM from the CLI):
the listener closes, idle connections are closed, every request in flight gets a 503 (in its
stream, or as its answer), and the connections close once those are written (STOP_GRACE_S at most).
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from twin import vllm_metrics as vm

from . import openai
from .fleet import Fleet, Job
from .openai import ApiError, Shapes
from .wire import LAST_CHUNK, LOOPBACK, MAX_HEAD_BYTES, ClientGone, HttpRequest, chunk, head, read_request

JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
METRICS = "text/plain; version=0.0.4; charset=utf-8"
STOP_GRACE_S = 2.0
LINGER_S = 1.0          # how long a refused client may go on sending before the close
ROUTES = {"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/models": "GET", "/health": "GET",
          "/metrics": "GET"}


@dataclass(frozen=True)
class Served:
    """What the server says about its model."""
    model: str               # the name clients ask for (deployment.serving.served_model_name)
    root: str                # the checkpoint it would load
    max_model_len: int


class Emulator:
    def __init__(self, fleet: Fleet, served: Served, max_connections: int, max_body: int):
        self.fleet, self.served = fleet, served
        self.max_connections, self.max_body = max_connections, max_body
        self._busy: dict[asyncio.Task, bool] = {}       # each connection's task: answering a request?
        self._writers: set[asyncio.StreamWriter] = set()
        self._refusing = 0
        self._models = openai.models_body(served.model, served.root, served.max_model_len, int(time.time()))

    async def serve(self, port: int, stop: asyncio.Future, on_ready=None) -> int:
        """Listen on 127.0.0.1:port until `stop` resolves; then stop cleanly. Returns how many
        requests were in flight (and failed)."""
        server = await asyncio.start_server(self._connection, LOOPBACK, port, limit=MAX_HEAD_BYTES,
                                            backlog=min(1024, self.max_connections))
        self.fleet.start(asyncio.get_running_loop())
        if on_ready is not None:
            on_ready(server.sockets[0].getsockname()[1])
        try:
            await stop
        finally:
            server.close()
            failed = self.fleet.close(ApiError(503, "the emulator is shutting down"))
            await self._drain_connections()
        return failed

    async def _drain_connections(self) -> None:
        for task, busy in list(self._busy.items()):
            if not busy:
                task.cancel()
        tasks = list(self._busy)
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE_S)
        for task in tasks:
            task.cancel()
        for writer in list(self._writers):
            writer.close()

    # -- one connection ------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._busy) >= self.max_connections:
            await self._refuse(reader, writer, ApiError(503, f"more than {self.max_connections} connections open"))
            return
        self._busy[task] = False
        self._writers.add(writer)
        try:
            await self._requests(reader, writer, task)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._busy.pop(task, None)
            self._writers.discard(writer)
            writer.close()

    async def _requests(self, reader, writer, task) -> None:
        while True:
            try:
                req = await read_request(reader, writer, self.max_body)
            except ClientGone:
                return
            except ApiError as error:
                await self._refuse(reader, writer, error)
                return
            self._busy[task] = True
            keep = await self._answer(req, writer)
            self._busy[task] = False
            if not keep:
                return

    async def _refuse(self, reader, writer: asyncio.StreamWriter, error: ApiError) -> None:
        """Answer with the error and close, reading what the client still sends for a moment first:
        closing a socket with unread data resets it, and the client would never see the answer."""
        self._refusing += 1
        try:
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                await self._send(writer, error.status, JSON, error.body(), keep_alive=False)
                writer.write_eof()
                # a flood of refused connections lingers no more than the connections served
                async with asyncio.timeout(LINGER_S if self._refusing <= self.max_connections else 0):
                    while await reader.read(65536):
                        pass
        finally:
            self._refusing -= 1
            writer.close()

    async def _send(self, writer, status: int, content_type: str | None, body: bytes, keep_alive: bool) -> None:
        writer.write(head(status, content_type, len(body), keep_alive) + body)
        await writer.drain()

    # -- routes ----------------------------------------------------------------------------------------
    async def _answer(self, req: HttpRequest, writer) -> bool:
        """Answer one request; whether the connection stays open."""
        method = ROUTES.get(req.path)
        if method is None:
            await self._send(writer, 404, JSON, b'{"detail": "Not Found"}', req.keep_alive)
        elif req.method != method:
            await self._send(writer, 405, JSON, b'{"detail": "Method Not Allowed"}', req.keep_alive)
        elif req.path == "/health":
            await self._send(writer, 200, None, b"", req.keep_alive)
        elif req.path == "/v1/models":
            await self._send(writer, 200, JSON, self._models, req.keep_alive)
        elif req.path == "/metrics":
            text = vm.render_engines(self.served.model, self.fleet.engine_values())
            await self._send(writer, 200, METRICS, text.encode(), req.keep_alive)
        else:
            return await self._generate(req, writer, chat=req.path == "/v1/chat/completions")
        return req.keep_alive

    async def _generate(self, req: HttpRequest, writer, chat: bool) -> bool:
        try:
            ask = openai.read_ask(openai.parse_json(req.body), chat, self.served.model, self.served.max_model_len)
            if len(self.fleet.jobs) >= self.max_connections:
                raise ApiError(503, f"{len(self.fleet.jobs)} requests in flight: at the emulator's limit")
        except ApiError as error:
            await self._send(writer, error.status, JSON, error.body(), req.keep_alive)
            return req.keep_alive
        shapes = Shapes(ask, self.served.model)
        job = self.fleet.submit(ask.prompt_tokens, ask.max_tokens, ask.stream)
        if ask.stream:
            return await self._stream(job, shapes, writer, req.keep_alive)
        while not (job.done or job.error):
            await job.changed.wait()
            job.changed.clear()
        if job.error is not None:
            await self._send(writer, job.error.status, JSON, job.error.body(), req.keep_alive)
        else:
            await self._send(writer, 200, JSON, shapes.response(job.tokens), req.keep_alive)
        return req.keep_alive

    async def _stream(self, job: Job, shapes: Shapes, writer, keep_alive: bool) -> bool:
        """Server-sent events as the job's tokens come: one event per wake with the tokens since the
        last (one per engine step while the client keeps up), the last with its finish reason."""
        writer.write(head(200, SSE, None, keep_alive))
        sent = 0
        while True:
            await job.changed.wait()
            job.changed.clear()
            events = []
            if job.tokens > sent or (job.done and job.error is None):
                if sent == 0 and shapes.ask.chat:
                    events.append(shapes.role())
                events.append(shapes.tokens(job.tokens - sent, last=job.done))
                sent = job.tokens
            if job.error is not None:
                events.append(openai.error_event(job.error))
            elif job.done and shapes.ask.include_usage:
                events.append(shapes.usage_event(sent))
            ended = job.error is not None or job.done
            if not events and not ended:
                continue                        # woken with nothing new: an empty chunk would end the body
            if ended:
                events.append(openai.DONE_EVENT)
            writer.write(chunk(b"".join(events)) + (LAST_CHUNK if ended else b""))
            await writer.drain()
            if ended:
                return keep_alive


def from_plan(plan, settings, *, router: str = "least-outstanding", slowdown: float = 1.0, failure=None,
              max_connections: int = 512) -> Emulator:
    """The plan's fleet (its replicas, engine arguments and step cost, as `simulate` takes them)
    behind an Emulator. `settings` is the stack's (None for the reference design): the served
    name and checkpoint are the ones its Deployment would serve."""
    from deployment.serving import served_checkpoint, served_model_name
    from simulator import config_from_plan

    # config_from_plan's workload part is unused (clients bring the load): any open-loop rate does
    config = config_from_plan(plan, 1.0, plan.request.workload.qps or 1.0, router=router, failure=failure)
    served = Served(served_model_name(plan, settings) if settings is not None else plan.request.model,
                    served_checkpoint(plan, settings) if settings is not None else plan.checkpoint,
                    plan.engine_args.max_model_len)
    # a prompt at the context limit fits in any form: token ids run about 8 bytes a token, text
    # (4 characters a token, up to 4 bytes each in UTF-8) 16
    max_body = 64 * 1024 + 16 * served.max_model_len
    return Emulator(Fleet(config, slowdown), served, max_connections, max_body)


def run(emulator: Emulator, port: int, on_ready=None) -> tuple[int, int]:
    """Serve until SIGINT or SIGTERM (main thread only): (the signal, requests that were in flight)."""
    import signal

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        stop = loop.create_future()

        def stopping(signum: int) -> None:
            if not stop.done():
                stop.set_result(signum)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping, sig)
        try:
            failed = await emulator.serve(port, stop, on_ready)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        return stop.result(), failed
    return asyncio.run(main())
