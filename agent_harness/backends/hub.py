"""Whether the Hugging Face Hub can be used now: `HF_HUB_OFFLINE`, else one short probe (cached).

`require_hub` is what a model needing the hub calls: BackendUnavailable in one line, naming the models
that work offline instead.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from ..registry import ModelSpec

HUB_PROBE_TIMEOUT_S = 3.0


def _hub_offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable() -> bool:
    """False when HF_HUB_OFFLINE is set or the hub does not answer within a few seconds."""
    return not _hub_offline_env() and _probe_hub()


@cache
def _probe_hub() -> bool:
    import httpx

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        httpx.head(f"{endpoint}/api/models", timeout=HUB_PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return True


def offline_model_names(registry_path: str | os.PathLike[str] | None = None) -> list[str]:
    """Registry names of the models whose weights work without the hub."""
    from ..registry import load_registry

    try:
        return [m.name for m in load_registry(registry_path).models if m.offline is not None]
    except ConfigError:
        return []


def require_hub(spec: ModelSpec) -> None:
    if not hub_reachable():
        why = "HF_HUB_OFFLINE is set" if _hub_offline_env() else "no answer"
        names = ", ".join(offline_model_names()) or "none registered"
        raise BackendUnavailable(
            f"model '{spec.name}' ({spec.hf_id}) needs the Hugging Face Hub, which is unreachable ({why}); "
            f"offline models: {names}"
        )
