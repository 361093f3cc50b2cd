"""Several servers behind one `openai` model: pick the least busy live one, take failing ones out.

An endpoint is taken out (`down_until`) when a connection to it fails (refused, reset, the server
died mid-reply), when `max_fails` retryable failures (5xx, 429, timeouts) come in a row, or for
the time a `Retry-After` header asks. It comes back after an exponential backoff with jitter; the
first request after that is its probe (one at a time), and a success clears its record.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["ok", "soft", "hard"]


@dataclass
class Endpoint:
    """One server and its health record (guarded by the pool's lock)."""

    base_url: str
    url: str
    headers: dict[str, str]
    in_flight: int = 0
    served: int = 0
    fails: int = 0  # retryable failures in a row
    downs: int = 0  # take-outs in a row (the backoff exponent)
    down_until: float = 0.0
    probing: bool = False
    stats: dict[str, int] = field(default_factory=lambda: {"ok": 0, "soft": 0, "hard": 0, "taken_out": 0})


class EndpointPool:
    """Choice of endpoint per attempt; `acquire` must be paired with `release` (or `cancel`). Thread-safe
    and never waits: one backend may serve event loops in several threads."""

    def __init__(self, endpoints: list[Endpoint], backoff_s: float, max_backoff_s: float, max_fails: int) -> None:
        self.endpoints = endpoints
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_fails = max(1, max_fails)
        self._lock = threading.Lock()
        self._rng = random.Random()

    def __len__(self) -> int:
        return len(self.endpoints)

    def _usable(self, e: Endpoint, now: float) -> bool:
        return e.down_until <= now and not (e.probing and e.downs > 0)

    def acquire(self) -> tuple[Endpoint, float]:
        """(endpoint, seconds to wait before using it): the live one with the fewest in flight, else the
        one back soonest (the wait is until then)."""
        with self._lock:
            now = time.monotonic()
            live = [e for e in self.endpoints if self._usable(e, now)]
            if live:
                e, wait = min(live, key=lambda e: (e.in_flight, e.served)), 0.0
            else:
                e = min(self.endpoints, key=lambda e: (max(e.down_until, now + (1.0 if e.probing else 0.0)),
                                                       e.in_flight))
                wait = max(0.0, e.down_until - now)
            if e.downs > 0:
                e.probing = True
            e.in_flight += 1
            return e, wait

    def release(self, e: Endpoint, outcome: Outcome, retry_after: float | None = None) -> None:
        """Record one attempt's outcome; take the endpoint out when it has earned it."""
        with self._lock:
            e.in_flight -= 1
            e.stats[outcome] += 1
            now = time.monotonic()
            was_probe, e.probing = e.probing, False
            if outcome == "ok":
                e.served += 1
                e.fails = e.downs = 0
                return
            if retry_after is not None:
                e.down_until = max(e.down_until, now + min(retry_after, self.max_backoff_s * 5))
            if outcome == "soft":
                e.fails += 1
                if e.fails < self.max_fails and not was_probe:
                    return
            e.fails = 0
            e.downs += 1
            e.stats["taken_out"] += 1
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (e.downs - 1)) * self._rng.uniform(0.5, 1.5)
            e.down_until = max(e.down_until, now + delay)

    def cancel(self, e: Endpoint) -> None:
        """Give back an endpoint that was acquired but not used (no attempt, nothing recorded)."""
        with self._lock:
            e.in_flight -= 1
            e.probing = False

    def snapshot(self) -> list[dict[str, object]]:
        """Per-endpoint counters (for logs and tests)."""
        with self._lock:
            now = time.monotonic()
            return [{"base_url": e.base_url, "in_flight": e.in_flight, "served": e.served, "down": e.down_until > now,
                     **e.stats} for e in self.endpoints]

    def totals(self) -> dict[str, int]:
        """Attempts by outcome and take-outs, summed over the endpoints."""
        with self._lock:
            return {k: sum(e.stats[k] for e in self.endpoints) for k in ("ok", "soft", "hard", "taken_out")}
