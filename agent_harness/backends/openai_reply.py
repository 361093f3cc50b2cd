"""What an OpenAI-compatible server sends back, read as hostile input: bounded and validated.

Nothing here touches the network: the transport feeds the body's bytes as they arrive to `Body`
(size caps, Content-Encoding undone in bounded pieces) and `Lines` (SSE lines), and hands over parsed
bodies (`body_reply`, `StreamReply`) and the `usage` record (`usage_counts`).

- Size: a reply may carry at most `ReplyCaps.bytes` (on the wire and unpacked) and `ReplyCaps.chars`
  of text, both derived from the request's `max_tokens`. A reply over either is refused as a whole
  (BadReply): a server that sends more than it was asked for is not cut into a plausible answer.
- Time: the request's deadline is the transport's (`asyncio.timeout_at` around each request), so
  keep-alive comments or an endless stream of tokens cannot hold a request past it.
- Shape: JSON nested deeper than `MAX_DEPTH` is refused before it is parsed; `choices`, the message
  or delta, `content` (a string or null) and `finish_reason` (a string or null) are checked.
- Token counts: an int in a sane range, else None (unknown), never a string, a float, a bool,
  negative, or more than the request allows.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BackendError
from ..text import safe_text
from ..trace_io import too_deep

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
    """One validated reply: its text, the server's finish_reason (None when it gave none) and usage."""

    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), surrogates replaced, cut to `limit` characters."""
    line = " ".join(safe_text(text[: limit * 4]).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Lines:
    """Splits a byte stream into lines (LF or CRLF endings), decoded as UTF-8, as its pieces arrive;
    linear in the bytes, and the buffer never holds more than was fed (bound that with `Body`)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> Iterator[str]:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self.buf += chunk[start:end]
            yield _line(self.buf)
            self.buf.clear()
            start = end + 1
        self.buf += chunk[start:]

    def end(self) -> Iterator[str]:
        """The last line, when the stream did not end with a newline."""
        if self.buf:
            yield _line(self.buf)
            self.buf.clear()


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream, however its bytes are cut into chunks."""
    split = Lines()
    for chunk in chunks:
        yield from split.feed(chunk)
    yield from split.end()


def _line(raw: bytearray) -> str:
    return (raw[:-1] if raw.endswith(b"\r") else raw).decode("utf-8", "replace")


def parse_json(raw: bytes | str, what: str = "reply") -> Any:
    """`raw` parsed, or BadReply when it is not JSON or nests deeper than MAX_DEPTH (checked first)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if too_deep(data, MAX_DEPTH):
        raise BadReply(f"{what} nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, an int of too many digits
        raise BadReply(f"{what} is not JSON: {one_line(repr(data[:200]), 200)}") from None


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
        raise BadReply(f"reply text longer than its cap of {caps.chars} characters")
    return Reply(text, _finish(choice, "choices[0]"), _usage(data))


class StreamReply:
    """A streamed chat completion, fed one SSE line at a time; `result` once `[DONE]` came."""

    def __init__(self, caps: ReplyCaps) -> None:
        self.caps = caps
        self.parts: list[str] = []
        self.chars = 0
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False

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
            self.chars += len(piece)
            if self.chars > self.caps.chars:
                raise BadReply(f"reply text longer than its cap of {self.caps.chars} characters")
            self.parts.append(piece)
            self.finish = _finish(choice, "a streamed choice") or self.finish
        self.usage = _usage(chunk) or self.usage

    def result(self) -> Reply:
        return Reply("".join(self.parts), self.finish, self.usage)


def prompt_token_bound(conversation: Iterable[Mapping[str, Any]]) -> int:
    """The most tokens a prompt can be: a token covers at least one byte of text (byte-level BPE), plus
    the chat template's own tokens."""
    n = total = 0
    for m in conversation:
        n += 1
        content = m.get("content")
        total += len(content.encode("utf-8", "replace")) if isinstance(content, str) else 0
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


class Body:
    """A reply body's bytes as they arrive (`feed` each raw chunk): at most `limit` bytes on the wire and
    `limit` unpacked, its Content-Encoding (gzip or deflate) undone in pieces of at most `limit` + 1
    bytes, so a small compressed reply cannot unpack into a huge one in memory."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.limit = limit
        self.wire = self.size = 0
        self.enc = encoding.strip().lower()
        if self.enc not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise BadReply(f"reply encoded as {one_line(self.enc, 40)!r}, which the harness does not read")
        # zlib or gzip header, detected
        self.unpack = zlib.decompressobj(wbits=47) if self.enc not in ("", "identity") else None

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The unpacked pieces of `chunk`; BadReply once the body is over its cap or its encoding broken."""
        self.wire += len(chunk)
        if self.wire > self.limit:
            raise BadReply(f"reply larger than its cap of {self.limit} bytes")
        if self.unpack is None:
            self.size = self.wire
            yield chunk
            return
        try:
            data = chunk
            while data:
                piece = self.unpack.decompress(data, self.limit + 1)
                self.size += len(piece)
                if self.size > self.limit:
                    raise BadReply(f"reply larger than its cap of {self.limit} bytes")
                yield piece
                data = self.unpack.unconsumed_tail
        except zlib.error as e:
            raise BadReply(f"reply's {self.enc} encoding is broken: {one_line(str(e), 100)}") from None


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
    return one_line(msg if isinstance(msg, str) else json.dumps(msg, default=str)[: MESSAGE_CHARS * 4])
