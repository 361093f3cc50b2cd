"""Shared fixtures. The Hub is never contacted from tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # bench/vllm_server.py
# The CLI's tables in the tests' subprocesses at one width (pytest-xdist's workers set 80): names are
# folded, not cut, at a narrow width, and tests look for them whole.
os.environ["COLUMNS"] = "200"

if TYPE_CHECKING:
    from agent_harness.backends.hf import HFBackend
    from agent_harness.registry import ModelSpec


@pytest.fixture
def tiny_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry delays of the openai backend kept tiny (tests of servers that fail on purpose)."""
    monkeypatch.setenv("AGENT_HARNESS_OPENAI_BACKOFF_S", "0.01")


@pytest.fixture(scope="session")
def default_spec() -> ModelSpec:
    """The registry's default model (the embedded offline 0.5B)."""
    from agent_harness.registry import load_registry

    return load_registry().resolve(None)[0]


@pytest.fixture(scope="session")
def folder(default_spec: ModelSpec) -> Path:
    """The shipped 0.5B's prepared folder, for its tokenizer (skipped with the reason when not prepared)."""
    pytest.importorskip("transformers")
    from agent_harness.backends.weights import converted_dir

    path: Path = converted_dir(default_spec)
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"the 0.5B folder is not prepared ({path}; make setup builds it)")
    return path


# Tests that compare two compute paths (KV reuse against generate, a batch against a row alone, vLLM against
# transformers) hold exactly only in float32: bf16 greedy decoding is not shape-invariant (it diverges
# on CPUs with AMX / AVX-512 BF16, where bf16 is the automatic choice). The bf16 weights upcast exactly.
FP32 = {"AGENT_HARNESS_HF_DTYPE": "float32", "AGENT_HARNESS_VLLM_DTYPE": "float32"}


@pytest.fixture(scope="session")
def hf_backend(default_spec: ModelSpec) -> Iterator[HFBackend]:
    """The real default model on the transformers backend in float32, loaded once per session."""
    from agent_harness.backends import load_backend

    with pytest.MonkeyPatch.context() as mp:
        for k, v in FP32.items():
            mp.setenv(k, v)
        backend = load_backend(default_spec, force="transformers")
    yield backend  # type: ignore[misc]
    backend.close()
