"""Reproducible sampling: a request's seed depends on (run seed, task id, sample, turn) only, on every backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agent_harness.backends.loop import complete_all
from agent_harness.types import Conversation, GenParams, request_seed, row_seeds

if TYPE_CHECKING:
    from agent_harness.backends.hf import HFBackend

ROOT = Path(__file__).resolve().parent.parent
SAMPLED = GenParams(max_tokens=16, temperature=0.8, top_p=0.95)


def conv(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def test_request_seed_depends_on_its_four_inputs_only() -> None:
    base = request_seed(0, "Python/1", 0, 0)
    assert base == request_seed(0, "Python/1", 0, 0) and 0 <= base < 2**31
    others = {request_seed(1, "Python/1", 0, 0), request_seed(0, "Python/2", 0, 0), request_seed(0, "Python/1", 1, 0),
              request_seed(0, "Python/1", 0, 1), request_seed(0, "Python/10", 0, 0)}
    assert base not in others and len(others) == 5
    assert row_seeds(SAMPLED, 2, [5, None]) == [5, None]
    assert row_seeds(GenParams(seed=3), 3, None) == [3, 4, 5]
    with pytest.raises(ValueError, match="1 seeds for 2 conversations"):
        row_seeds(SAMPLED, 2, [1])


FP32 = {"AGENT_HARNESS_HF_DTYPE": "float32", "AGENT_HARNESS_VLLM_DTYPE": "float32"}


@pytest.fixture(scope="module")
def hf32(default_spec: Any) -> Iterator[HFBackend]:
    """The default model on transformers computing in float32 (bf16 weights upcast exactly)."""
    from agent_harness.backends import load_backend

    with pytest.MonkeyPatch.context() as mp:
        for k, v in FP32.items():
            mp.setenv(k, v)
        backend = load_backend(default_spec, force="transformers")
    yield backend  # type: ignore[misc]
    backend.close()


@pytest.mark.model
def test_transformers_row_draw_does_not_depend_on_its_batch(hf32: HFBackend) -> None:
    """fp32: batching does not change the logits, so a seeded row samples the same tokens in any batch."""
    hf_backend = hf32
    assert hf_backend.info.details["dtype"] == "float32"
    a, b, c = conv("Write a haiku about rivers."), conv("Name three prime numbers."), conv("Say hi in French.")
    alone = complete_all(hf_backend, [b], SAMPLED, seeds=[11])
    mixed = complete_all(hf_backend, [a, b, c], SAMPLED, seeds=[7, 11, 13])
    swapped = complete_all(hf_backend, [c, a, b], SAMPLED, seeds=[13, 7, 11])
    assert alone[0].text == mixed[1].text == swapped[2].text
    assert mixed[0].text == swapped[1].text and mixed[2].text == swapped[0].text
    other = complete_all(hf_backend, [b, b, b, b], SAMPLED, seeds=[12, 13, 14, 15])
    assert len({o.text for o in other} | {alone[0].text}) > 1  # a seed really steers the draw


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1", **FP32})


def replies(out: Path) -> dict[str, list[str]]:
    found = {}
    for p in out.rglob("run_*.json"):
        data: dict[str, Any] = json.loads(p.read_text())
        found[data["task_id"]] = [s["raw"] for s in data["steps"] if "raw" in s]
    return found


@pytest.mark.model
def test_sampled_episodes_are_identical_in_other_batch_compositions(tmp_path: Path) -> None:
    """Two tasks batched together, then each alone in the other order: the same sampled traces.

    The seeds come from the scheduler, whatever the backend; that the vllm backend's draws depend on their
    seed alone, not on their batch mates, is tests/test_backend_vllm.py's check on its shared engine (two
    more engine loads here would add nothing but four minutes)."""
    import yaml

    backend = "transformers"
    reg = yaml.safe_load((ROOT / "models.yaml").read_text())
    spec = next(m for m in reg["models"] if m["name"] == reg["default"])
    small = {**spec, "name": "sampled", "aliases": [], "backend": backend, "max_tokens": 16, "temperature": 0.8}
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"default": "sampled", "models": [small]}))
    common = ["--registry", str(registry), "--agent", "react", "--max-steps", "2", "--no-embed", "--no-progress",
              "--no-demo", "--seed", "3", "--backend", backend]
    together, apart = tmp_path / "together", tmp_path / "apart"
    r = cli(*common, "--tasks", "Python/0,Python/1", "--concurrency", "2", "--out", str(together))
    assert r.returncode == 0, r.stderr
    r = cli(*common, "--tasks", "Python/1,Python/0", "--concurrency", "1", "--out", str(apart), "--no-streaming")
    assert r.returncode == 0, r.stderr
    first, second = replies(together), replies(apart)
    assert set(first) == {"Python/0", "Python/1"} and all(len(v) == 2 for v in first.values())
    assert first == second
    for p in together.rglob("run_*.json"):
        data = json.loads(p.read_text())
        assert data["model"]["backend"] == backend and data["generation"]["temperature"] == 0.8
        assert data["model"]["details"]["dtype"] == "float32"
