"""Backend registry: names map to import paths; heavy libraries load only when used.

`load_backend(spec)` builds the backend a ModelSpec asks for and falls back along
`FALLBACKS` (vllm → transformers) when it cannot start, recording why in `backend.info`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, MissingExtraError
from ..types import Backend, BackendInfo

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)

# name -> "module:factory"; a factory takes (spec) and returns a Backend.
BACKENDS: dict[str, str] = {
    "transformers": "agent_harness.backends.hf:create",
    "vllm": "agent_harness.backends.vllm_backend:create",
    "openai": "agent_harness.backends.openai_backend:create",
    "scripted": "agent_harness.backends.scripted:create",
}
FALLBACKS: dict[str, str] = {"vllm": "transformers"}


def _factory(name: str) -> Callable[[ModelSpec], Backend]:
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def load_backend(spec: ModelSpec, force: str | None = None) -> Backend:
    """Create the backend for `spec` (or `force`), following the fallback chain.

    Raises BackendUnavailable / MissingExtraError only when the last backend in the
    chain cannot start either; the message then lists every attempt.
    """
    requested = force or spec.backend
    name: str | None = requested
    reasons: list[str] = []
    while name is not None:
        try:
            backend = _factory(name)(spec)
        except (ImportError, BackendUnavailable, MissingExtraError, RuntimeError, OSError, ValueError) as e:
            reason = f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            nxt = FALLBACKS.get(name)
            if nxt is None:
                if not reasons:
                    raise
                raise BackendUnavailable("; ".join([*reasons, reason])) from e
            log.warning("backend %s unavailable for %s (%s); falling back to %s", name, spec.name, e, nxt)
            reasons.append(reason)
            name = nxt
            continue
        info = backend.info
        backend.info = BackendInfo(
            requested=requested,
            used=name,
            fallback_reason="; ".join(reasons) or None,
            device=info.device,
            details=info.details,
        )
        return backend
    raise AssertionError("unreachable")


def resolve_backend_name(spec: ModelSpec) -> tuple[str, str | None]:
    """The backend `load_backend` would try first to succeed, without loading anything."""
    import importlib.util

    name = spec.backend
    if name == "vllm" and importlib.util.find_spec("vllm") is None:
        return "transformers", "vllm not installed"
    if (name in ("vllm", "transformers") and spec.offline is None
            and importlib.util.find_spec("torch") is None):
        return name, "torch not installed"
    return name, None
