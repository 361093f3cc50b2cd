"""Asking the model several things at once: `ask_all` sends a turn's requests together when the runner's
`Ask` can (`Asker.many`: the backend batches them, as it batches concurrent episodes) and one after the
other when it cannot (a plain function: tests, scripts)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UnusableReply
from ..types import Completion, Conversation, GenParams, RequestMeta

if TYPE_CHECKING:
    from ..types import Backend
    from .episode import Ask

Request = tuple[Conversation, GenParams, RequestMeta]


@dataclass(frozen=True)
class Asker:
    """An `Ask` that can also send several requests at once. `many` returns one reply per request, in order;
    a reply the server could not make usable comes back with its `error` set (the caller decides), where a
    single ask raises UnusableReply."""

    many: Callable[[Sequence[Request]], list[Completion]]

    def __call__(self, conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
        [reply] = self.many([(conversation, params, meta)])
        if reply.error is not None:
            raise UnusableReply(reply.error)
        return reply


def ask_all(ask: Ask, requests: Sequence[Request]) -> list[Completion]:
    """One reply per request: all sent at once through `ask.many` when it has one, else one at a time (a
    reply with `error` set then raises UnusableReply, as a single ask does)."""
    many = getattr(ask, "many", None)
    if callable(many):
        replies = list(many(requests))
        if len(replies) != len(requests):
            raise UnusableReply(f"{len(replies)} replies to {len(requests)} requests")
        return replies
    return [ask(*r) for r in requests]


def backend_asker(backend: Backend) -> Asker:
    """An `Asker` straight to `backend`, outside a run (tests, scripts): each call's requests gathered at once."""
    async def gather(requests: Sequence[Request]) -> list[Completion]:
        return list(await asyncio.gather(*(backend.complete(c, p, m) for c, p, m in requests)))

    return Asker(lambda requests: asyncio.run(gather(requests)))
