"""Stop strings, cut the same way by every backend: a reply ends before the earliest stop string in it."""

from __future__ import annotations

from ..types import GenParams


def stop_strings(params: GenParams) -> tuple[str, ...]:
    """The request's stop strings, empty ones left out (an empty string would match everywhere)."""
    return tuple(s for s in params.stop if s)


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str | None:
    """`text` before the earliest stop string it holds; None when it holds none."""
    cut = min((p for p in (text.find(s) for s in stops) if p >= 0), default=-1)
    return text[:cut] if cut >= 0 else None
