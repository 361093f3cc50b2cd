"""The fallback chain vllm → transformers, exercised for real.

vLLM may be installed in the venv, so "not importable" is made true in a subprocess
(``sys.modules['vllm'] = None`` before `load_backend`), which then really loads the transformers
backend with the embedded 0.5B model and generates.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.backends import load_backend
from agent_harness.errors import BackendUnavailable
from agent_harness.registry import PROJECT_ROOT, ModelSpec

# Loads the default model via load_backend (its registry backend is vllm), generates a few tokens
# and prints one JSON line; engine processes still alive afterwards are listed too.
PROBE = r"""
import json, sys
{prelude}
import psutil
from agent_harness.backends import load_backend
from agent_harness.backends.loop import complete_all
from agent_harness.registry import load_registry
from agent_harness.types import GenParams
spec = load_registry().resolve(None)[0]
b = load_backend(spec)
[c] = complete_all(b, [[{{"role": "user", "content": "Say hello."}}]], GenParams(max_tokens=6))
left = [" ".join(p.cmdline())[:120] for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline())]
print("PROBE " + json.dumps({{"requested": b.info.requested, "used": b.info.used,
    "reason": b.info.fallback_reason, "text": c.text, "tokens": c.completion_tokens, "left": left}}))
b.close()
"""


def run_probe(prelude: str, env: dict[str, str], timeout: float) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(prelude=prelude)], cwd=PROJECT_ROOT, capture_output=True,
        text=True, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, f"probe failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("PROBE "))


@pytest.mark.model
def test_vllm_not_importable_falls_back_to_transformers() -> None:
    res = run_probe("sys.modules['vllm'] = None  # import vllm now fails", {}, timeout=600)
    assert (res["requested"], res["used"]) == ("vllm", "transformers")
    reason = str(res["reason"])
    assert reason.startswith("vllm: MissingExtraError:") and "vllm is not installed" in reason
    assert "\n" not in reason
    assert str(res["text"]).strip() and 1 <= int(res["tokens"]) <= 6  # type: ignore[call-overload]


def test_both_backends_fail_gives_one_error_listing_both(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    empty = tmp_path / "no-weights-here"
    empty.mkdir()
    spec = ModelSpec(name="broken", backend="vllm", hf_id=str(empty))
    with pytest.raises(BackendUnavailable) as err:
        load_backend(spec)
    msg = str(err.value)
    assert msg.startswith("vllm: ") and "; transformers: " in msg
    assert "\n" not in msg


def _vllm_cpu_ready() -> str | None:
    """Why the real vLLM start-failure test cannot run here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (scripts/install_vllm.sh)"
    import torch

    if torch.cuda.is_available():
        return "VLLM_CPU_KVCACHE_SPACE only applies to vLLM's CPU build"
    return None


@pytest.mark.vllm
@pytest.mark.model
def test_vllm_engine_start_failure_falls_back_and_leaves_no_process() -> None:
    why = _vllm_cpu_ready()
    if why:
        pytest.skip(why)
    # 100000 GiB of KV cache: vLLM's worker refuses it while the engine starts, and the engine core exits.
    env = {"VLLM_CPU_KVCACHE_SPACE": "100000", "AGENT_HARNESS_VLLM_EAGER": "1"}
    res = run_probe("", env, timeout=600)
    assert (res["requested"], res["used"]) == ("vllm", "transformers")
    reason = str(res["reason"])
    assert "\n" not in reason
    assert reason.startswith("vllm: BackendUnavailable: the vllm engine failed to start for 'qwen2.5-coder-0.5b' "
                             "on cpu: ")
    assert "VLLM_CPU_KVCACHE_SPACE" in reason  # the engine core's own error, read from the engine's log
    assert res["left"] == []  # no server process outlives the failed start
    assert str(res["text"]).strip()


# A vLLM factory with a coding error (not a "cannot start" one), plugged in through BACKENDS in a
# child process that then runs the real CLI.
BROKEN = r"""
import sys
from agent_harness import backends
from agent_harness.cli import run_agents_main
sys.modules["broken_vllm"] = type(sys)("broken_vllm")
def create(spec):
    raise {exc}("a bug in the backend")
sys.modules["broken_vllm"].create = create
backends.BACKENDS["vllm"] = "broken_vllm:create"
sys.exit(run_agents_main(sys.argv[1:]))
"""


@pytest.mark.parametrize("exc", ["RuntimeError", "ValueError", "TypeError", "OSError"])
@pytest.mark.parametrize("verbose", [False, True])
def test_backend_bug_stops_the_run_instead_of_falling_back(exc: str, verbose: bool, tmp_path: Path) -> None:
    registry = tmp_path / "models.yaml"
    registry.write_text("models:\n  - {name: m, backend: vllm, hf_id: /nonexistent-weights}\n")
    args = ["--registry", str(registry), "--models", "m", "--n", "1", "--out", str(tmp_path / "t"), "--no-embed",
            *(["-v"] if verbose else [])]
    proc = subprocess.run([sys.executable, "-c", BROKEN.format(exc=exc), *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: backend vllm failed for 'm': {exc}: a bug in the backend (traceback with -v)"]
    assert "falling back" not in proc.stderr
    assert ("Traceback (most recent call last)" in proc.stderr) == verbose
    assert not list((tmp_path / "t").rglob("run_*.json"))


def test_cannot_start_errors_are_the_only_ones_that_fall_back() -> None:
    from agent_harness.backends import CANNOT_START
    from agent_harness.errors import MissingExtraError

    assert set(CANNOT_START) == {ImportError, BackendUnavailable, MissingExtraError}
