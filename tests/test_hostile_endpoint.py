"""A hostile OpenAI-compatible server, on 127.0.0.1, started and stopped by each test.

Each behaviour is a function writing the raw HTTP reply: keep-alive comments or tokens forever, a
50 MB reply (declared, chunked, one endless SSE line, a gzip bomb), malformed `choices`, content that
is not a string, `usage` counts that are strings, Infinity, negative or 1e30, JSON nested 100k deep.
Through the CLI the point is that the run goes on and writes summary.json; the episode the server
fails ends with exit "error" and a one-line message. Unit tests pin the values.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_harness.backends import load_backend
from agent_harness.backends.loop import complete_all
from agent_harness.backends.openai_http import lines
from agent_harness.backends.openai_reply import (
    MAX_DEPTH,
    BadReply,
    MidStreamError,
    ReplyCaps,
    StreamReply,
    body_reply,
    parse_json,
    usage_counts,
)
from agent_harness.errors import BackendUnavailable
from agent_harness.registry import load_registry
from agent_harness.traces.jsontext import too_deep
from agent_harness.types import Completion, GenParams

pytestmark = pytest.mark.usefixtures("tiny_backoff")
ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
Act = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


class Hostile:
    """A server whose `act` writes each reply by hand; `stop` ends the endless ones when the test is over."""

    def __init__(self, act: Act) -> None:
        self.act = act
        self.requests = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with server.lock:
                    server.requests += 1
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client hung up
                    server.act(self, body)
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# -- behaviours ------------------------------------------------------------------------------------

def head(h: BaseHTTPRequestHandler, kind: str = "application/json", length: int | None = None,
         status: int = 200, **headers: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", kind)
    if length is not None:
        h.send_header("Content-Length", str(length))
    for k, v in headers.items():
        h.send_header(k.replace("_", "-"), v)
    h.send_header("Connection", "close")
    h.end_headers()


def send_json(h: BaseHTTPRequestHandler, payload: Any, status: int = 200) -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    head(h, length=len(data), status=status)
    h.wfile.write(data)


def reply(text: Any = "THOUGHT: thinking", usage: Any = None, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         **choice}], "usage": usage or {"prompt_tokens": 50, "completion_tokens": 3}}


def chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
                                  ).encode() + b"\n\n"


def normal(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    send_json(h, reply())


def keepalive(server: Hostile) -> Act:
    """SSE headers, then a keep-alive comment every 50 ms, forever: never silent, never an answer."""
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, "text/event-stream")
        while not server.stop.is_set():
            h.wfile.write(b": ping\n\n")
            h.wfile.flush()
            time.sleep(0.05)
    return act


def tokens_forever(server: Hostile, pause: float) -> Act:
    """One token per `pause` seconds (0: as fast as the socket takes them), never a finish."""
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, "text/event-stream")
        while not server.stop.is_set():
            h.wfile.write(chunk("tok "))
            if pause:
                h.wfile.flush()
                time.sleep(pause)
    return act


def huge_line(server: Hostile, size: int = 50 * MB) -> Act:
    """A 50 MB streamed reply on one SSE line (no newline until its end), written 1 MB at a time."""
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, "text/event-stream")
        h.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
        block = b"x" * MB
        for _ in range(size // MB):
            if server.stop.is_set():
                return
            h.wfile.write(block)
        h.wfile.write(b'"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
    return act


def huge_json(size: int = 50 * MB, declared: bool = True) -> Act:
    """A 50 MB JSON reply, its length declared up front or sent chunk by chunk (no Content-Length)."""
    start, end = b'{"choices": [{"index": 0, "message": {"content": "', b'"}, "finish_reason": "stop"}]}'

    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, length=len(start) + size + len(end) if declared else None)
        h.wfile.write(start)
        block = b"y" * MB
        for _ in range(size // MB):
            h.wfile.write(block)
        h.wfile.write(end)
    return act


def gzip_bomb(size: int = 50 * MB) -> Act:
    """A reply of ~50 KB on the wire that unpacks to 50 MB (Content-Encoding: gzip, though identity was asked)."""
    pack = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [pack.compress(b'{"choices": [{"index": 0, "message": {"content": "')]
    block = b"z" * MB
    parts += [pack.compress(block) for _ in range(size // MB)]
    parts.append(pack.compress(b'"}, "finish_reason": "stop"}]}') + pack.flush())
    data = b"".join(parts)
    assert gzip.decompress(data)[:12] == b'{"choices": '

    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, length=len(data), Content_Encoding="gzip")
        h.wfile.write(data)
    return act


def nested(depth: int = 100_000, stream: bool = False) -> Act:
    """A reply whose `choices` holds arrays nested `depth` deep (as JSON, or as one streamed chunk)."""
    deep = b'{"choices": ' + b"[" * depth + b"]" * depth + b"}"

    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if stream:
            head(h, "text/event-stream")
            h.wfile.write(b"data: " + deep + b"\n\ndata: [DONE]\n\n")
        else:
            send_json(h, deep)
    return act


def raw(payload: bytes, status: int = 200) -> Act:
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        send_json(h, payload, status)
    return act


def on_task(task: str, hostile: Act) -> Act:
    """`hostile` for the episode of `task`, a plain reply for the others."""
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        (hostile if f"Task {task}" in json.dumps(body) else normal)(h, body)
    return act


# -- fixtures --------------------------------------------------------------------------------------

Serve = Callable[[Callable[[Hostile], Act]], Hostile]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """serve(make): a started server answering with `make(server)`, closed after the test."""
    made: list[Hostile] = []

    def start(make: Callable[[Hostile], Act]) -> Hostile:
        s = Hostile(normal)
        s.act = make(s)
        made.append(s)
        return s

    yield start
    for s in made:
        s.close()


def registry(tmp_path: Path, servers: dict[str, Hostile], **openai: Any) -> Path:
    block = {"model": "m", "timeout_s": 5, "deadline_s": 3, "max_retries": 1, "concurrency": 2, **openai}
    text = "models:\n"
    for name, s in servers.items():
        text += f"  - name: {name}\n    backend: openai\n    openai:\n      base_url: {s.base_url}\n"
        text += "".join(f"      {k}: {json.dumps(v)}\n" for k, v in block.items())
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return path


def ask(tmp_path: Path, server: Hostile, max_tokens: int = 64, **openai: Any) -> Completion:
    backend = load_backend(load_registry(registry(tmp_path, {"remote": server}, **openai)).get("remote"))
    try:
        [c] = complete_all(backend, [[{"role": "user", "content": "hello there"}]], GenParams(max_tokens=max_tokens))
    finally:
        backend.close()
    return c


def refused(c: Completion, why: str) -> None:
    """`c` is a bad reply's Completion: no text, no counts, a one-line error saying `why`."""
    assert c.error is not None, c
    assert why in c.error and "\n" not in c.error and len(c.error) < 700, c.error
    assert (c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) == ("", "error", None, None)


# -- time: the deadline ----------------------------------------------------------------------------

def test_endless_keepalive_comments_end_at_the_deadline(tmp_path: Path, serve: Serve) -> None:
    server = serve(keepalive)
    c = ask(tmp_path, server, deadline_s=1.5, timeout_s=30)
    refused(c, "deadline")
    assert server.requests == 1  # a deadline is not retried


def test_endless_slow_tokens_end_at_the_deadline(tmp_path: Path, serve: Serve) -> None:
    server = serve(lambda server: tokens_forever(server, 0.02))
    c = ask(tmp_path, server, max_tokens=4096, deadline_s=1.5, timeout_s=30)
    refused(c, "deadline")


def test_a_silent_server_is_cut_at_the_deadline_not_after_timeout_s(tmp_path: Path, serve: Serve) -> None:
    """The read timeout of an attempt is what is left of the deadline: a server that never answers ends
    the episode at the deadline (the run goes on), not after (max_retries + 1) x timeout_s."""
    server = serve(lambda server: lambda h, body: server.stop.wait(30))
    c = ask(tmp_path, server, deadline_s=1.0, timeout_s=600, max_retries=5)
    refused(c, "deadline")
    assert server.requests == 1


# -- size: the caps --------------------------------------------------------------------------------

def test_endless_fast_tokens_hit_the_text_cap(tmp_path: Path, serve: Serve) -> None:
    server = serve(lambda server: tokens_forever(server, 0))
    c = ask(tmp_path, server, max_tokens=256, deadline_s=60)
    refused(c, f"cap of {ReplyCaps.for_tokens(256).chars} characters")


@pytest.mark.parametrize(("act", "why"), [
    (huge_line, "cap of"),
    (lambda server: huge_json(declared=True), "bytes is larger than its cap"),
    (lambda server: huge_json(declared=False), "larger than its cap"),
    (lambda server: gzip_bomb(), "larger than its cap"),
], ids=["one-sse-line", "json-declared", "json-chunked", "gzip-bomb"])
def test_a_50mb_reply_is_refused_at_its_cap(tmp_path: Path, serve: Serve, act: Any, why: str) -> None:
    server = serve(act)
    c = ask(tmp_path, server, deadline_s=60)
    refused(c, why)
    assert server.requests == 1


def test_caps_follow_max_tokens() -> None:
    small, large, huge = ReplyCaps.for_tokens(16), ReplyCaps.for_tokens(4096), ReplyCaps.for_tokens(10**9)
    assert small.bytes < large.bytes <= huge.bytes <= 32 * MB and small.chars < large.chars
    # a real reply fits: 4096 tokens streamed as vLLM does (~250 bytes a chunk), 16 characters a token
    assert large.bytes > 4096 * 250 and large.chars > 4096 * 16


def test_a_huge_error_body_is_one_short_line(tmp_path: Path, serve: Serve) -> None:
    noise = b"\x1b[31m" + b"boom \n" * (2 * MB)
    server = serve(lambda server: raw(noise, 500))
    with pytest.raises(BackendUnavailable) as err:
        ask(tmp_path, server, deadline_s=60)
    msg = str(err.value)
    assert "HTTP 500" in msg and "boom boom" in msg and "\n" not in msg and len(msg) < 700
    assert server.requests == 2  # 5xx is retried (max_retries 1), then the run stops as for a dead server


# -- shape -----------------------------------------------------------------------------------------

MALFORMED = {
    "choices-a-string": {"choices": "x"},
    "choices-empty": {"choices": []},
    "choices-missing": {"usage": {}},
    "choice-a-number": {"choices": [1]},
    "message-a-string": {"choices": [{"message": "hi"}]},
    "content-a-number": reply(5),
    "content-a-list": reply(["THOUGHT: x"]),
    "content-an-object": reply({"text": "x"}),
    "finish-a-number": reply("x", finish_reason=7),
    "reply-a-list": [reply()],
    "reply-null": None,
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_reply_is_a_bad_reply(tmp_path: Path, serve: Serve, body: Any) -> None:
    server = serve(lambda server: raw(json.dumps(body).encode()))
    c = ask(tmp_path, server)
    refused(c, "")
    assert server.requests == 1


STREAMED = {
    "delta-a-string": b'data: {"choices": [{"index": 0, "delta": "x"}]}\n\n',
    "content-a-number": b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n',
    "chunk-a-list": b"data: [1, 2]\n\n",
    "choices-an-object": b'data: {"choices": {"0": {}}}\n\n',
    "not-json": b"data: {nope\n\n",
}


@pytest.mark.parametrize("first", list(STREAMED.values()), ids=list(STREAMED))
def test_a_malformed_stream_is_a_bad_reply(tmp_path: Path, serve: Serve, first: bytes) -> None:
    def act(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, "text/event-stream")
        h.wfile.write(chunk("ok ") + first + chunk("more") + b"data: [DONE]\n\n")

    c = ask(tmp_path, serve(lambda server: act))
    refused(c, "")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_json_nested_100k_deep_is_refused_before_parsing(tmp_path: Path, serve: Serve, stream: bool) -> None:
    c = ask(tmp_path, serve(lambda server: nested(stream=stream)), max_tokens=384)  # a cap over its 200 KB
    refused(c, f"nested deeper than {MAX_DEPTH}")


# -- usage -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ['"12"', "Infinity", "-Infinity", "NaN", "-5", "1e30", "1" + "0" * 30, "true",
                                 "1.5", "null", "[3]"])
def test_a_usage_count_that_is_not_a_sane_int_is_unknown(tmp_path: Path, serve: Serve, bad: str) -> None:
    usage = (f'{{"prompt_tokens": {bad}, "completion_tokens": {bad}, '
             f'"prompt_tokens_details": {{"cached_tokens": {bad}}}}}')
    body = ('{"choices": [{"index": 0, "message": {"content": "fine"}, "finish_reason": "length"}], '
            f'"usage": {usage}}}').encode()
    c = ask(tmp_path, serve(lambda server: raw(body)))
    assert c.error is None and c.text == "fine" and c.finish_reason == "length"
    assert c.prompt_tokens is None and c.completion_tokens is None
    assert c.cached_tokens == (0 if bad == "null" else None)
    assert c.token_counts() == ({"cached": 0} if bad == "null" else {})


def test_usage_counts_keep_what_a_server_honouring_the_request_can_send() -> None:
    ok = {"prompt_tokens": 900, "completion_tokens": 64, "prompt_tokens_details": {"cached_tokens": 512}}
    assert usage_counts(ok, max_tokens=64, prompt_bound=1000) == (900, 64, 512)
    assert usage_counts({**ok, "completion_tokens": 65}, 64, 1000) == (900, None, 512)  # over max_tokens
    assert usage_counts({**ok, "prompt_tokens": 1001}, 64, 1000) == (None, 64, 512)  # over the prompt's bytes
    assert usage_counts({**ok, "prompt_tokens_details": {"cached_tokens": 901}}, 64, 1000) == (900, 64, None)
    assert usage_counts({**ok, "prompt_tokens": True}, 64, 1000)[0] is None  # a bool is not a count
    assert usage_counts(None, 64, 1000) == (None, None, None)
    assert usage_counts({"prompt_tokens": 3}, 64, 1000) == (3, None, 0)  # no cache record: nothing cached


# -- the validators, on any input ------------------------------------------------------------------

def test_too_deep_on_valid_json() -> None:
    for d in (0, 1, MAX_DEPTH - 1, MAX_DEPTH, 500):
        text = json.dumps({"a": "[[[{{{" * 50}).encode()[:-1] + b', "b": ' + b"[" * d + b"0" + b"]" * d + b"}"
        assert json.loads(text)
        assert too_deep(text, MAX_DEPTH) == (d + 1 > MAX_DEPTH)  # the strings' brackets do not count
    with pytest.raises(BadReply, match="nested deeper"):
        parse_json(b"{" * 100_000)
    with pytest.raises(BadReply, match="not JSON"):  # an int of more digits than Python reads
        parse_json(b'{"a": ' + b"9" * 5000 + b"}")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_lines_do_not_depend_on_how_the_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in zip(points, points[1:], strict=False)]
    expected = data.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert list(lines(pieces)) == [(e[:-1] if e.endswith(b"\r") else e).decode("utf-8", "replace")
                                   for e in expected]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["choices", "message", "delta", "content", "text", "index", "finish_reason",
                                         "usage", "error", "x"]), inner, max_size=5), max_leaves=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_any_json_is_a_reply_or_a_bad_reply(data: Any) -> None:
    caps = ReplyCaps.for_tokens(8)
    for shape in (data, {"choices": [data]}, {"choices": [{"message": data}]}, {"choices": [{"delta": data}]}):
        try:
            r = body_reply(shape, caps)
        except BadReply:
            pass
        else:
            assert isinstance(r.text, str) and (r.finish_reason is None or isinstance(r.finish_reason, str))
        stream = StreamReply(caps)
        try:
            stream.feed("data: " + json.dumps(shape))
        except (BadReply, MidStreamError):
            continue
        r = stream.result()
        assert isinstance(r.text, str) and (r.finish_reason is None or isinstance(r.finish_reason, str))
        usage_counts(r.usage, 8, 100)


# -- through the CLI: the run goes on and writes its summary ---------------------------------------

def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENT_HARNESS_OPENAI_BACKOFF_S": "0.01"}
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=env)


USAGE_LIES = [b'{"prompt_tokens": Infinity, "completion_tokens": -5, "prompt_tokens_details": {"cached_tokens": "12"}}',
              b'{"prompt_tokens": 1e30, "completion_tokens": 1000000000000000000000000000000}']


def usage_lies(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    send_json(h, b'{"choices": [{"index": 0, "message": {"content": "THOUGHT: hm"}, "finish_reason": "length"}], '
                 b'"usage": ' + USAGE_LIES[turn % 2] + b"}")


HOSTILE: dict[str, tuple[Callable[[Hostile], Act], str]] = {  # model: (its server's act, why its episode ends)
    "keepalive": (keepalive, "deadline"),
    "slow-tokens": (lambda server: tokens_forever(server, 0.02), "deadline"),
    "fast-tokens": (lambda server: tokens_forever(server, 0), "characters"),
    "big-line": (huge_line, "cap of"),
    "content-list": (lambda server: raw(json.dumps(reply(["x"])).encode()), "not a string"),
    "choices-string": (lambda server: raw(b'{"choices": "x"}'), "choices"),
    "deep": (lambda server: nested(), "nested deeper"),
    "usage": (lambda server: usage_lies, ""),
}


@pytest.mark.parametrize(("names", "flags"), [(list(HOSTILE), []),
                                              (["content-list", "deep", "usage"], ["--no-streaming"])],
                         ids=["streaming", "tick-loop"])
def test_run_goes_on_past_every_hostile_server_and_writes_its_summary(tmp_path: Path, serve: Serve,
                                                                      names: list[str], flags: list[str]) -> None:
    """One model per hostile server; each fails its Python/0 episode and answers Python/1 plainly. Every
    failed episode ends with exit "error" and a one-line reason, the others run to max_steps, the traces
    stay small, and summary.json (strict JSON) covers every model."""
    hostile = {name: HOSTILE[name] for name in names}
    servers = {name: serve(lambda server, act=act: on_task("Python/0", act(server)))
               for name, (act, _) in hostile.items()}
    out = tmp_path / "out"
    r = cli("--registry", str(registry(tmp_path, servers, deadline_s=3, timeout_s=5)), "--models", ",".join(servers),
            "--agent", "react", "--n", "2", "--max-steps", "2", "--no-embed", "--no-progress", "--out", str(out),
            *flags)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert set(summary) == set(hostile)
    assert all(len(line) < 2000 for line in r.stderr.splitlines())  # no server's text floods the terminal
    traces = {(t["model"]["name"], t["task_id"]): t for t in
              (json.loads(p.read_text()) for p in out.rglob("run_*.json"))}
    assert len(traces) == 2 * len(hostile)
    for path in out.rglob("run_*.json"):
        assert path.stat().st_size < 256 << 10, path
    details = traces[names[0], "Python/0"]["model"]["details"]  # the bounds the run ran under
    assert details["deadline_s"] == 3 and details["reply_caps"] == ReplyCaps.describe()
    for name, (_, why) in hostile.items():
        bad, plain = traces[name, "Python/0"]["outcome"], traces[name, "Python/1"]["outcome"]
        assert plain["completed"] and plain["exit_reason"] == "max_steps", (name, plain)
        assert bad["completed"], (name, bad)
        if name == "usage":  # lies about usage are unknown counts, not a fault; they cannot spend the budget
            assert bad["exit_reason"] == "max_steps" and bad["error"] is None, bad
            assert (bad["prompt_tokens"], bad["completion_tokens"], bad["cached_prompt_tokens"]) == (0, 0, 0)
            steps = traces[name, "Python/0"]["steps"]
            assert [s["tokens"] for s in steps if "tokens" in s] == [{}, {"cached": 0}]  # no cache record: 0
            continue
        assert bad["exit_reason"] == "error", (name, bad)
        err = bad["error"]
        assert why in err and "\n" not in err and len(err) <= 500, (name, err)
        assert summary[name]["humanevalfix"]["exit_reasons"] == {"error": 1, "max_steps": 1}
        # the server failed, not the model: no verdict (unscored), and --resume runs the episode again
        assert bad["passed"] is None and bad["score_error"]["type"] == "BackendError", (name, bad)
        assert summary[name]["humanevalfix"]["unscored"] == 1 and plain["passed"] is False
    r = cli("--registry", str(registry(tmp_path, servers, deadline_s=3, timeout_s=5)), "--models", ",".join(servers),
            "--agent", "react", "--n", "2", "--max-steps", "2", "--no-embed", "--no-progress", "--out", str(out),
            "--resume", *flags)
    assert r.returncode == 0, r.stderr[-3000:]
    redone = sum(name != "usage" for name in hostile)
    assert f"reused {2 * len(hostile) - redone}, redid {redone}" in r.stderr, r.stderr[-3000:]
