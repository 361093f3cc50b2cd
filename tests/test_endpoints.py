"""Several endpoints behind one `openai` model, against real HTTP servers on 127.0.0.1.

The servers answer like the scripted oracle (its replies for the conversation they receive), so a
run through them is a real run: CLI -> agent -> openai backend -> HTTP -> sandbox -> trace -> pass@1.
One of them dies mid-run (it drops the request it is serving and closes its port); a lone one stops and
comes back on its port, as a restarted `vllm serve` does (its port refuses connections until its engine
has loaded), then holds its first requests a while before it answers them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
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
from agent_harness.backends.loop import LoopThread, complete_all
from agent_harness.backends.openai_backend import OpenAIBackend
from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import BackendUnavailable, ConfigError
from agent_harness.registry import ModelSpec, load_registry
from agent_harness.scenarios import TaskQuery, get_scenario
from agent_harness.types import GenParams, RequestMeta

pytestmark = pytest.mark.usefixtures("tiny_backoff")
ROOT = Path(__file__).resolve().parent.parent
Answer = Callable[[dict[str, Any]], str]


class Server:
    """A chat-completions server; `answer` gives the reply text, `die_at` the request it dies on."""

    def __init__(self, answer: Answer, die_at: int | None = None, keep_alive: bool = False, port: int = 0) -> None:
        self.answer, self.die_at = answer, die_at
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.lock = threading.Lock()
        self.hold: threading.Event | None = None  # when set, requests wait for it
        self.dead = False
        self.open = self.busy = self.peak = 0  # connections open; requests being answered, and their most
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.open += 1

            def finish(self) -> None:
                super().finish()
                with server.lock:
                    server.open -= 1

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with server.lock:
                    n = len(server.bodies)
                    server.bodies.append(body)
                    server.auth.append(self.headers.get("Authorization"))
                if n == server.die_at:
                    server.kill()
                    self.connection.shutdown(socket.SHUT_RDWR)  # the reply never comes
                    self.close_connection = True
                    return
                with server.lock:
                    server.busy += 1
                    server.peak = max(server.peak, server.busy)
                if server.hold is not None:
                    server.hold.wait(10)
                try:
                    text = server.answer(body)
                finally:
                    with server.lock:
                        server.busy -= 1
                data = json.dumps({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": len(text.split()),
                              "prompt_tokens_details": {"cached_tokens": 40}},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        """Close the listening port now (new connections are refused); the serve loop ends soon after."""
        if not self.dead:
            self.dead = True
            self.httpd.socket.close()
            threading.Thread(target=self.httpd.shutdown, daemon=True).start()

    def close(self) -> None:
        self.kill()


def echo(body: dict[str, Any]) -> str:
    return "echo: " + body["messages"][-1]["content"]


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for s in made:
        s.close()


def registry_file(tmp_path: Path, urls: list[str], **openai: Any) -> Path:
    block = {"base_url": urls, "model": "m", "timeout_s": 10, "max_retries": 2, "concurrency": 2, **openai}
    lines = [f"      {k}: {json.dumps(v)}" for k, v in block.items()]
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: remote\n    backend: openai\n    openai:\n" + "\n".join(lines) + "\n")
    return path


def spec(tmp_path: Path, urls: list[str], **openai: Any) -> ModelSpec:
    return load_registry(registry_file(tmp_path, urls, **openai)).get("remote")


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_requests_spread_and_name_their_endpoint(tmp_path: Path, servers: list[Server],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_A", "ka")
    monkeypatch.setenv("KEY_B", "kb")
    servers += [Server(echo), Server(echo)]
    a, b = servers
    backend = load_backend(spec(tmp_path, [a.base_url, b.base_url], api_key_env=["KEY_A", "KEY_B"]))
    assert isinstance(backend, OpenAIBackend)
    assert backend.info.details["endpoints"] == [a.base_url, b.base_url]
    out = complete_all(backend, [conv(f"q{i}") for i in range(8)], GenParams(max_tokens=5))
    backend.close()
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(8)]
    assert all(c.cached_tokens == 40 for c in out)
    assert len(a.bodies) + len(b.bodies) == 8 and a.bodies and b.bodies
    assert {c.endpoint for c in out} == {a.base_url, b.base_url}
    for c in out:  # each reply names the server that received its request
        got = a if c.endpoint == a.base_url else b
        assert any(body["messages"][-1]["content"] == c.text.removeprefix("echo: ") for body in got.bodies)
    assert set(a.auth) == {"Bearer ka"} and set(b.auth) == {"Bearer kb"}


def test_busy_endpoint_gets_no_more_requests(tmp_path: Path, servers: list[Server]) -> None:
    """A holds its first request until B has answered four: the fewest-in-flight rule sends B everything else."""
    servers += [Server(echo), Server(echo)]
    a, b = servers
    a.hold = threading.Event()
    answered = b.answer

    def count_then_release(body: dict[str, Any]) -> str:
        text = answered(body)
        if len(b.bodies) >= 4:
            a.hold.set()  # type: ignore[union-attr]
        return text

    b.answer = count_then_release
    backend = load_backend(spec(tmp_path, [a.base_url, b.base_url], concurrency=1))
    out = complete_all(backend, [conv(f"q{i}") for i in range(5)], GenParams(max_tokens=5))
    backend.close()
    assert (len(a.bodies), len(b.bodies)) == (1, 4)
    assert [c.endpoint for c in out].count(a.base_url) == 1


def test_dead_endpoint_moves_its_requests(tmp_path: Path, servers: list[Server]) -> None:
    servers += [Server(echo, die_at=1), Server(echo)]
    a, b = servers
    backend = load_backend(spec(tmp_path, [a.base_url, b.base_url]))
    assert isinstance(backend, OpenAIBackend)
    for k in range(4):
        out = complete_all(backend, [conv(f"r{k}q{i}") for i in range(6)], GenParams(max_tokens=5))
        assert [c.text for c in out] == [f"echo: r{k}q{i}" for i in range(6)]
    stats = {s["base_url"]: s for s in backend.pool.snapshot()}
    backend.close()
    # A answered every request it got but the one it died on (others may have been in flight beside
    # it); every later try met a closed port, and B took over the rest: 24 answers, none lost
    assert a.dead and len(a.bodies) >= 2
    assert stats[a.base_url]["hard"] >= 1 and stats[a.base_url]["ok"] == len(a.bodies) - 1
    assert stats[b.base_url]["ok"] == len(b.bodies) == 24 - stats[a.base_url]["ok"]
    assert stats[b.base_url]["hard"] == 0


def test_all_endpoints_dead_is_one_line(tmp_path: Path, servers: list[Server]) -> None:
    servers += [Server(echo), Server(echo)]
    urls = [s.base_url for s in servers]
    for s in servers:
        s.kill()
    backend = load_backend(spec(tmp_path, urls, max_retries=1))
    with pytest.raises(BackendUnavailable) as err:
        complete_all(backend, [conv("hi")], GenParams(max_tokens=5))
    msg = str(err.value)
    assert "\n" not in msg and "gave up after 4 attempt(s) on 2 endpoints" in msg and "connection error" in msg


@pytest.mark.parametrize(("urls", "extra", "why"), [
    (["http://h:1/v1", "http://h:1/v1"], {}, "the same URL is listed twice"),
    (["http://h:1/v1", "http://h:2/v1"], {"api_key_env": ["K"]}, "1 entries for 2 base_url"),
    ([], {}, "at least one"),
])
def test_bad_endpoint_lists(tmp_path: Path, urls: list[str], extra: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        spec(tmp_path, urls, **extra)


def oracle_answer(n: int) -> Answer:
    """A server's replies: the scripted oracle's for the first `n` HumanEvalFix tasks."""
    tasks = get_scenario("humanevalfix").load_tasks(TaskQuery(n=n))
    oracle = ScriptedBackend("oracle")
    by_statement = {t.statement: t for t in tasks}  # over HTTP the server only sees the text
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> str:
        messages = body["messages"]
        # the task message: the statement, maybe followed by the initial test run's failing check
        start, task = next((i, t) for i, m in enumerate(messages) for s, t in by_statement.items()
                           if m["role"] == "user" and m["content"].startswith(s))
        meta = RequestMeta(task,
                           turn=sum(m["role"] == "assistant" for m in messages[start:]))
        with lock:
            [c] = complete_all(oracle, [messages], GenParams(max_tokens=body["max_tokens"],
                                                             stop=tuple(body.get("stop", ()))), meta=[meta])
        return c.text

    return answer


def oracle_run(tmp_path: Path, urls: list[str], out: Path, backoff_s: str, *more: str,
               **openai: Any) -> subprocess.CompletedProcess[str]:
    """`run_agents.py` on the first 4 tasks through the servers at `urls`."""
    env = {**os.environ, "AGENT_HARNESS_OPENAI_BACKOFF_S": backoff_s, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry",
                           str(registry_file(tmp_path, urls, **openai)), "--models", "remote", "--agent", "react",
                           "--n", "4", "--no-embed", "--no-progress", "--out", str(out), *more],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)


def all_passed(out: Path) -> list[dict[str, Any]]:
    """The run's traces, after checking that its 4 episodes completed and passed."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["remote"]["humanevalfix"]["pass@1"] == 1.0 and summary["remote"]["humanevalfix"]["n_tasks"] == 4
    traces = [json.loads(path.read_text()) for path in sorted(out.rglob("run_*.json"))]
    assert len(traces) == 4 and all(t["outcome"]["completed"] and t["outcome"]["passed"] for t in traces)
    return traces


def test_run_survives_a_node_dying(tmp_path: Path, servers: list[Server]) -> None:
    """The real run path through two servers; A dies on its 3rd request, every episode still passes."""
    answer = oracle_answer(4)
    servers += [Server(answer, die_at=2), Server(answer)]
    a, b = servers
    out = tmp_path / "traces"
    r = oracle_run(tmp_path, [a.base_url, b.base_url], out, "0.01")
    assert r.returncode == 0, r.stderr
    assert a.dead and len(a.bodies) >= 3  # requests in flight beside the fatal one were still answered
    answered: list[str] = []
    for trace in all_passed(out):
        assert trace["model"]["details"]["endpoints"] == [a.base_url, b.base_url]
        answered += [s["endpoint"] for s in trace["steps"] if "endpoint" in s]
    assert answered.count(a.base_url) == len(a.bodies) - 1  # all A got but the request it died on
    assert answered.count(b.base_url) == len(b.bodies) == len(answered) - answered.count(a.base_url)

    # the dead node dropped from the fleet: the run resumes (URLs are transport, not in the fingerprint)
    sent = len(b.bodies)
    r = oracle_run(tmp_path, [b.base_url], out, "0.01", "--resume", concurrency=3)
    assert r.returncode == 0 and "resume: reused 4, redid 0" in r.stderr, r.stderr
    assert len(b.bodies) == sent


def test_a_lone_server_restarted_mid_run_is_waited_for(tmp_path: Path, servers: list[Server]) -> None:
    """The one server stops on its 3rd request (its port refused), then comes back on the same port and
    holds its first requests unanswered for 2 s: the run retries through both and every episode passes."""
    answer = oracle_answer(4)
    first = Server(answer, die_at=2)
    servers.append(first)
    back = threading.Event()

    def restart() -> None:
        while not first.dead:
            time.sleep(0.05)
        time.sleep(1.0)  # refused meanwhile
        again = Server(answer, port=first.port)
        again.hold = threading.Event()
        threading.Timer(2.0, again.hold.set).start()
        servers.append(again)
        back.set()

    threading.Thread(target=restart, daemon=True).start()
    out = tmp_path / "traces"
    r = oracle_run(tmp_path, [first.base_url], out, "0.1", max_retries=8)
    assert r.returncode == 0, r.stderr
    assert back.is_set() and "connection error" in r.stderr and "retry" in r.stderr
    again = servers[1]
    assert again.peak >= 1 and again.bodies  # held requests were answered once it let them through
    assert all(t["model"]["details"]["endpoints"] == [first.base_url] for t in all_passed(out))


def test_sigterm_does_not_wait_for_requests_in_flight(tmp_path: Path, servers: list[Server]) -> None:
    """A run stopped (SIGTERM, as Ctrl-C) while its requests wait on a slow server exits at once with 130,
    instead of waiting out the requests' timeout; the traces on disk are whole JSON."""
    import signal

    server = Server(echo)
    server.hold = threading.Event()  # never set: every request waits (10 s) before its answer
    servers.append(server)
    out = tmp_path / "traces"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_agents.py"), "--registry",
                             str(registry_file(tmp_path, [server.base_url], timeout_s=600)), "--models", "remote",
                             "--n", "3", "--no-embed", "--no-progress", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 120
        while len(server.bodies) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(server.bodies) >= 2, "no requests reached the server"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=8)  # the held requests would keep it 10 s
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    for path in out.rglob("run_*.json"):
        json.loads(path.read_text())


def wait_until(check: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


def test_each_reply_comes_when_ready_and_slots_cap_the_requests_in_flight(tmp_path: Path,
                                                                         servers: list[Server]) -> None:
    """Concurrent `complete` calls: a reply comes back as soon as it is ready, not when a slow one beside it
    is; at most `concurrency` requests are in flight; a failed request raises from its own call."""
    slow = threading.Event()

    def answer(body: dict[str, Any]) -> str:
        if body["messages"][-1]["content"] == "slow":
            slow.wait(10)
        return echo(body)

    server = Server(answer)
    servers.append(server)
    backend = OpenAIBackend(spec(tmp_path, [server.base_url], concurrency=2))
    params = GenParams(max_tokens=8)

    async def scenario() -> None:
        out = {k: asyncio.create_task(backend.complete(conv(k), params)) for k in ("slow", "a", "b", "c")}
        done, _ = await asyncio.wait([out["a"], out["b"], out["c"]], timeout=20)
        assert sorted(t.result().text for t in done) == ["echo: a", "echo: b", "echo: c"]
        assert not out["slow"].done() and server.peak == 2  # "slow" held one of the two slots throughout
        slow.set()
        assert (await out["slow"]).text == "echo: slow"
        server.kill()
        with pytest.raises(BackendUnavailable, match="connection error"):
            await backend.complete(conv("x"), params)

    try:
        asyncio.run(scenario())
    finally:
        backend.close()
    assert len(server.bodies) == 4


def test_each_event_loop_has_its_client_and_close_does_not_hang(tmp_path: Path, servers: list[Server]) -> None:
    """`complete` from several event loops over the backend's life (complete_all: one per call; a LoopThread):
    a loop's kept-alive connection closes when the loop ends, and close() closes the client of a loop that is
    still running, from another thread, without waiting for that loop to end."""
    server = Server(echo, keep_alive=True)
    servers.append(server)
    backend = OpenAIBackend(spec(tmp_path, [server.base_url]))
    params = GenParams(max_tokens=5)
    for k in range(3):
        [c] = complete_all(backend, [conv(f"q{k}")], params)
        assert c.text == f"echo: q{k}"
        assert wait_until(lambda: server.open == 0), "the loop ended but its connection stayed open"
    with LoopThread() as lt:
        assert lt.call(backend.complete(conv("t"), params)).text == "echo: t"
        assert server.open == 1  # kept alive while its loop runs
        backend.close()
        assert wait_until(lambda: server.open == 0), "close() left the running loop's connection open"
        with pytest.raises(BackendUnavailable, match="closed"):
            lt.call(backend.complete(conv("u"), params))
    assert len(server.bodies) == 4


def test_a_cancelled_request_frees_its_endpoint_without_blame(tmp_path: Path, servers: list[Server]) -> None:
    """The caller cancels a request in flight (an episode stopped, Ctrl-C): its endpoint's in-flight count goes
    back and nothing is held against the endpoint (it is not taken out), so the next request goes to it."""
    server = Server(echo)
    server.hold = threading.Event()
    servers.append(server)
    backend = OpenAIBackend(spec(tmp_path, [server.base_url], max_retries=0))
    params = GenParams(max_tokens=5)

    async def scenario() -> str:
        held = asyncio.create_task(backend.complete(conv("held"), params))
        while not server.bodies:
            await asyncio.sleep(0.01)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        [snap] = backend.pool.snapshot()
        assert (snap["in_flight"], snap["down"], snap["soft"], snap["hard"], snap["taken_out"]) == (0, False, 0, 0, 0)
        server.hold.set()  # type: ignore[union-attr]
        return (await backend.complete(conv("next"), params)).text

    try:
        assert asyncio.run(asyncio.wait_for(scenario(), 30)) == "echo: next"
    finally:
        backend.close()
    assert backend.stats() == {"attempts_ok": 1.0, "attempts_soft": 0.0, "attempts_hard": 0.0, "taken_out": 0.0}
