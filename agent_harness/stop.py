"""Ctrl-C and SIGTERM: a stop request that is acted on at any moment and cannot be lost.

The handler raises `StopRequested` in the main thread wherever it is (an engine loading, a batch
generating, a wait for workers) and records the request; `check()` raises it again at the runner's
checkpoints, in case library code swallowed the first one. Further signals while the stop unwinds
are ignored, so the clean-up they would cut short (engine processes, trace files) completes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import StopRequested

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested: int | None = None


def _on_signal(signum: int, frame: object) -> None:
    global _requested
    if _requested is not None:
        return  # already stopping
    _requested = signum
    raise StopRequested(signum)


def requested() -> int | None:
    """The signal that asked the run to stop, if one did."""
    return _requested


def check() -> None:
    """Raise `StopRequested` when a stop was requested (a checkpoint between units of work)."""
    if _requested is not None:
        raise StopRequested(_requested)


@contextmanager
def handling_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `StopRequested` inside the block (main thread only; elsewhere a no-op);
    the previous handlers come back after it."""
    global _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested = None
    saved: list[tuple[int, Callable[[int, Any], Any] | int | None]] = [
        (s, signal.signal(s, _on_signal)) for s in SIGNALS]
    try:
        yield
    finally:
        for s, handler in saved:
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
