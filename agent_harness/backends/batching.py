"""Gathers concurrent `complete` calls into batches for a backend whose engine takes a whole batch at once.

One worker thread takes all queued requests (a loop's requests of one turn arrive together), groups them by
sampling setting (params without the seed; each row keeps its own) and runs each group as one call of the
batch function. Futures are resolved on their callers' own loops, so callers on different loops share it.
Requests that arrive while a batch runs go in the next one; before it starts, the worker waits until as
many rows are queued as the last batch had, for at most `gather` times that batch's run time: started for
the first caller back from its tool, a batch would run alone with the rest queued behind, turn after turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import BackendError
from ..types import Completion, Conversation, GenParams, RequestMeta

# (conversations, params with seed=None, one seed per row, one meta per row) -> one Completion per row
BatchFn = Callable[[list[Conversation], GenParams, list[int | None], list[RequestMeta | None]], list[Completion]]


@dataclass
class _Request:
    conversation: Conversation
    params: GenParams
    meta: RequestMeta | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]

    def resolve(self, outcome: Completion | Exception) -> None:
        """Hand the outcome to the caller's loop; the first outcome wins, a caller that is gone is skipped."""
        def settle() -> None:
            if self.future.done():  # answered already, or the caller gave up
                pass
            elif isinstance(outcome, Exception):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)

        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits for this reply
            self.loop.call_soon_threadsafe(settle)


class Batcher:
    """`await batcher.submit(conversation, params, meta)` from any loop and thread; `close()` at the end."""

    def __init__(self, run: BatchFn, name: str = "batcher", gather: float = 0.25) -> None:
        self._run, self._name, self.gather = run, name, gather
        self._queue: queue.SimpleQueue[list[_Request] | None] = queue.SimpleQueue()
        self._staged: dict[asyncio.AbstractEventLoop, list[_Request]] = {}  # this turn's requests, per loop
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._expect, self._last_s = 1, 0.0  # the last batch's rows and run time
        self.batches = self.rows = 0

    async def submit(self, conversation: Conversation, params: GenParams,
                     meta: RequestMeta | None = None) -> Completion:
        loop = asyncio.get_running_loop()
        req = _Request(conversation, params, meta, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise BackendError(f"{self._name}: the backend is closed")
            if self._thread is None:  # started by the first request: a backend never asked keeps no thread
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            staged = self._staged.setdefault(loop, [])
            staged.append(req)
            if len(staged) == 1:
                loop.call_soon(self._flush, loop)  # runs once every request of this turn of the loop is staged
        return await req.future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            reqs = self._staged.pop(loop)
            if not self._closed:
                return self._queue.put(reqs)
        self._fail(reqs)

    def stats(self) -> dict[str, float]:
        return {"batches": self.batches, "mean_batch": self.rows / self.batches if self.batches else 0.0}

    def close(self) -> None:
        """Stop the worker: queued requests fail at once; a batch already running finishes first."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._fail(self._drain())
        self._queue.put(None)
        if thread is not None:
            thread.join()

    def _drain(self) -> list[_Request]:
        reqs: list[_Request] = []
        with contextlib.suppress(queue.Empty):
            while True:
                reqs += self._queue.get_nowait() or []
        return reqs

    def _fail(self, reqs: list[_Request]) -> None:
        for r in reqs:
            r.resolve(BackendError(f"{self._name}: the backend stopped before this request was answered"))

    def _work(self) -> None:
        reqs: list[_Request] | None = None
        try:
            while (reqs := self._take()) is not None:
                groups: dict[GenParams, list[_Request]] = {}
                for r in reqs:
                    groups.setdefault(replace(r.params, seed=None), []).append(r)
                t0 = time.perf_counter()
                for params, group in groups.items():
                    self._run_group(params, [r for r in group if not r.future.done()])  # skip callers gone
                self._expect, self._last_s = len(reqs), time.perf_counter() - t0
        finally:  # closed, or a fault that ends the worker: nothing is left waiting
            with self._lock:
                self._closed = True
            self._fail([*(reqs or []), *self._drain()])

    def _take(self) -> list[_Request] | None:
        """The next batch's requests (waits for the first, then gathers); None once closed."""
        reqs = self._queue.get()
        deadline = time.monotonic() + self.gather * self._last_s
        while reqs is not None:
            wait = deadline - time.monotonic()
            try:
                more = len(reqs) < self._expect and wait > 0
                item = self._queue.get(timeout=wait) if more else self._queue.get_nowait()
            except queue.Empty:
                return reqs
            if item is None:
                self._fail(reqs)
            reqs = None if item is None else reqs + item
        return None

    def _run_group(self, params: GenParams, group: list[_Request]) -> None:
        if not group:
            return
        self.batches, self.rows = self.batches + 1, self.rows + len(group)
        outcomes: list[Completion | Exception]
        try:
            outcomes = list(self._run([r.conversation for r in group], params, [r.params.seed for r in group],
                                      [r.meta for r in group]))
            if len(outcomes) != len(group):
                raise BackendError(f"{self._name}: {len(outcomes)} completions for a batch of {len(group)} requests")
        except Exception as e:  # this batch's callers get the error; the next batch runs as usual
            outcomes = [e] * len(group)
        for r, outcome in zip(group, outcomes, strict=True):
            r.resolve(outcome)
