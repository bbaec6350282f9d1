"""A large JSON file read in bounded memory: the values the reader names are skipped as they stream
past, and the rest comes back as JSON text for `json_doc.loads`.

Why not a streaming parser (ijson 3.6.0, its C backend): it segfaults on an integer of 5,000 digits
(exit 139, no exception to catch) and refuses the `NaN` and `Infinity` that Python's `json.dumps`
writes, which is how GuideLLM saves its report (guidellm 0.8.1 benchmark/schemas/report.py L109-111;
pydantic's `model_dump(mode="json")` leaves a float NaN a NaN). Here the kept text is parsed by the
same `json_doc.loads` as a small file (NaN read, 5,000-digit integers read as an infinity, every
field's problem named by the reader's validation), and the skipped values are only scanned: their
strings and brackets, at C speed (the regular expressions below), never decoded.

Memory: one chunk of the file (1 MiB), the kept text (at most `max_kept` characters, else an error),
and a stack of the open containers around the kept text (at most `max_depth`, else an error). A
string longer than a chunk inside a skipped value is scanned across chunks, never held whole.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from .errors import InputError

# A string's body after its opening quote, to the closing quote (unrolled: linear, no backtracking blow-up).
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# Inside a skipped value: a run of anything but brackets, complete strings included.
_SKIP_RUN = re.compile(r'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.S)
_SPACE = re.compile(r"[ \t\r\n]*")
_SCALAR = re.compile(r'[^ \t\r\n{}\[\]:,"]+')


class TooDeep(InputError):
    """More open containers in the kept text than `max_depth`."""


class TooLarge(InputError):
    """More kept text than `max_kept` characters."""


class NotUTF8(InputError):
    def __init__(self, byte: int, offset: int):
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x} at offset {offset})")
        self.byte, self.offset = byte, offset


def _decoded(chunks: Iterable[bytes]):
    """Text from UTF-8 chunks, a character split across two chunks carried over; NotUTF8 names the byte
    and its offset in the whole file."""
    carry, offset = b"", 0          # offset: of carry's first byte in the file
    for chunk in chunks:
        data = carry + chunk
        cut = len(data)
        for back in range(1, min(4, len(data)) + 1):      # a lead byte whose sequence runs past the end
            b = data[-back]
            if b & 0xC0 != 0x80:
                need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
                if need > back:
                    cut = len(data) - back
                break
        try:
            text = data[:cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUTF8(data[exc.start], offset + exc.start) from None
        carry, offset = data[cut:], offset + cut
        if text:
            yield text
    if carry:
        try:
            carry.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NotUTF8(carry[exc.start], offset + exc.start) from None


class _Reader:
    def __init__(self, chunks: Iterable[bytes], skip: Callable[[list], bool], max_kept: int, max_depth: int):
        self.texts = _decoded(chunks)
        self.buf, self.pos, self.eof = "", 0, False
        self.skip, self.max_kept, self.max_depth = skip, max_kept, max_depth
        self.out: list[str] = []
        self.kept = 0
        # open containers: [True, key, expecting_key] for an object, [False, index, None] for an array;
        # a key read sets expecting_key False, a comma sets it True again
        self.stack: list[list] = []

    # -- the buffer ----------------------------------------------------------------------------
    def more(self, keep_from: int | None = None) -> bool:
        """Read the next chunk: the buffer keeps what is left from `keep_from` (default: self.pos)."""
        if self.eof:
            return False
        start = self.pos if keep_from is None else keep_from
        if len(self.buf) - start > self.max_kept:
            raise TooLarge(f"a value of more than {self.max_kept:,} characters")
        try:
            text = next(self.texts)
        except StopIteration:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[start:] + text, self.pos - start
        return True

    def emit(self, text: str) -> None:
        self.kept += len(text)
        if self.kept > self.max_kept:
            raise TooLarge(f"more than {self.max_kept:,} characters outside the values it skips")
        self.out.append(text)

    # -- kept text -----------------------------------------------------------------------------
    def path(self) -> list:
        return [frame[1] for frame in self.stack]

    def run(self) -> str:
        while True:
            m = _SPACE.match(self.buf, self.pos)
            if m.end() > self.pos:
                self.emit(m.group())
                self.pos = m.end()
            if self.pos >= len(self.buf):
                if not self.more():
                    return "".join(self.out)
                continue
            c = self.buf[self.pos]
            top = self.stack[-1] if self.stack else None
            at_value = top is None or not top[0] or not top[2]
            if at_value and c in '{["' and self.skip(self.path()):
                self.skip_value()
                self.emit("null")
                continue
            if c in "{[":
                if len(self.stack) >= self.max_depth:
                    raise TooDeep(f"more than {self.max_depth} nested containers")
                self.stack.append([True, None, True] if c == "{" else [False, 0, None])
                self.emit(c)
                self.pos += 1
            elif c in "}]":
                if self.stack:
                    self.stack.pop()
                self.emit(c)
                self.pos += 1
            elif c == ",":
                if top is not None:
                    if top[0]:
                        top[2] = True
                    else:
                        top[1] += 1
                self.emit(c)
                self.pos += 1
            elif c == ":":
                self.emit(c)
                self.pos += 1
            elif c == '"':
                self.keep_string(top)
            else:
                m = _SCALAR.match(self.buf, self.pos)
                if m.end() >= len(self.buf) and not self.eof and self.more():
                    continue                            # a number split across chunks
                self.emit(m.group())
                self.pos = m.end()

    def keep_string(self, top: list | None) -> None:
        """A string, read whole (more chunks if it runs past this one); in an object's key place, the key."""
        m = _STRING.match(self.buf, self.pos)
        while m is None and self.more():
            m = _STRING.match(self.buf, self.pos)
        if m is None:
            self.emit(self.buf[self.pos:])             # unterminated: json_doc names it
            self.pos = len(self.buf)
            return
        token = m.group()
        if top is not None and top[0] and top[2]:
            try:
                top[1] = json.loads(token)             # a key: its value comes next
            except ValueError:
                top[1] = None
            top[2] = False
        self.emit(token)
        self.pos = m.end()

    # -- skipped values ------------------------------------------------------------------------
    def skip_value(self) -> None:
        """Past one string, object or array, any depth, whatever is inside; at the end of the file, stop."""
        depth, in_string = 0, self.buf[self.pos] == '"'
        if in_string:                                      # a string value: to its closing quote only
            self.pos += 1
        while True:
            if self.pos >= len(self.buf) and not self.more():
                return
            if in_string:
                self.pos = _STRING_BODY.match(self.buf, self.pos).end()
                if self.pos >= len(self.buf):
                    continue
                if self.buf[self.pos] == "\\":            # an escape cut by the chunk's end
                    if not self.more():
                        return
                    continue
                self.pos += 1                              # the closing quote
                in_string = False
                if depth == 0:
                    return
                continue
            self.pos = _SKIP_RUN.match(self.buf, self.pos).end()
            if self.pos >= len(self.buf):
                continue
            c = self.buf[self.pos]
            self.pos += 1
            if c == '"':                                   # a string that runs past this chunk
                in_string = True
            elif c in "{[":
                depth += 1
            else:
                depth -= 1
                if depth <= 0:
                    return


def pruned_text(chunks: Iterable[bytes], skip: Callable[[list], bool], max_kept: int, max_depth: int) -> str:
    """The JSON text in `chunks` (UTF-8 bytes) with every string, object or array value whose path
    `skip(path)` accepts replaced by `null`; `path` is the keys and indices down to the value
    (["benchmarks", 3, "requests"]). Malformed JSON comes back malformed, for the parser to name."""
    return _Reader(chunks, skip, max_kept, max_depth).run()
