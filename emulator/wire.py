"""Just enough HTTP/1.1 for an OpenAI client, on asyncio streams (the standard library; no server
framework in the project's pins): one request at a time per connection, keep-alive, bodies by
Content-Length only, streamed answers in chunked transfer encoding.

Bounded against a hostile client: the request line and headers at most MAX_HEAD_BYTES, arriving
within IDLE_S of the previous answer (or of connecting); the body at most the server's limit,
arriving within BODY_S. Anything malformed is a 4xx with a JSON error object and the connection
closed; nothing a client sends reaches a traceback.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from http import HTTPStatus

from .openai import ApiError

LOOPBACK = "127.0.0.1"
MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 100
IDLE_S = 10.0            # uvicorn's keep-alive is 5 s; a slow first request gets a little more
BODY_S = 10.0
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")      # RFC 9110 token: method and header names
LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class ClientGone(Exception):
    """The connection closed (or went idle) between requests: nothing to answer."""


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int) -> HttpRequest:
    """The next request on the connection. ClientGone when there is none; ApiError (to answer,
    then close) when it is malformed or over a limit. A client that waits for `100 Continue`
    before its body (curl does for large ones) is told to go on once the headers pass."""
    try:
        async with asyncio.timeout(IDLE_S):
            head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise ApiError(400, "the request ended inside its headers") from None
        raise ClientGone from None
    except asyncio.LimitOverrunError:
        raise ApiError(431, f"the request line and headers exceed {MAX_HEAD_BYTES} bytes") from None
    except (TimeoutError, ConnectionError):
        raise ClientGone from None
    method, path, version, headers = _parse_head(head)
    length = _content_length(headers, max_body)
    if length and headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        async with asyncio.timeout(BODY_S):
            body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        raise ClientGone from None
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return HttpRequest(method, path.split("?", 1)[0], headers, body, keep_alive)


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not TOKEN.match(parts[0]) or not parts[1].startswith("/") \
            or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise ApiError(400, "malformed request line (expected METHOD /path HTTP/1.1)")
    if len(lines) - 1 > MAX_HEADERS:
        raise ApiError(431, f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not TOKEN.match(name):
            raise ApiError(400, "malformed header line")
        key = name.lower()
        if key in headers and key in ("content-length", "transfer-encoding", "host"):
            raise ApiError(400, f"{name} given twice")
        headers[key] = value.strip()
    return parts[0], parts[1], parts[2], headers


def _content_length(headers: dict[str, str], max_body: int) -> int:
    if "transfer-encoding" in headers:
        raise ApiError(411, "send the body with Content-Length (chunked request bodies are not accepted)")
    text = headers.get("content-length", "0")
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise ApiError(400, "Content-Length must be a number of bytes")
    length = int(text)
    if length > max_body:
        raise ApiError(413, f"the body is {length} bytes; at most {max_body} are accepted")
    return length


def head(status: int, content_type: str | None, length: int | None, keep_alive: bool) -> bytes:
    """A response's status line and headers; without a length the body is chunked."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "server: llmserve-emulate"]
    if content_type:
        lines.append(f"content-type: {content_type}")
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)
