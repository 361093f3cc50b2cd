"""The native tool protocol through a real `vllm serve` of the shipped 0.5B (marked `vllm`, slow: one
engine load).

One server, started with Qwen's tool parser (`--enable-auto-tool-choice --tool-call-parser hermes`, the
registry's `tool_parser`), answers two ways:
- a react run of two HumanEvalFix tasks under `--protocol native` through an `openai` entry that sends
  token ids the harness encoded (tools rendered by the chat template): every turn's prompt count is the
  harness's own encoding of the conversation its trace rebuilds, tools included;
- chat requests with `tools` (no tokenizer: the server renders the template and parses the calls): no
  `<tool_call>` text is left, and each reply reads as the asked call, from the server's structured calls
  or, as the 0.5B writes them, a ```json fence the hermes parser does not read.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_vllm_serve import server  # the test engine's settings, here in bf16 with an 8k context and Qwen's parser
from vllm_server import ServerError, free_port

from agent_harness.backends.openai_prompt import IDS

ROOT = Path(__file__).resolve().parent.parent
MODEL = "served-native"
HEALTH_TIMEOUT_S = 900.0


def env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def registry(tmp_path: Path, folder: Path, port: int, tokenizer: bool) -> Path:
    path = tmp_path / f"models-{int(tokenizer)}.yaml"
    path.write_text(
        "models:\n"
        f"  - name: {MODEL}\n    backend: openai\n    max_tokens: 160\n    temperature: 0.0\n"
        "    context_length: 8192\n    tool_parser: hermes\n"
        f"    openai:\n      base_url: http://127.0.0.1:{port}/v1\n      model: {MODEL}\n"
        + (f"      tokenizer: {json.dumps(str(folder))}\n" if tokenizer else "")
        + "      timeout_s: 600\n      concurrency: 2\n")
    return path


@pytest.mark.vllm
@pytest.mark.slow
def test_native_calls_through_vllm_serve(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh)")
    import transformers

    from agent_harness.backends import load_backend
    from agent_harness.backends.chat_ids import chat_ids
    from agent_harness.backends.loop import complete_all
    from agent_harness.history import rebuild_prompt
    from agent_harness.protocol.native import parse_native
    from agent_harness.registry import load_registry
    from agent_harness.types import GenParams, ToolParam, ToolSpec
    from agent_harness.weights import converted_dir

    folder = converted_dir(load_registry().resolve(None)[0], "bfloat16")
    if not (folder / "config.json").is_file():
        pytest.skip(f"the 0.5B folder is not prepared ({folder}; make setup builds it)")
    port = free_port()
    srv = server(folder, port, tmp_path / "server.log", MODEL, dtype="bfloat16", max_model_len=8192,
                 max_num_batched_tokens=8192, enable_auto_tool_choice=True, tool_call_parser="hermes")
    out = tmp_path / "out"
    try:
        srv.start()
        try:
            srv.wait_healthy(HEALTH_TIMEOUT_S)
        except ServerError as e:
            pytest.fail(f"{e}\n{srv.tail()}")
        ids_reg = registry(tmp_path, folder, port, tokenizer=True)
        run = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(ids_reg), "--models",
                              MODEL, "--n", "2", "--max-steps", "3", "--no-embed", "--no-progress", "--agent",
                              "react", "--protocol", "native", "--out", str(out)],
                             capture_output=True, text=True, cwd=ROOT, env=env(), timeout=1800)
        assert run.returncode == 0, run.stderr[-3000:]

        chat_spec = load_registry(registry(tmp_path, folder, port, tokenizer=False)).get(MODEL)
        read = ToolSpec("read_file", "Show the text of a file.", (ToolParam("path", "string", "the file to read"),))
        convs: list[Any] = [[{"role": "system", "content": "You are a coding agent. Call one tool per reply."},
                             {"role": "user", "content": f"Read the file `{name}` with the read_file tool."}]
                            for name in ("add.py", "calc.py")]
        backend = load_backend(chat_spec)
        try:
            got = complete_all(backend, convs, GenParams(max_tokens=80, tools=(read,)))
        finally:
            backend.close()
    finally:
        srv.stop()

    traces = [json.loads(p.read_text()) for p in sorted((out / MODEL).rglob("run_*.json"))]
    assert len(traces) == 2 and all(p.parent.parent.name == "humanevalfix-native" for p in (out / MODEL).rglob(
        "run_*.json"))
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for t in traces:
        assert t["outcome"]["completed"] and t["agent"]["protocol"] == "native"
        assert t["model"]["details"]["prompt_encoding"] == IDS
        tools = t["prompt"]["tools"]
        assert {"read_file", "write_file", "run_tests"} <= {s["function"]["name"] for s in tools}
        turns = [s for s in t["steps"] if "tokens" in s]
        assert turns and all(s["tokens"]["completion"] > 0 for s in turns)
        for n, s in enumerate(turns):  # the server computed on exactly the harness's encoding, tools included
            assert s["tokens"]["prompt"] == len(chat_ids(tok, rebuild_prompt(t, n), None, tools)), (t["task_id"], n)
    # Qwen2.5-Coder-0.5B answers in a ```json fence, which vLLM's hermes parser leaves as text (measured:
    # both replies); the server's structured calls, when it gives them, and the fence both read as the call.
    for c, name in zip(got, ("add.py", "calc.py"), strict=True):
        assert c.error is None and c.completion_tokens
        assert "<tool_call>" not in c.text  # the server's parser took every tagged call out of the text
        reply = parse_native(c.text, c.tool_calls, {"read_file": read})
        assert (reply.tool, reply.args) == ("read_file", {"path": name}), c.text
        assert c.tool_calls or "json_fence" in reply.repairs
