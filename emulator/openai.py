"""The OpenAI-compatible surface of vLLM 0.29, as the emulator answers it: a request body read
into an `Ask`, the response and stream-chunk shapes, and the error object.

Shapes follow vLLM's serving code (`entrypoints/openai/completion/serving.py` and
`chat_completion/serving.py`): a stream chunk per engine output, the last one carrying
`finish_reason`, a usage chunk with no choices when `stream_options.include_usage` is set, then
`data: [DONE]`; errors are `{"error": {"message", "type", "param", "code"}}` with the HTTP status
as `code`. Defaults are vLLM's: a completion's `max_tokens` is 16, a chat's is whatever the
context leaves.

There is no model: every token's text is TOKEN_TEXT, and every answer runs to its `max_tokens`
(`finish_reason: "length"`) whether or not `ignore_eos` is set, since nothing could end it early.
A prompt's tokens are its token-id list's length when `prompt` is one, else one token per
CHARS_PER_TOKEN characters (rounded up); a chat's are its messages' text counted so, plus
CHAT_TOKENS_PER_MESSAGE for each message's template tokens.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass

TOKEN_TEXT = " tok"
CHARS_PER_TOKEN = 4             # the usual rule of thumb for English text under BPE tokenizers
CHAT_TOKENS_PER_MESSAGE = 4     # a chat template's role header and end-of-turn tokens, about
COMPLETION_DEFAULT_MAX_TOKENS = 16      # vLLM's CompletionRequest default
JSON_NULL = "null"


class ApiError(Exception):
    """An answer other than 200: status, message, and the offending parameter when there is one."""

    TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed", 408: "RequestTimeout",
             411: "LengthRequired", 413: "PayloadTooLarge", 431: "RequestHeaderFieldsTooLarge",
             503: "ServiceUnavailableError"}

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def payload(self) -> dict:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "InternalServerError"),
                          "param": self.param, "code": self.status}}

    def body(self) -> bytes:
        return json.dumps(self.payload()).encode()


@dataclass(frozen=True)
class Ask:
    """What a request asks of the engine, read and checked."""
    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> dict:
    """The body as a JSON object, or a 400: not UTF-8, not JSON (NaN and Infinity included), nested
    past the parser's recursion limit, an integer too long to convert, or not an object."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:200]
        raise ApiError(400, f"the body is not valid JSON: {reason}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(body).__name__}")
    return body


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def completion_prompt_tokens(body: dict) -> int:
    """`prompt`: a string, or a list of token ids (non-negative integers); one prompt a request."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return _text_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, "the emulator serves one prompt a request: send a string or one token-id list",
                       "prompt")
    raise ApiError(400, "prompt: a non-empty string or a non-empty list of non-negative token ids is required",
                   "prompt")


def chat_prompt_tokens(body: dict) -> int:
    """`messages`: a non-empty list of {role, content}, content a string, null or a list of text parts."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: a non-empty list of messages is required", "messages")
    chars = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}]: an object with a string 'role' is required", "messages")
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise ApiError(400, f"messages[{i}].content: the emulator serves text parts only "
                                        "({'type': 'text', 'text': ...})", "messages")
                chars += len(part["text"])
        elif content is not None:
            raise ApiError(400, f"messages[{i}].content: a string, a list of text parts or null", "messages")
    return math.ceil(chars / CHARS_PER_TOKEN) + CHAT_TOKENS_PER_MESSAGE * len(messages)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"{name}: must be true or false (got {json.dumps(value)[:40]})", name)
    return value


def _stream_options(body: dict, stream: bool) -> bool:
    """Whether a final usage chunk is wanted; vLLM refuses stream_options without stream."""
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options: must be an object", "stream_options")
    if not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    return _flag(options, "include_usage")


def _requested_max_tokens(body: dict, chat: bool) -> int | None:
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if not _is_int(value):
            raise ApiError(400, f"{name}: must be an integer (got {json.dumps(value)[:40]})", name)
        if value < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {value}.", name)
        return value
    return None if chat else COMPLETION_DEFAULT_MAX_TOKENS


def read_ask(body: dict, chat: bool, served_model: str, max_model_len: int) -> Ask:
    """The request checked as vLLM checks it: the model's name, one choice, the context limit."""
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(404, f"The model `{str(model)[:200]}` does not exist.", "model")
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise ApiError(400, "n: the emulator serves one choice a request (n = 1)", "n")
    _flag(body, "ignore_eos")           # honoured trivially: every answer runs to max_tokens
    stream = _flag(body, "stream")
    include_usage = _stream_options(body, stream)
    prompt = chat_prompt_tokens(body) if chat else completion_prompt_tokens(body)
    if prompt >= max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, your request "
                            f"has {prompt} input tokens. Please reduce the length of the input messages.",
                       "messages" if chat else "prompt")
    wanted = _requested_max_tokens(body, chat)
    max_tokens = max_model_len - prompt if wanted is None else wanted
    if prompt + max_tokens > max_model_len:
        raise ApiError(400, f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                            f"maximum context length is {max_model_len} tokens and your request has {prompt} input "
                            f"tokens ({max_tokens} > {max_model_len} - {prompt}).", "max_tokens")
    return Ask(chat, prompt, max_tokens, stream, include_usage)


class Shapes:
    """The bodies and stream events of one answer. The per-token chunk is the hot path of a
    stream (one per engine step per sequence), so its JSON is put together from parts made once."""

    def __init__(self, ask: Ask, model: str):
        self.ask = ask
        self.id = f"{'chatcmpl' if ask.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if ask.chat else "text_completion"
        head = json.dumps({"id": self.id, "object": self.object, "created": self.created, "model": model})
        self._head = head[:-1]                   # the header fields, the closing brace left off
        self._model = model
        self._open = self._head + (', "choices": [{"index": 0, "delta": {"content": ' if ask.chat
                                   else ', "choices": [{"index": 0, "text": ')

    def tokens(self, n: int, last: bool) -> bytes:
        """The event carrying n new tokens; the last one says why the answer ended."""
        text = json.dumps(TOKEN_TEXT * n)
        finish = '"length", "stop_reason": null' if last else JSON_NULL
        close = "}, " if self.ask.chat else ", "
        return (f"data: {self._open}{text}{close}\"logprobs\": null, \"finish_reason\": {finish}}}]}}\n\n").encode()

    def role(self) -> bytes:
        """A chat stream's first event: the assistant's role, sent with the first token as vLLM does."""
        return (f'data: {self._head}, "choices": [{{"index": 0, "delta": {{"role": "assistant", "content": ""}}, '
                f'"logprobs": null, "finish_reason": null}}]}}\n\n').encode()

    def usage_event(self, completion: int) -> bytes:
        return f'data: {self._head}, "choices": [], "usage": {json.dumps(self.usage(completion))}}}\n\n'.encode()

    def usage(self, completion: int) -> dict:
        prompt = self.ask.prompt_tokens
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}

    def response(self, completion: int) -> bytes:
        """The whole answer, not streamed."""
        text = TOKEN_TEXT * completion
        if self.ask.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                      "logprobs": None, "finish_reason": "length", "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None,
                      "prompt_logprobs": None}
        return json.dumps({"id": self.id, "object": "chat.completion" if self.ask.chat else "text_completion",
                           "created": self.created, "model": self._model, "choices": [choice],
                           "usage": {**self.usage(completion), "prompt_tokens_details": None}}).encode()


DONE_EVENT = b"data: [DONE]\n\n"


def error_event(error: ApiError) -> bytes:
    """A stream's error, as vLLM sends one mid-stream (then `data: [DONE]`)."""
    return b"data: " + error.body() + b"\n\n"


def models_body(model: str, root: str, max_model_len: int, created: int) -> bytes:
    """GET /v1/models: the one served model, with vLLM's fields."""
    permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": created,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                  "organization": "*", "group": None, "is_blocking": False}
    card = {"id": model, "object": "model", "created": created, "owned_by": "vllm", "root": root, "parent": None,
            "max_model_len": max_model_len, "permission": [permission]}
    return json.dumps({"object": "list", "data": [card]}).encode()
