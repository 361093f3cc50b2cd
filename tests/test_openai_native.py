"""The openai backend with native tool calls (`GenParams.tools`), against test_backend_openai's FakeServer on
127.0.0.1: what goes out (the API's `tools`, assistant tool calls with JSON-text arguments, tool messages)
and what comes back (the server's parsed `tool_calls`, streamed or not, read as hostile input).

A bad `tool_calls` shape is a Completion with `error` (its episode ends; the next request is answered);
a text-protocol request is sent as before. The token-id test uses the shipped 0.5B's tokenizer folder
(skipped with the reason when it is not prepared); no weights are loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_backend_openai import FakeServer, Reply, echo_reply, registry_spec, sse_events, tool_call_reply

from agent_harness.backends import load_backend
from agent_harness.backends.loop import complete_all
from agent_harness.backends.openai_backend import OpenAIBackend
from agent_harness.backends.openai_reply import MAX_TOOL_CALLS, ReplyCaps, prompt_token_bound
from agent_harness.protocol.native import tool_schemas
from agent_harness.types import Completion, Conversation, GenParams, NativeCall, ToolParam, ToolSpec

TOOLS = (ToolSpec("read_file", "Read a file of the workspace.", (ToolParam("path", "string", "the file's path"),)),
         ToolSpec("run_tests", "Run the task's tests."))
ARGS = {"path": "café/a.py"}  # non-ASCII: sent as itself, not \\u escapes
NATIVE = GenParams(max_tokens=64, tools=TOOLS)


@pytest.fixture(autouse=True)
def test_key(tiny_backoff: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-123")


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


def native_conv() -> Conversation:
    """A native-protocol episode after one call: the assistant's tool call (arguments as an object, the way
    chat templates take them) and the tool's answer."""
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix a.py"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call_a", "type": "function",
                             "function": {"name": "read_file", "arguments": ARGS}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "x = 1\n"}]


def backend(tmp_path: Path, server: FakeServer, **openai: Any) -> OpenAIBackend:
    b = load_backend(registry_spec(tmp_path, server.base_url, **openai))
    assert isinstance(b, OpenAIBackend)
    return b


def ask(b: OpenAIBackend, conv: Conversation, params: GenParams = NATIVE) -> Completion:
    [c] = complete_all(b, [conv], params)
    return c


def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[float, str]:
    return 0.0, json.dumps({"object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def calls_chunk(*pieces: Any, finish: str | None = None) -> tuple[float, str]:
    """A chunk of streamed tool-call pieces (any value: hostile ones too)."""
    return chunk({"tool_calls": list(pieces)}, finish)


END = [chunk({}, "tool_calls"), (0.0, json.dumps({"choices": [], "usage": {"prompt_tokens": 20}})), (0.0, "[DONE]")]


# -- what goes out, what comes back ------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_tools_and_api_messages_go_out_and_calls_come_back(tmp_path: Path, server: FakeServer, stream: bool) -> None:
    server.script = lambda n, body: tool_call_reply([("read_file", '{"path": "b.py"}'), ("run_tests", "{}")])
    b = backend(tmp_path, server, stream=stream)
    conv = native_conv()
    c = ask(b, conv)
    b.close()
    assert (c.text, c.finish_reason, c.error) == ("", "stop", None)  # "tool_calls" maps to stop; no text is fine
    assert c.tool_calls == (NativeCall("read_file", '{"path": "b.py"}', "call_0"),
                            NativeCall("run_tests", "{}", "call_1"))
    assert (c.prompt_tokens, c.completion_tokens) == (20, 9)
    [req] = server.requests
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert body["tools"] == tool_schemas(TOOLS)
    assert body.get("stream") is (True if stream else None)
    system, user, assistant, tool = body["messages"]
    assert (system, user) == (conv[0], conv[1])
    [call] = assistant["tool_calls"]
    assert call == {"id": "call_a", "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps(ARGS, ensure_ascii=False)}}
    assert "café" in call["function"]["arguments"]
    assert tool == {"role": "tool", "tool_call_id": "call_a", "content": "x = 1\n"}
    assert conv == native_conv()  # the caller's conversation keeps its arguments as an object


def test_a_reply_with_text_and_calls_keeps_both(tmp_path: Path, server: FakeServer) -> None:
    server.script = lambda n, body: tool_call_reply([("run_tests", "{}")], content="Let me run them.")
    c = ask(backend(tmp_path, server, stream=False), native_conv())
    assert (c.text, c.tool_calls) == ("Let me run them.", (NativeCall("run_tests", "{}", "call_0"),))


def test_object_arguments_and_a_missing_id(tmp_path: Path, server: FakeServer) -> None:
    """Some servers send `arguments` as an object: it becomes JSON text; `id` may be absent."""
    msg = {"role": "assistant", "content": None,
           "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": ARGS}}]}
    server.script = lambda n, body: (200, {}, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})
    c = ask(backend(tmp_path, server, stream=False), native_conv())
    assert c.tool_calls == (NativeCall("read_file", json.dumps(ARGS, ensure_ascii=False), None),)


def test_streamed_pieces_are_put_together_by_index(tmp_path: Path, server: FakeServer) -> None:
    """Pieces of two calls interleaved, the second call's first: the calls come back in index order,
    each with its own arguments; a name or id repeated in a later piece is not appended."""
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "ok"}),
              calls_chunk({"index": 1, "id": "c1", "type": "function", "function": {"name": "run_tests"}}),
              calls_chunk({"index": 0, "id": "c0", "type": "function",
                           "function": {"name": "read_file", "arguments": '{"pa'}}),
              calls_chunk({"index": 1, "function": {"arguments": "{"}},
                          {"index": 0, "function": {"arguments": 'th":'}}),
              calls_chunk({"index": 0, "id": "c0", "function": {"name": "read_file", "arguments": ' "a.py"}'}}),
              calls_chunk({"index": 1, "function": {"arguments": "}"}}), *END]
    server.script = lambda n, body: (200, {}, events)
    c = ask(backend(tmp_path, server), native_conv())
    assert (c.text, c.error, c.prompt_tokens) == ("ok", None, 20)
    assert c.tool_calls == (NativeCall("read_file", '{"path": "a.py"}', "c0"), NativeCall("run_tests", "{}", "c1"))


def test_sse_events_streams_a_tool_call_reply_as_vllm_does() -> None:
    """The fake server's own streaming of `tool_call_reply`: id, type and name first, then arguments."""
    _, _, reply = tool_call_reply([("read_file", '{"path": "b.py"}')])
    deltas = [json.loads(data)["choices"][0]["delta"] for _, data in sse_events(reply)[:-2]]
    pieces = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert pieces[0] == {"index": 0, "id": "call_0", "type": "function", "function": {"name": "read_file"}}
    assert "".join(p["function"].get("arguments", "") for p in pieces) == '{"path": "b.py"}'


# -- the text protocol is unchanged ------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_a_text_protocol_request_sends_no_tools(tmp_path: Path, server: FakeServer, stream: bool) -> None:
    conv: Conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}]
    c = ask(backend(tmp_path, server, stream=stream), conv, GenParams(max_tokens=8))
    assert (c.text, c.tool_calls, c.error) == ("echo: q", (), None)
    [req] = server.requests
    assert "tools" not in req["body"] and req["body"]["messages"] == conv


# -- hostile tool_calls: the episode ends, the run goes on ---------------------------------------------

def message_reply(message: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "tool_calls"}]}


def call(name: Any = "read_file", arguments: Any = "{}", **extra: Any) -> dict[str, Any]:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


CAP = ReplyCaps.for_tokens(NATIVE.max_tokens).chars
WHOLE = {  # a whole reply's message -> what its error says
    "not a list": ({"tool_calls": {"name": "read_file"}}, "message.tool_calls is dict, not a list"),
    "call not an object": ({"tool_calls": ["read_file"]}, "message.tool_calls[0] is str, not an object"),
    "function missing": ({"tool_calls": [{"id": "c", "type": "function"}]}, "tool_calls[0].function is NoneType"),
    "function a string": ({"tool_calls": [{"function": "read_file"}]}, "tool_calls[0].function is str, not an object"),
    "name not a string": ({"tool_calls": [call(name=["read_file"])]}, "function.name is list, not a string"),
    "name missing": ({"tool_calls": [{"function": {"arguments": "{}"}}]}, "function.name is NoneType, not a string"),
    "arguments a list": ({"tool_calls": [call(arguments=[1])]}, "arguments is list, not a string or an object"),
    "arguments missing": ({"tool_calls": [{"function": {"name": "run_tests"}}]}, "arguments is NoneType"),
    "id an int": ({"tool_calls": [call(id=7)]}, "tool_calls[0].id is int, not a string"),
    "arguments past the cap": ({"tool_calls": [call(arguments="x" * (CAP + 1))]}, f"its cap of {CAP} characters"),
    "text and arguments past the cap together": (
        {"content": "t" * (CAP // 2), "tool_calls": [call(arguments="x" * (CAP // 2 + 1))]}, "its cap of"),
    "too many calls": ({"tool_calls": [call()] * (MAX_TOOL_CALLS + 1)}, f"more than {MAX_TOOL_CALLS}"),
}


def stream_of(*pieces: tuple[float, str]) -> list[tuple[float, str]]:
    return [chunk({"role": "assistant", "content": ""}), *pieces, *END]


HEAD = {"index": 0, "id": "c", "type": "function", "function": {"name": "read_file"}}
STREAMED = {  # a streamed reply -> what its error says
    "tool_calls not a list": (stream_of(chunk({"tool_calls": "read_file"})), "delta.tool_calls is str, not a list"),
    "piece not an object": (stream_of(calls_chunk(3)), "a streamed tool call is int, not an object"),
    "index a string": (stream_of(calls_chunk({**HEAD, "index": "0"})), "index '0' is not an int"),
    "index a bool": (stream_of(calls_chunk({**HEAD, "index": True})), "index True is not an int"),
    "index negative": (stream_of(calls_chunk({**HEAD, "index": -1})), "index -1 is not an int"),
    "index huge": (stream_of(calls_chunk({**HEAD, "index": 10**30})), "is not an int in [0, 64)"),
    "name not a string": (stream_of(calls_chunk({**HEAD, "function": {"name": 5}})), "name is int, not a string"),
    "function a list": (stream_of(calls_chunk({**HEAD, "function": []})), "function is list, not an object"),
    "arguments a number": (stream_of(calls_chunk({**HEAD, "function": {"name": "f", "arguments": 1}})),
                           "arguments is int, not a string or an object"),
    "id an object": (stream_of(calls_chunk({**HEAD, "id": {}})), "id is dict, not a string"),
    "a call never named": (stream_of(calls_chunk({"index": 0, "function": {"arguments": "{}"}})),
                           "streamed tool call 0 has no function name"),
    "arguments past the cap in small pieces": (
        stream_of(calls_chunk(HEAD),
                  *[calls_chunk({"index": 0, "function": {"arguments": "x" * 100}})] * (CAP // 100 + 1)),
        f"its cap of {CAP} characters"),
    "10,000 calls, one per chunk": (
        stream_of(*[calls_chunk({**HEAD, "index": i, "id": f"c{i}"}) for i in range(10_000)]),
        f"index {MAX_TOOL_CALLS} is not an int in [0, {MAX_TOOL_CALLS})"),
    "10,000 calls in one chunk": (stream_of(calls_chunk(*[{**HEAD, "index": i} for i in range(10_000)])),
                                  f"10000 tool calls, more than {MAX_TOOL_CALLS}"),
}


def then_echo(first: Reply) -> Any:
    """A script: `first` for the first request, an echo for the next (the run goes on)."""
    return lambda n, body: first if n == 0 else echo_reply(body)


@pytest.mark.parametrize(("message", "says"), WHOLE.values(), ids=list(WHOLE))
def test_a_hostile_whole_reply_ends_the_episode(tmp_path: Path, server: FakeServer, message: dict[str, Any],
                                                 says: str) -> None:
    server.script = then_echo((200, {}, message_reply(message)))
    b = backend(tmp_path, server, stream=False)
    bad, good = ask(b, native_conv()), ask(b, native_conv())
    b.close()
    assert (bad.finish_reason, bad.tool_calls, bad.text) == ("error", (), "")
    assert bad.error is not None and says in bad.error and "\n" not in bad.error, bad.error
    assert good.error is None and good.text == "echo: x = 1\n"
    assert len(server.requests) == 2  # a bad reply is not retried


@pytest.mark.parametrize("case", list(STREAMED))
def test_a_hostile_stream_ends_the_episode(tmp_path: Path, server: FakeServer, case: str) -> None:
    events, says = STREAMED[case]
    server.script = then_echo((200, {}, events))
    b = backend(tmp_path, server)
    # 10,000 calls: a byte cap that lets them all arrive (the call limits, not the size, end the reply)
    params = GenParams(max_tokens=2000, tools=TOOLS) if case.startswith("10,000") else NATIVE
    bad, good = ask(b, native_conv(), params), ask(b, native_conv(), params)
    b.close()
    assert (bad.finish_reason, bad.tool_calls, bad.text) == ("error", (), "")
    assert bad.error is not None and says in bad.error and "\n" not in bad.error, bad.error
    assert good.error is None and good.text == "echo: x = 1\n"
    assert len(server.requests) == 2


# -- usage: the prompt bound counts tools and tool calls -----------------------------------------------

def test_the_prompt_bound_counts_tools_and_call_arguments() -> None:
    plain = prompt_token_bound(native_conv())
    short_args, long_args = native_conv(), native_conv()
    short_args[2]["tool_calls"][0]["function"]["arguments"] = {"content": ""}
    long_args[2]["tool_calls"][0]["function"]["arguments"] = {"content": "é" * 3000}
    assert prompt_token_bound(long_args) >= prompt_token_bound(short_args) + 6000  # two bytes each
    schemas = tool_schemas(TOOLS)
    assert prompt_token_bound(native_conv(), schemas) >= plain + len(json.dumps(schemas))


def test_usage_counts_past_the_text_alone_are_kept_when_tools_explain_them(tmp_path: Path,
                                                                          server: FakeServer) -> None:
    """A 4000-character tool description: a prompt of 3000 tokens is sane (the text alone bounds ~1100)."""
    big = (ToolSpec("write_file", "Write a file. " * 300, (ToolParam("content", "string", "the new text"),)),)
    conv: Conversation = [{"role": "user", "content": "hi"}]
    assert prompt_token_bound(conv) < 3000

    def reply(n: int, body: dict[str, Any]) -> Reply:
        return 200, {}, {"choices": [{"index": 0, "message": {"content": "done"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3000, "completion_tokens": 1}}

    server.script = reply
    b = backend(tmp_path, server, stream=False)
    with_tools, without = ask(b, conv, GenParams(max_tokens=8, tools=big)), ask(b, conv, GenParams(max_tokens=8))
    assert with_tools.prompt_tokens == 3000 and without.prompt_tokens is None


# -- token-id mode: the harness's template renders the tools ------------------------------------------

def test_token_ids_render_the_tools_here(tmp_path: Path, server: FakeServer, folder: Path) -> None:
    import transformers

    from agent_harness.backends.local import encode

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    server.script = lambda n, body: (200, {}, {
        "choices": [{"index": 0, "text": "<tool_call>", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(body["prompt"])}})
    b = backend(tmp_path, server, tokenizer=str(folder), stream=False)
    conv = native_conv()
    c = ask(b, conv)
    b.close()
    [req] = server.requests
    ids = req["body"]["prompt"]
    assert req["path"] == "/v1/completions" and "tools" not in req["body"] and "messages" not in req["body"]
    assert ids == encode(tok, conv, None, TOOLS) != encode(tok, conv)
    assert "Read a file of the workspace." in tok.decode(ids)  # the template rendered the tools
    assert (c.text, c.tool_calls, c.prompt_tokens) == ("<tool_call>", (), len(ids))
