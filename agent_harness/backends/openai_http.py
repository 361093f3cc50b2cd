"""The openai backend's transport: one `httpx.AsyncClient` per event loop, and reading one response.

Why httpx and not the official `openai` SDK (3.57, measured against a loopback server sending 200 MB):
the SDK reads a non-2xx body whole before it raises (`await err.response.aread()`, also under
`with_streaming_response`: 665 MiB peak RSS for a 200 MB HTTP 500 body, so a hostile error page can
exhaust the machine), and its stream parser buffered one 200 MB SSE line (865 MiB) and then ended
without an error. Neither its reply path nor its error path could be used, so it would only build a
URL and a JSON body here, on top of a second HTTP stack (`httpx2`) beside the project's httpx. Read
with httpx's `aiter_raw` through `Body` (below) the same replies peak at 37 MiB.

`complete` may run on different event loops over a backend's life (`complete_all` runs one loop per
call, the runner its own `LoopThread`); an AsyncClient's connection pool belongs to one loop, so each
loop gets its own client and in-flight slots (`LoopClients`). A keeper task per loop closes its client
when the loop cancels its tasks on the way out (asyncio.run and LoopThread both do).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable
from .openai_reply import BadReply, Reply, ReplyCaps, StreamReply, body_reply, one_line, parse_json

if TYPE_CHECKING:
    import httpx

CLOSE_WAIT_S = 5.0  # close() waits this long for a running loop to close its client


class StreamCut(Exception):
    """A streamed reply that ended before its last chunk (the server went away mid-reply): retried."""


@dataclass
class LoopClient:
    """What one event loop uses: its client, its in-flight slots and the task that closes the client."""

    client: httpx.AsyncClient
    slots: asyncio.Semaphore
    keeper: asyncio.Task[None]


async def _keep(client: httpx.AsyncClient) -> None:
    """Lives as long as its loop; closes the client when cancelled (the loop ending, or `close`)."""
    try:
        await asyncio.get_running_loop().create_future()  # never resolved
    finally:
        await client.aclose()


class LoopClients:
    """One client per running event loop, made on first use; `slots` requests in flight per loop."""

    def __init__(self, timeout_s: float, slots: int, name: str) -> None:
        self.timeout_s, self.slots, self.name = timeout_s, slots, name
        self._lock = threading.Lock()
        self._by_loop: dict[asyncio.AbstractEventLoop, LoopClient] = {}
        self._closed = False
        self._ssl: Any = None  # one TLS context for every loop's client: making one costs ~20 ms of CPU

    def get(self) -> LoopClient:
        import httpx

        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"openai backend for '{self.name}' is closed")
            for old in [lp for lp in self._by_loop if lp.is_closed()]:
                del self._by_loop[old]  # its keeper closed the client when that loop ended
            lc = self._by_loop.get(loop)
            if lc is None:
                n = self.slots
                self._ssl = self._ssl or httpx.create_ssl_context()
                client = httpx.AsyncClient(timeout=self.timeout_s, verify=self._ssl,
                                           limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
                lc = LoopClient(client, asyncio.Semaphore(n), loop.create_task(_keep(client)))
                self._by_loop[loop] = lc
            return lc

    def close(self) -> None:
        """Close every client whose loop is still open; never waits more than CLOSE_WAIT_S per loop."""
        with self._lock:
            self._closed = True
            held, self._by_loop = self._by_loop, {}
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for loop, lc in held.items():
            if loop.is_closed():
                continue
            if loop is here or not loop.is_running():  # cannot wait on it here: it closes when it next runs
                loop.call_soon_threadsafe(lc.keeper.cancel)
                continue
            with contextlib.suppress(Exception):  # a loop that does not answer: leave its client to it
                asyncio.run_coroutine_threadsafe(_cancel(lc.keeper), loop).result(CLOSE_WAIT_S)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def retry_after(resp: httpx.Response) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), if any."""
    raw = resp.headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def read_reply(resp: httpx.Response, caps: ReplyCaps) -> Reply:
    """A 200 reply, streamed (SSE) or whole JSON, read within `caps`; BadReply if it is not a usable
    completion, StreamCut if a stream ended early, MidStreamError if the server reported an error in it."""
    declared = resp.headers.get("content-length", "").strip()
    if declared.isascii() and declared.isdigit() and (len(declared) > 15 or int(declared) > caps.bytes):
        raise BadReply(f"reply of {one_line(declared, 20)} bytes is larger than its cap of {caps.bytes} bytes")
    body = Body(resp.headers.get("content-encoding", ""), caps.bytes)
    if "event-stream" not in resp.headers.get("content-type", ""):
        whole = bytearray()
        async for raw in resp.aiter_raw():
            for piece in body.feed(raw):
                whole += piece
        return body_reply(parse_json(bytes(whole)), caps)
    stream, split = StreamReply(caps), Lines()
    async for raw in resp.aiter_raw():
        for piece in body.feed(raw):
            for line in split.feed(piece):
                stream.feed(line)
                if stream.done:
                    return stream.result()
    for line in split.end():
        stream.feed(line)
    if not stream.done and stream.finish is None:
        raise StreamCut("the stream ended before its last chunk")
    return stream.result()


async def read_head(resp: httpx.Response, limit: int) -> bytes:
    """The first `limit` bytes of a body (an error reply, read for its message); the rest is not read."""
    buf = bytearray()
    async for raw in resp.aiter_raw():
        buf += raw[: limit - len(buf)]
        if len(buf) >= limit:
            break
    return bytes(buf)


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
