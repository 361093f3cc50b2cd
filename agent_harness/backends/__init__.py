"""Backend registry: names map to import paths; heavy libraries load only when used.

`load_backend(spec)` builds the backend a ModelSpec asks for and falls back along
`FALLBACKS` (vllm → transformers) when it cannot start, recording why in `backend.info`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import stop
from ..errors import BackendError, BackendUnavailable, HarnessError, MissingExtraError
from ..types import Backend, BackendInfo

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)

# name -> "module:factory"; a factory (a backend class, or a function) takes (spec) and returns a Backend.
BACKENDS: dict[str, str] = {
    "transformers": "agent_harness.backends.hf:HFBackend",
    "vllm": "agent_harness.backends.vllm_backend:VLLMBackend",
    "openai": "agent_harness.backends.openai_backend:OpenAIBackend",
    "scripted": "agent_harness.backends.scripted:create",
}
FALLBACKS: dict[str, str] = {"vllm": "transformers"}
# What "cannot start here" looks like: only these move on to the fallback; anything else is a bug to see.
CANNOT_START = (ImportError, BackendUnavailable, MissingExtraError)


def _factory(name: str) -> Callable[[ModelSpec], Backend]:
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def load_backend(spec: ModelSpec, force: str | None = None) -> Backend:
    """Create the backend for `spec` (or `force`), following the fallback chain.

    Only `CANNOT_START` errors fall back. BackendUnavailable / MissingExtraError come out when the
    last backend in the chain cannot start either (the message then lists every attempt); a
    ConfigError comes out as it is; any other exception becomes a one-line BackendError.
    """
    requested = force or spec.backend
    name: str | None = requested
    reasons: list[str] = []
    while name is not None:
        try:
            backend = _factory(name)(spec)
        except CANNOT_START as e:
            stop.check()  # a start a stop request cut short: no fallback either
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
        except HarnessError:
            raise  # bad configuration: the user's to fix, not a reason to run another backend
        except Exception as e:  # a fault in the backend itself: stop, never "fell back"
            log.info("backend %s failed for %s", name, spec.name, exc_info=e)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise BackendError(f"backend {name} failed for '{spec.name}': {type(e).__name__}: {first} "
                               "(traceback with -v)") from e
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


def scores_replies(spec: ModelSpec, force: str | None = None) -> bool:
    """Whether the backend `spec` runs on can score a prefilled reply (`GenParams.prompt_logprobs`): the local
    ones and the scripted one can; an OpenAI-compatible server only with prompts sent as token ids."""
    name = force or spec.backend
    if name == "openai":
        return spec.openai is not None and spec.openai.tokenizer is not None
    return name in ("vllm", "transformers", "scripted")


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
