"""The openai backend against a real HTTP server on 127.0.0.1 (an OpenAI-style /v1/chat/completions).

The server answers from a script of (status, headers, body) per request (`tool_call_reply`: tool calls,
streamed by `sse_events` as vLLM does) and records every request (path, headers, body); retry delays
are kept tiny through AGENT_HARNESS_OPENAI_BACKOFF_S.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent_harness.backends import load_backend
from agent_harness.backends.loop import complete_all
from agent_harness.backends.openai_backend import MAX_API_STOPS, OpenAIBackend
from agent_harness.errors import BackendUnavailable
from agent_harness.registry import ModelSpec, load_registry
from agent_harness.types import Conversation, GenParams

ROOT = Path(__file__).resolve().parent.parent

Reply = tuple[int, dict[str, str], Any]


def echo_reply(body: dict[str, Any]) -> Reply:
    """A 200 reply whose text names the last user message; usage counts are derived from it."""
    last = body["messages"][-1]["content"]
    text = f"echo: {last}"
    return 200, {}, {
        "id": "x", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(last.split()) + 10, "completion_tokens": len(text.split()),
                  "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": 8}},
    }


def tool_call_reply(calls: list[tuple[str, str]], content: str | None = None) -> Reply:
    """A 200 reply of tool calls (native protocol), as vLLM's tool parser sends it: (name, arguments JSON
    text) each, ids call_0, call_1, ...; finish_reason "tool_calls"."""
    tool_calls = [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
                  for i, (name, args) in enumerate(calls)]
    return 200, {}, {
        "id": "x", "object": "chat.completion", "model": "served-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                     "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
    }


def sse_events(reply: dict[str, Any], delay: float = 0.0) -> list[tuple[float, str]]:
    """A chat completion as vLLM streams it: a role chunk, the text in two pieces, each tool call (its id,
    type and name, then its arguments in two pieces), the finish, usage, [DONE]."""
    choice = reply["choices"][0]
    text = choice["message"].get("content") or ""
    half = len(text) // 2

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps({"object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    calls = []
    for i, call in enumerate(choice["message"].get("tool_calls") or ()):
        args = call["function"]["arguments"]
        args = args if isinstance(args, str) else json.dumps(args)
        head = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
        calls += [(delay, chunk({"tool_calls": [head]}))] + [
            (delay, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
            for piece in (args[: len(args) // 2], args[len(args) // 2:])]
    return [(delay, chunk({"role": "assistant", "content": ""})), (delay, chunk({"content": text[:half]})),
            (delay, chunk({"content": text[half:]})), *calls, (delay, chunk({}, choice["finish_reason"])),
            (0.0, json.dumps({"choices": [], "usage": reply.get("usage")})), (0.0, "[DONE]")]


class FakeServer:
    """ThreadingHTTPServer on an ephemeral port; `script` decides each reply (default: echo)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.script: Callable[[int, dict[str, Any]], Reply] = lambda n, body: echo_reply(body)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                with server.lock:
                    n = len(server.requests)
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                            "t": time.monotonic()})
                status, headers, payload = server.script(n, body)
                if status == 200 and body.get("stream") and isinstance(payload, dict | list):
                    self.stream(payload if isinstance(payload, list) else sse_events(payload))
                    return
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away (test_timeout_is_retried)

            def stream(self, events: list[tuple[float, str]]) -> None:
                """(delay, SSE data) events, each after its delay; the connection closes after the last."""
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for delay, data in events:
                        time.sleep(delay)
                        self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def test_key(tiny_backoff: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-123")


def run_remote(tmp_path: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """run_agents.py on the model 'remote' of the registry `registry_spec` wrote in `tmp_path`."""
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(tmp_path / "models.yaml"),
                           "--models", "remote", "--agent", "react", "--max-steps", "2", "--no-embed", "--no-progress",
                           "--out", str(out),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TEST_OPENAI_KEY": "k",
                               "AGENT_HARNESS_OPENAI_BACKOFF_S": "0.01"})


def registry_spec(tmp_path: Path, base_url: str, **openai: Any) -> ModelSpec:
    """A spec loaded through the real registry path (YAML → validation → ModelSpec)."""
    block = {"base_url": base_url, "model": "served-model", "api_key_env": "TEST_OPENAI_KEY",
             "timeout_s": 5, "max_retries": 3, "concurrency": 4, **openai}
    lines = [f"      {k}: {json.dumps(v)}" for k, v in block.items() if v is not None]
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: remote\n    backend: openai\n    openai:\n" + "\n".join(lines) + "\n")
    return load_registry(path).get("remote")


def conv(text: str) -> Conversation:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def test_batch_in_order_with_usage_and_key(tmp_path: Path, server: FakeServer) -> None:
    later = threading.Event()
    overlapped: list[bool] = []

    def slow_first(n: int, body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "q0":  # held open until another request arrives: the first answer
            overlapped.append(later.wait(timeout=60))  # comes last (order must still hold), and only if in parallel
        else:
            later.set()
        return echo_reply(body)

    server.script = slow_first
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    assert isinstance(backend, OpenAIBackend)
    assert (backend.info.requested, backend.info.used, backend.info.device) == ("openai", "openai", "remote")
    params = GenParams(max_tokens=17, temperature=0.5, top_p=0.9, seed=7)
    out = complete_all(backend, [conv(f"q{i}") for i in range(6)], params)
    backend.close()
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(6)]
    assert all(c.prompt_tokens == 11 and c.completion_tokens == 2 and c.finish_reason == "stop" for c in out)
    assert all(c.cached_tokens == 8 for c in out)  # usage.prompt_tokens_details.cached_tokens
    assert overlapped == [True]  # requests ran in parallel (concurrency 4), not one after another
    assert len(server.requests) == 6
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test-123"
    body = req["body"]
    assert body["model"] == "served-model"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (17, 0.5, 0.9, 7)
    assert "stop" not in body


def test_missing_key_variable_is_one_clear_error(tmp_path: Path, server: FakeServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_OPENAI_KEY")
    with pytest.raises(BackendUnavailable, match="TEST_OPENAI_KEY is not set"):
        load_backend(registry_spec(tmp_path, server.base_url))


def test_503_then_success_is_retried(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: ((503, {}, {"error": {"message": "warming up"}})
                                     if n == 0 else echo_reply(body))
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    [c] = complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    assert c.text == "echo: hi"
    assert len(server.requests) == 2


def test_429_honours_retry_after(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: ((429, {"Retry-After": "0.4"}, {"error": {"message": "slow down"}})
                                     if n == 0 else echo_reply(body))
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    [c] = complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    assert c.text == "echo: hi"
    assert len(server.requests) == 2
    gap = server.requests[1]["t"] - server.requests[0]["t"]
    assert gap >= 0.35  # the base backoff is 0.01 s: only Retry-After explains the wait


def test_persistent_500_gives_up_with_one_line(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: (500, {}, {"error": {"message": "CUDA error: device lost"}})
    backend = load_backend(registry_spec(tmp_path, server.base_url, max_retries=2))
    with pytest.raises(BackendUnavailable) as err:
        complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    msg = str(err.value)
    assert "\n" not in msg
    assert server.base_url + "/chat/completions" in msg
    assert "HTTP 500" in msg and "CUDA error: device lost" in msg and "3 attempt" in msg
    assert len(server.requests) == 3  # the first try + max_retries


def test_dead_server_is_a_fault(tmp_path: Path) -> None:
    s = FakeServer()
    url = s.base_url
    s.close()  # nothing listens on that port any more
    backend = load_backend(registry_spec(tmp_path, url, max_retries=1))
    with pytest.raises(BackendUnavailable, match="gave up after 2 attempt.*connection error"):
        complete_all(backend, [conv("hi")], GenParams(max_tokens=5))


def test_400_fails_at_once_with_the_servers_message(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: (400, {}, {"error": {"message": "max_tokens is too large: 99999"}})
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    with pytest.raises(BackendUnavailable, match="HTTP 400: max_tokens is too large: 99999"):
        complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    assert len(server.requests) == 1


def test_timeout_is_retried(tmp_path: Path, server: FakeServer) -> None:
    def slow_once(n: int, body: dict[str, Any]) -> Reply:
        if n == 0:
            time.sleep(0.6)
        return echo_reply(body)

    server.script = slow_once
    backend = load_backend(registry_spec(tmp_path, server.base_url, timeout_s=0.2))
    [c] = complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    # on a loaded machine the first retry can time out too: at most max_retries (3) follow the first
    assert c.text == "echo: hi" and 2 <= len(server.requests) <= 4


def test_stops_sent_first_four_and_cut_client_side(tmp_path: Path, server: FakeServer) -> None:
    text = "alpha beta STOP5 gamma STOP1 delta"
    server.script = lambda n, body: (200, {}, {
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9},
    })
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    stops = ("STOP1", "STOP2", "STOP3", "STOP4", "STOP5", "")
    [c] = complete_all(backend, [conv("go")], GenParams(max_tokens=9, stop=stops))
    assert server.requests[0]["body"]["stop"] == list(stops[:MAX_API_STOPS])
    assert c.text == "alpha beta " and c.finish_reason == "stop"  # cut at STOP5, which the server never saw
    [free] = complete_all(backend, [conv("go")], GenParams(max_tokens=9))
    assert free.text == text and free.finish_reason == "length" and free.completion_tokens == 9


def test_registry_default_entry_is_valid() -> None:
    spec = load_registry().get("local-server")
    assert spec.backend == "openai" and spec.openai is not None
    assert spec.openai.api_key_env == "OPENAI_API_KEY"


VLLM_CONTEXT_400 = {"error": {"message": "This model's maximum context length is 4096 tokens. However, your prompt "
                              "contains at least 4097 input tokens, which exceeds this limit even without any "
                              "output tokens. Please reduce the length of the input prompt.", "type": "BadRequestError",
                              "param": "input_tokens", "code": 400}}


def test_a_prompt_over_the_servers_context_is_an_empty_length_reply(tmp_path: Path, server: FakeServer) -> None:
    """As on the local backends: the conversation is over ("length", nothing generated), not the run."""
    server.script = lambda n, body: (400, {}, VLLM_CONTEXT_400) \
        if body["messages"][-1]["content"].startswith("long") else echo_reply(body)
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    long, short, tiny = complete_all(backend, [conv("long " * 1000), conv("short"), conv("long")],
                                     GenParams(max_tokens=5))
    assert (long.text, long.finish_reason, long.completion_tokens, long.prompt_tokens) == ("", "length", 0, 4097)
    assert short.text == "echo: short" and len(server.requests) == 3  # not retried
    # 4097 tokens for a 4-character prompt: the server's count cannot be true, it is recorded as unknown
    assert (tiny.finish_reason, tiny.completion_tokens, tiny.prompt_tokens) == ("length", 0, None)


def test_cli_run_goes_on_when_one_episode_outgrows_the_context(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: (400, {}, VLLM_CONTEXT_400) if "Task Python/1" in json.dumps(body) \
        else echo_reply(body)
    registry_spec(tmp_path, server.base_url)  # writes models.yaml
    out = tmp_path / "t"
    r = run_remote(tmp_path, out, "--n", "2")
    assert r.returncode == 0, r.stderr
    exits = {json.loads(p.read_text())["task_id"]: json.loads(p.read_text())["outcome"]["exit_reason"]
             for p in out.rglob("run_*.json")}
    assert exits == {"Python/0": "max_steps", "Python/1": "context"}


def test_a_slow_streamed_reply_is_not_timed_out(tmp_path: Path, server: FakeServer) -> None:
    """Streaming: timeout_s bounds the silence between chunks. A reply that takes longer than the timeout in
    all, a chunk at a time, comes back whole from one request (without streaming it was sent again from
    scratch each time and, with its retries spent, stopped the run: a 1.5B benchmark, 768-token replies).
    Each gap is 0.7 s short of the timeout: a loaded machine (a benchmark beside the tests) once stretched a
    gap 0.1 s short of it past it."""
    server.script = lambda n, body: (200, {}, sse_events(echo_reply(body)[2], delay=0.3))
    backend = load_backend(registry_spec(tmp_path, server.base_url, timeout_s=1.0))
    [c] = complete_all(backend, [conv("hi there")], GenParams(max_tokens=5))
    assert (c.text, c.prompt_tokens, c.completion_tokens, c.cached_tokens) == ("echo: hi there", 12, 3, 8)
    assert c.latency_s >= 1.2 and len(server.requests) == 1
    assert server.requests[0]["body"]["stream"] is True
    assert server.requests[0]["body"]["stream_options"] == {"include_usage": True}


def test_stream_false_sends_plain_requests_and_times_out_the_whole_reply(tmp_path: Path,
                                                                         server: FakeServer) -> None:
    def slow_once(n: int, body: dict[str, Any]) -> Reply:
        if n == 0:
            time.sleep(0.6)
        return echo_reply(body)

    server.script = slow_once
    backend = load_backend(registry_spec(tmp_path, server.base_url, timeout_s=0.3, stream=False))
    [c] = complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    # on a loaded machine a retry can time out too (as test_timeout_is_retried)
    assert c.text == "echo: hi" and c.cached_tokens == 8 and 2 <= len(server.requests) <= 4
    assert "stream" not in server.requests[1]["body"]


def test_a_cut_stream_and_an_error_chunk_are_retried_json_is_read(tmp_path: Path, server: FakeServer) -> None:
    def cut_once(n: int, body: dict[str, Any]) -> Reply:
        events = sse_events(echo_reply(body)[2])
        return 200, {}, events[:2] if n == 0 else events  # the first ends before its finish and [DONE]

    server.script = cut_once
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    [c] = complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    assert c.text == "echo: hi" and len(server.requests) == 2

    server.script = lambda n, body: (200, {}, json.dumps(echo_reply(body)[2]))  # JSON although asked to stream
    [c] = complete_all(backend, [conv("plain")], GenParams(max_tokens=5))
    assert (c.text, c.cached_tokens) == ("echo: plain", 8)

    # vLLM sends an error chunk when its engine stops mid-reply (a restart): retried like a 5xx
    def error_once(n: int, body: dict[str, Any]) -> Reply:
        return (200, {}, [(0.0, json.dumps({"error": {"message": "engine died"}}))]) if n == 3 else echo_reply(body)

    server.script = error_once
    [c] = complete_all(backend, [conv("again")], GenParams(max_tokens=5))
    assert c.text == "echo: again" and len(server.requests) == 5
