"""What an OpenAI-compatible server sends back, read as hostile input: bounded and validated.

Nothing here touches the network: the transport (`openai_http`: `Body` bounds the bytes and undoes their
Content-Encoding, `Lines` splits SSE lines) hands over parsed bodies (`body_reply`, `StreamReply`) and the
`usage` record (`usage_counts`).

- Size: a reply may carry at most `ReplyCaps.bytes` (on the wire and unpacked) and `ReplyCaps.chars`
  of text, both derived from the request's `max_tokens`. A reply over either is refused as a whole
  (BadReply): a server that sends more than it was asked for is not cut into a plausible answer.
- Time: the request's deadline is the transport's (`asyncio.timeout_at` around each request), so
  keep-alive comments or an endless stream of tokens cannot hold a request past it.
- Shape: JSON nested deeper than `MAX_DEPTH` is refused before it is parsed; `choices`, the message
  or delta, `content` (a string or null) and `finish_reason` (a string or null) are checked.
- Tool calls (native protocol): `message.tool_calls`, or the `delta.tool_calls` pieces of a stream put
  together by their `index`, each a `function` with a string `name` and `arguments` (JSON text, or an
  object that is written as JSON text), `id` a string or absent; at most `MAX_TOOL_CALLS` calls, and
  their names and arguments count against the reply's characters with its text.
- Token counts: an int in a sane range, else None (unknown), never a string, a float, a bool,
  negative, or more than the request allows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendError
from ..secrets import redact, redact_head
from ..text import safe_text
from ..traces.jsontext import too_deep
from ..types import NativeCall
from .scoring import Row, served_rows

MAX_DEPTH = 32  # an OpenAI reply nests about 5 deep
BASE_BYTES = 64 << 10  # the envelope, role and usage chunks, keep-alive comments
BYTES_PER_TOKEN = 2048  # one streamed chunk (~250 bytes) with a long model name and escaped text
HARD_MAX_BYTES = 32 << 20
CHARS_PER_TOKEN = 32  # no tokenizer's token is longer on average over a whole reply
BASE_CHARS = 4096
ERROR_BODY_BYTES = 64 << 10  # read of a non-200 body, for its message
MESSAGE_CHARS = 300
MAX_PROMPT_TOKENS = 1 << 24  # no served context is longer
TEMPLATE_TOKENS = 1024  # a chat template's own tokens (roles, a default system prompt), per prompt
TOKENS_PER_MESSAGE = 16
MAX_TOOL_CALLS = 64  # tool calls in one reply; a streamed call's index is below it


class BadReply(BackendError):
    """The server answered, but not with a usable reply (shape, size, deadline): the request's episode
    ends with this one-line message; the run goes on."""


class MidStreamError(Exception):
    """The server reported an error inside a stream (vLLM does when its engine stops mid-reply): the
    request is retried like a 5xx, within its retries and deadline."""


@dataclass(frozen=True)
class ReplyCaps:
    """How much one reply may carry; `for_tokens` derives it from the request's `max_tokens`."""

    bytes: int
    chars: int

    @classmethod
    def for_tokens(cls, max_tokens: int) -> ReplyCaps:
        n = max(1, max_tokens)
        return cls(min(HARD_MAX_BYTES, BASE_BYTES + BYTES_PER_TOKEN * n), BASE_CHARS + CHARS_PER_TOKEN * n)

    @staticmethod
    def describe() -> dict[str, int]:
        """The rule, for the trace header."""
        return {"base_bytes": BASE_BYTES, "bytes_per_token": BYTES_PER_TOKEN, "max_bytes": HARD_MAX_BYTES,
                "base_chars": BASE_CHARS, "chars_per_token": CHARS_PER_TOKEN, "max_depth": MAX_DEPTH}


@dataclass(frozen=True)
class Reply:
    """One validated reply: its text, the server's finish_reason (None when it gave none), usage and the
    tool calls the server parsed out of it (native protocol), in their order."""

    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None
    tool_calls: tuple[NativeCall, ...] = ()
    prompt_logprobs: tuple[Row, ...] | None = None  # vLLM's, when the request asked for them (`scoring`)


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), surrogates replaced, registered secrets redacted
    (a server's message may quote the request's Authorization header), cut to `limit` characters."""
    line = " ".join(safe_text(redact_head(text, limit * 4)).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_json(raw: bytes | str, what: str = "reply") -> Any:
    """`raw` parsed, or BadReply when it is not JSON or nests deeper than MAX_DEPTH (checked first)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if too_deep(data, MAX_DEPTH):
        raise BadReply(f"{what} nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, an int of too many digits
        raise BadReply(f"{what} is not JSON: {one_line(repr(data[:4096]), 200)}") from None


def _text_field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReply(f"{where}.{key} is {type(value).__name__}, not a string")
    return safe_text(value)


def _finish(choice: dict[str, Any], where: str) -> str | None:
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise BadReply(f"{where}.finish_reason is {type(reason).__name__}, not a string")
    return reason


def _usage(data: dict[str, Any]) -> dict[str, Any] | None:
    usage = data.get("usage")
    return usage if isinstance(usage, dict) else None


def _choices(data: dict[str, Any], where: str, required: bool) -> list[dict[str, Any]]:
    choices = data.get("choices")
    if choices is None and not required:
        return []
    if not isinstance(choices, list) or (required and not choices):
        raise BadReply(f"{where} has no 'choices' list")
    for i, c in enumerate(choices):
        if not isinstance(c, dict):
            raise BadReply(f"{where}.choices[{i}] is {type(c).__name__}, not an object")
    return choices


def _first(choices: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The choice the harness asked for (index 0; a choice without an index counts as 0)."""
    for c in choices:
        if c.get("index", 0) == 0:
            return c
    return None


def _too_long(caps: ReplyCaps) -> BadReply:
    return BadReply(f"reply text longer than its cap of {caps.chars} characters")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadReply(f"{where} is {type(value).__name__}, not an object")
    return value


def _arguments(value: Any, where: str) -> str:
    """A call's `arguments`: JSON text, or an object (some servers send one) written as JSON text."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return safe_text(json.dumps(value, ensure_ascii=False))
    raise BadReply(f"{where}.arguments is {type(value).__name__}, not a string or an object")


def _call_id(call: dict[str, Any], where: str) -> str | None:
    value = call.get("id")
    if value is not None and not isinstance(value, str):
        raise BadReply(f"{where}.id is {type(value).__name__}, not a string")
    return safe_text(value) if value else None


def _calls_list(value: Any, where: str) -> list[Any]:
    """A `tool_calls` list (None or absent: empty), of at most MAX_TOOL_CALLS entries."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadReply(f"{where}.tool_calls is {type(value).__name__}, not a list")
    if len(value) > MAX_TOOL_CALLS:
        raise BadReply(f"{where} has {len(value)} tool calls, more than {MAX_TOOL_CALLS}")
    return value


def _tool_calls(value: Any, where: str) -> tuple[NativeCall, ...]:
    """A whole message's `tool_calls`, validated."""
    calls = []
    for i, raw in enumerate(_calls_list(value, where)):
        at = f"{where}.tool_calls[{i}]"
        call = _object(raw, at)
        fn = _object(call.get("function"), f"{at}.function")
        name = fn.get("name")
        if not isinstance(name, str):
            raise BadReply(f"{at}.function.name is {type(name).__name__}, not a string")
        calls.append(NativeCall(safe_text(name), _arguments(fn.get("arguments"), f"{at}.function"),
                                _call_id(call, at)))
    return tuple(calls)


def body_reply(data: Any, caps: ReplyCaps) -> Reply:
    """A whole (not streamed) chat completion body, validated."""
    if not isinstance(data, dict):
        raise BadReply(f"reply is {type(data).__name__}, not an object")
    choice = _first(_choices(data, "reply", required=True))
    if choice is None:
        raise BadReply("reply has no choice with index 0")
    message = choice.get("message")
    if message is not None and not isinstance(message, dict):
        raise BadReply(f"reply.choices[0].message is {type(message).__name__}, not an object")
    text = _text_field(message, "content", "message") if message else ""
    text = text or _text_field(choice, "text", "choices[0]")
    if len(text) > caps.chars:
        raise _too_long(caps)
    calls = _tool_calls(message.get("tool_calls"), "message") if message else ()
    if len(text) + sum(len(c.name) + len(c.arguments) for c in calls) > caps.chars:
        raise _too_long(caps)
    try:
        scored = served_rows(choice.get("prompt_logprobs"), caps.chars)
    except ValueError as e:
        raise BadReply(f"reply.choices[0].prompt_logprobs: {e}") from None
    return _redacted(Reply(text, _finish(choice, "choices[0]"), _usage(data), calls, scored))


@dataclass
class _Pieces:
    """One streamed tool call as its pieces arrive: the first name and id it is given, its arguments appended."""

    name: str | None = None
    id: str | None = None
    arguments: list[str] = field(default_factory=list)


class StreamReply:
    """A streamed chat completion, fed one SSE line at a time; `result` once `[DONE]` came."""

    def __init__(self, caps: ReplyCaps) -> None:
        self.caps = caps
        self.parts: list[str] = []
        self.chars = 0
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.calls: dict[int, _Pieces] = {}  # the streamed tool calls, by their index

    def feed(self, line: str) -> None:
        """One line; `done` once it is `[DONE]`. Comments (": ping") and other SSE fields are skipped."""
        if not line.startswith("data:"):
            return
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        chunk = parse_json(payload, "a streamed chunk")
        if not isinstance(chunk, dict):
            raise BadReply(f"a streamed chunk is {type(chunk).__name__}, not an object")
        if chunk.get("error"):
            err = chunk["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise MidStreamError(f"error mid-stream: {one_line(str(msg))}")
        choice = _first(_choices(chunk, "a streamed chunk", required=False))
        if choice is not None:
            delta = choice.get("delta")
            if delta is not None and not isinstance(delta, dict):
                raise BadReply(f"a streamed chunk's delta is {type(delta).__name__}, not an object")
            piece = (_text_field(delta, "content", "delta") if delta else "") or _text_field(choice, "text", "choice")
            self._add_chars(len(piece))
            self.parts.append(piece)
            for raw in _calls_list(delta.get("tool_calls"), "delta") if delta else ():
                self._call_piece(raw)
            self.finish = _finish(choice, "a streamed choice") or self.finish
        self.usage = _usage(chunk) or self.usage

    def _add_chars(self, n: int) -> None:
        self.chars += n
        if self.chars > self.caps.chars:
            raise _too_long(self.caps)

    def _call_piece(self, raw: Any) -> None:
        """One piece of a streamed tool call: the first of its index names the call, each adds arguments."""
        where = "a streamed tool call"
        piece = _object(raw, where)
        index = piece.get("index", 0)  # a piece without an index counts as 0, as a choice does
        if type(index) is not int or not 0 <= index < MAX_TOOL_CALLS:
            raise BadReply(f"{where}'s index {one_line(repr(index), 40)} is not an int in [0, {MAX_TOOL_CALLS})")
        call = self.calls.setdefault(index, _Pieces())
        call.id = call.id or _call_id(piece, where)
        if piece.get("function") is None:
            return
        fn = _object(piece["function"], f"{where}.function")
        name = fn.get("name")
        if name is not None and not isinstance(name, str):
            raise BadReply(f"{where}.function.name is {type(name).__name__}, not a string")
        if name and call.name is None:
            call.name = safe_text(name)
            self._add_chars(len(call.name))
        if fn.get("arguments") is not None:
            arguments = _arguments(fn["arguments"], f"{where}.function")
            self._add_chars(len(arguments))
            call.arguments.append(arguments)

    def result(self) -> Reply:
        """The reply so far; BadReply when a streamed tool call never got its name."""
        calls = []
        for index, call in sorted(self.calls.items()):
            if call.name is None:
                raise BadReply(f"streamed tool call {index} has no function name")
            calls.append(NativeCall(call.name, "".join(call.arguments), call.id))
        return _redacted(Reply("".join(self.parts), self.finish, self.usage, tuple(calls)))


def _redacted(reply: Reply) -> Reply:
    """`reply` with registered secrets redacted from its text and tool calls (a server may echo them)."""
    calls = tuple(NativeCall(redact(c.name), redact(c.arguments), c.id and redact(c.id)) for c in reply.tool_calls)
    return Reply(redact(reply.text), reply.finish_reason, reply.usage, calls, reply.prompt_logprobs)


def _json_bytes(value: Any) -> int:
    """The bytes of `value` as JSON, indented as the most generous chat templates render it (`tojson(indent=4)`)."""
    return len(json.dumps(value, ensure_ascii=False, indent=4, default=str).encode("utf-8", "replace"))


def prompt_token_bound(conversation: Iterable[Mapping[str, Any]], tools: Sequence[Any] = ()) -> int:
    """The most tokens a prompt can be: a token covers at least one byte of text (byte-level BPE), plus
    the chat template's own tokens. Tool calls (names, ids, arguments), tool messages' `tool_call_id` and
    `tools` (the function schemas sent, native protocol) count by the bytes of their JSON."""
    n = total = 0
    for m in conversation:
        n += 1
        content = m.get("content")
        total += len(content.encode("utf-8", "replace")) if isinstance(content, str) else 0
        calls = m.get("tool_calls") or ()
        n += len(calls)
        total += sum(_json_bytes(call) for call in calls)
        call_id = m.get("tool_call_id")
        total += len(call_id.encode("utf-8", "replace")) if isinstance(call_id, str) else 0
    n += len(tools)
    total += _json_bytes(list(tools)) if tools else 0
    return min(MAX_PROMPT_TOKENS, total + TEMPLATE_TOKENS + TOKENS_PER_MESSAGE * n)


def _count(value: Any, most: int) -> int | None:
    """`value` when it is an int (not a bool) in [0, most], else None (unknown)."""
    if type(value) is not int or not 0 <= value <= most:
        return None
    return value


def usage_counts(usage: dict[str, Any] | None, max_tokens: int,
                 prompt_bound: int) -> tuple[int | None, int | None, int | None]:
    """(prompt, completion, cached) tokens from a `usage` record; each None when missing or not sane.

    A server that honours the request sends at most `max_tokens` completion tokens and a prompt of at
    most `prompt_bound`; cached tokens are part of the prompt.
    """
    if not isinstance(usage, dict):
        return None, None, None
    prompt = _count(usage.get("prompt_tokens"), prompt_bound)
    completion = _count(usage.get("completion_tokens"), max_tokens)
    details = usage.get("prompt_tokens_details")  # OpenAI's and vLLM's prefix-cache count
    cached: int | None = 0
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        cached = _count(details.get("cached_tokens"), prompt if prompt is not None else prompt_bound)
    return prompt, completion, cached


def error_message(raw: bytes) -> str:
    """The server's error message on one line (OpenAI's ``{"error": {"message": ...}}`` or the body)."""
    try:
        body = parse_json(raw, "error body")
    except BadReply:
        body = None
    msg: Any = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg is None:
            msg = body.get("detail") or body.get("message")
    if msg is None:
        msg = raw.decode("utf-8", "replace")
    return one_line(msg if isinstance(msg, str) else json.dumps(msg, default=str))  # the body is bounded
