"""Reaching an async backend from plain code: a loop thread for the runner, `complete_all` for scripts.

Strategies are plain loops that run in worker threads (every tool is blocking I/O); the backends are
async and batch the requests that are in flight together. `LoopThread` runs one event loop in a
thread of its own for a model's whole run; `call` hands it a coroutine from any other thread and
waits for the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from ..types import Backend, Completion, Conversation, GenParams, RequestMeta

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread: `with LoopThread() as loop: loop.call(coro)`."""

    def __init__(self, name: str = "backend-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule `coro` on the loop; the returned future can be waited on (or cancelled) from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def __exit__(self, *exc: object) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):  # a task that will not end: stop the loop anyway
                asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


def complete_all(backend: Backend, conversations: Sequence[Conversation], params: GenParams,
                 meta: Sequence[RequestMeta | None] | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[Completion]:
    """Send every conversation at once and wait for all (tests, benchmarks, scripts): the backend
    batches them as it batches a run's concurrent episodes. `seeds`: one request seed per row."""
    from dataclasses import replace

    metas = list(meta) if meta is not None else [None] * len(conversations)
    rows = [params if seeds is None else replace(params, seed=s) for s in (seeds or [None] * len(conversations))]
    if len(metas) != len(conversations) or len(rows) != len(conversations):
        raise ValueError(f"{len(conversations)} conversations, {len(metas)} metas, {len(rows)} seeds")

    async def gather() -> list[Completion]:
        return list(await asyncio.gather(*(backend.complete(c, p, m)
                                           for c, p, m in zip(conversations, rows, metas, strict=True))))

    return asyncio.run(gather())
