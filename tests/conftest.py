"""Shared fixtures. The Hub is never contacted from tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

if TYPE_CHECKING:
    from agent_harness.backends.hf import HFBackend
    from agent_harness.registry import ModelSpec


@pytest.fixture(scope="session")
def default_spec() -> ModelSpec:
    """The registry's default model (the embedded offline 0.5B)."""
    from agent_harness.registry import load_registry

    return load_registry().resolve(None)[0]


@pytest.fixture(scope="session")
def hf_backend(default_spec: ModelSpec) -> Iterator[HFBackend]:
    """The real default model on the transformers backend, loaded once per session."""
    from agent_harness.backends import load_backend

    backend = load_backend(default_spec, force="transformers")
    yield backend  # type: ignore[misc]
    backend.close()
