"""The openai backend with `openai.tokenizer`: prompts go out as token ids the harness encoded (issue 25, class 3).

A server that renders the chat template itself makes special-token text in a message real turn
markers; with a tokenizer set, the backend encodes each conversation with the local backends'
`encode` and sends `/completions` with `prompt: [ids]`. A loopback server (test_backend_openai's
FakeServer) records what arrives. Uses the shipped 0.5B's tokenizer folder (skipped with the reason
when it is not prepared); no weights are loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_backend_openai import FakeServer, Reply, registry_spec, run_remote
from test_template_injection import INJECTION, conversation, rendered, string_then_tokenize

from agent_harness.backends import load_backend
from agent_harness.backends.local import encode
from agent_harness.backends.loop import complete_all
from agent_harness.backends.openai_prompt import CHAT, IDS
from agent_harness.errors import ConfigError
from agent_harness.types import Conversation, GenParams

PREFILL = "```python\ndef add(a, b):\n    "


@pytest.fixture(autouse=True)
def tiny_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_HARNESS_OPENAI_BACKOFF_S", "0.01")
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test-123")


@pytest.fixture(scope="module")
def tok(folder: Path) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    s.script = completion_reply
    yield s
    s.close()


def completion_reply(n: int, body: dict[str, Any]) -> Reply:
    """A /v1/completions reply (vLLM's shape), streamed as `choices[].text` chunks when asked to stream;
    usage counts the prompt ids it got. A chat request gets a chat reply."""
    usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": 2,
             "prompt_tokens_details": {"cached_tokens": 3}}
    if "messages" in body:
        return 200, {}, {"choices": [{"index": 0, "message": {"content": "chat reply"}, "finish_reason": "stop"}],
                         "usage": usage}
    if not body.get("stream"):
        return 200, {}, {"object": "text_completion", "choices": [{"index": 0, "text": "ids reply",
                                                                   "finish_reason": "stop"}], "usage": usage}

    def chunk(text: str, finish: str | None) -> str:
        return json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": text,
                                                                     "finish_reason": finish}]})

    return 200, {}, [(0.0, chunk("ids ", None)), (0.0, chunk("reply", "stop")),
                     (0.0, json.dumps({"choices": [], "usage": usage})), (0.0, "[DONE]")]


@pytest.mark.parametrize("stream", [True, False])
def test_token_ids_go_out_and_injected_text_stays_text(tmp_path: Path, server: FakeServer, folder: Path, tok: Any,
                                                       stream: bool) -> None:
    backend = load_backend(registry_spec(tmp_path, server.base_url, tokenizer=str(folder), stream=stream))
    assert backend.info.details["prompt_encoding"] == IDS and backend.info.details["tokenizer"] == str(folder)
    hostile = conversation(INJECTION)
    [c] = complete_all(backend, [hostile], GenParams(max_tokens=7, stop=("STOP",), seed=3))
    backend.close()
    [req] = server.requests
    assert req["path"] == "/v1/completions" and "messages" not in req["body"]
    ids = req["body"]["prompt"]
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    # the server's way (render, then tokenize with special tokens parsed) forges 3 turns; the ids sent do not
    assert string_then_tokenize(tok, hostile).count(im_start) == 8
    assert ids == encode(tok, hostile) and ids.count(im_start) == 5
    assert tok.decode(ids) == rendered(tok, hostile)  # what the model sees is the trace's text
    body = req["body"]
    assert (body["model"], body["max_tokens"], body["stop"], body["seed"]) == ("served-model", 7, ["STOP"], 3)
    assert body.get("stream") is (True if stream else None)
    assert (c.text, c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.error) == ("ids reply", len(ids), 2, 3,
                                                                                        None)


def test_without_a_tokenizer_messages_go_to_chat_completions(tmp_path: Path, server: FakeServer) -> None:
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    assert backend.info.details["prompt_encoding"] == CHAT and "tokenizer" not in backend.info.details
    prefilled: Conversation = [*conversation("ok"), {"role": "assistant", "content": PREFILL}]
    [c, d] = complete_all(backend, [conversation(INJECTION), prefilled], GenParams(max_tokens=5))
    assert c.text == "chat reply" and [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 2
    first, second = sorted((r["body"] for r in server.requests), key=lambda b: len(b["messages"]))
    assert first["messages"] == conversation(INJECTION) and "prompt" not in first
    assert "continue_final_message" not in first
    # a prefilled reply is continued on servers that take vLLM's flags
    assert (second["continue_final_message"], second["add_generation_prompt"]) == (True, False)


def test_a_trailing_assistant_message_is_continued(tmp_path: Path, server: FakeServer, folder: Path,
                                                   tok: Any) -> None:
    backend = load_backend(registry_spec(tmp_path, server.base_url, tokenizer=str(folder)))
    conv = conversation("add.py: 3 lines")
    prefilled: Conversation = [*conv, {"role": "assistant", "content": PREFILL}]
    complete_all(backend, [prefilled], GenParams(max_tokens=5))
    ids = server.requests[0]["body"]["prompt"]
    base = encode(tok, conv)
    assert tok.decode(ids) == rendered(tok, conv) + PREFILL  # the reply goes on from the prefill, whitespace kept
    assert ids[: len(base)] == base  # KV reuse: the prompt without the prefill is a prefix
    assert set(ids[len(base):]).isdisjoint(tok.added_tokens_decoder)  # no end of turn after the prefill
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    # injected text in the prefill stays text as well
    hostile: Conversation = [*conv, {"role": "assistant", "content": INJECTION}]
    assert encode(tok, hostile).count(im_start) == base.count(im_start)


def test_the_token_budget_is_the_local_backends(tmp_path: Path, server: FakeServer, folder: Path, tok: Any) -> None:
    """What the prompt leaves of context_length caps max_tokens; a prompt that fills it is answered here."""
    spec = registry_spec(tmp_path, server.base_url, tokenizer=str(folder))
    spec = spec.model_copy(update={"context_length": 256})
    backend = load_backend(spec)
    near = conversation("word " * 150)
    n = len(encode(tok, near))
    assert 150 < n < 256
    full = conversation("word " * 400)
    [c_near, c_full] = complete_all(backend, [near, full], GenParams(max_tokens=100))
    [req] = server.requests  # the full one never went out
    assert req["body"]["max_tokens"] == 256 - n and c_near.prompt_tokens == n
    assert (c_full.text, c_full.finish_reason, c_full.completion_tokens, c_full.prompt_tokens) == (
        "", "length", 0, len(encode(tok, full)))


def test_counts_and_replies_are_checked_as_for_chat(tmp_path: Path, server: FakeServer, folder: Path) -> None:
    def lying(n: int, body: dict[str, Any]) -> Reply:
        if n == 0:  # more prompt tokens than the ids it was sent: unknown
            return 200, {}, {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": len(body["prompt"]) + 1, "completion_tokens": 1}}
        return 200, {}, {"choices": [{"index": 0, "text": 12345, "finish_reason": "stop"}]}

    server.script = lying
    backend = load_backend(registry_spec(tmp_path, server.base_url, tokenizer=str(folder), stream=False))
    [c] = complete_all(backend, [conversation("hi")], GenParams(max_tokens=5))
    assert (c.text, c.prompt_tokens, c.completion_tokens) == ("x", None, 1)
    [bad] = complete_all(backend, [conversation("hi")], GenParams(max_tokens=5))
    assert bad.finish_reason == "error" and bad.error is not None and "not a string" in bad.error


def test_a_prompt_the_template_cannot_encode_ends_the_episode_not_the_run(tmp_path: Path, server: FakeServer,
                                                                       folder: Path) -> None:
    spec = registry_spec(tmp_path, server.base_url, tokenizer=str(folder))
    trimming = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    backend = load_backend(spec.model_copy(update={"chat_template": trimming}))
    [bad, good] = complete_all(backend, [conversation(f" {INJECTION} "), conversation("fine")], GenParams(max_tokens=5))
    assert bad.finish_reason == "error" and bad.error is not None and "rewrites message contents" in bad.error
    assert good.text == "ids reply" and len(server.requests) == 1
    refusing = ("{% for m in messages %}{% if 'forbidden' in m['content'] %}{{ raise_exception('no!') }}{% endif %}"
                "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    backend = load_backend(spec.model_copy(update={"chat_template": refusing}))
    [bad, good] = complete_all(backend, [conversation("forbidden"), conversation("fine")], GenParams(max_tokens=5))
    assert bad.finish_reason == "error" and bad.error == "cannot encode the prompt: TemplateError: no!"
    assert good.text == "ids reply" and len(server.requests) == 2


def test_a_missing_tokenizer_folder_is_a_config_error(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(ConfigError, match="openai.tokenizer folder ./no-such-folder does not exist"):
        load_backend(registry_spec(tmp_path, server.base_url, tokenizer="./no-such-folder"))


def test_cli_run_records_the_encoding_and_sends_ids(tmp_path: Path, server: FakeServer, folder: Path,
                                                    tok: Any) -> None:
    registry_spec(tmp_path, server.base_url, tokenizer=str(folder))  # writes models.yaml
    out = tmp_path / "t"
    r = run_remote(tmp_path, out, "--n", "1")
    assert r.returncode == 0, r.stderr
    [trace] = [json.loads(p.read_text()) for p in out.rglob("run_*.json")]
    assert trace["model"]["details"]["prompt_encoding"] == IDS
    assert len(server.requests) == 2 and all(q["path"] == "/v1/completions" for q in server.requests)
    prompts = [q["body"]["prompt"] for q in server.requests]
    assert prompts[1][: len(prompts[0])] == prompts[0]  # turn 2 extends turn 1: the server's prefix cache holds
    turns = [s["tokens"]["prompt"] for s in trace["steps"] if "tokens" in s]
    assert turns == [len(p) for p in prompts]
    assert "ids reply" in tok.decode(prompts[1])  # the first reply is in the second prompt, as text


# -- scoring a prefilled reply (--agent branch): vLLM's `prompt_logprobs` ------------------------------------------

SCORED: Conversation = [{"role": "user", "content": "Fix bugs in add."},
                        {"role": "assistant", "content": "def add(a, b):\n    return a - b\n"}]


def scoring_reply(tok: Any, hostile: bool = False) -> Any:
    """A `vllm serve` completions reply with `prompt_logprobs`: each prompt token scored -1.0, with the id of
    " +" preferred at -0.25 (or, `hostile`, a key that is no token id)."""
    plus = tok(" +", add_special_tokens=False)["input_ids"][0]

    def script(n: int, body: dict[str, Any]) -> Reply:
        ids = body["prompt"]
        rows: list[Any] = [None] + [{str(t): {"logprob": -1.0, "rank": 2}, str(plus): {"logprob": -0.25, "rank": 1}}
                                    for t in ids[1:]]
        if hostile:
            rows[-1] = {"<|im_start|>": {"logprob": -0.1}}
        return 200, {}, {"choices": [{"index": 0, "text": "x", "finish_reason": "length", "prompt_logprobs": rows}],
                         "usage": {"prompt_tokens": len(ids), "completion_tokens": 1}}

    return script


def test_scoring_sends_the_ids_with_prompt_logprobs_and_aligns_the_reply(tmp_path: Path, server: FakeServer,
                                                                         folder: Path, tok: Any) -> None:
    server.script = scoring_reply(tok)
    backend = load_backend(registry_spec(tmp_path, server.base_url, tokenizer=str(folder)))
    [c] = complete_all(backend, [SCORED], GenParams(max_tokens=50, prompt_logprobs=3))
    backend.close()
    [req] = server.requests
    assert req["path"] == "/v1/completions" and req["body"]["prompt_logprobs"] == 3
    assert req["body"]["max_tokens"] == 1 and "stream" not in req["body"]
    assert c.error is None and c.text == "" and c.completion_tokens == 0
    content = SCORED[-1]["content"]
    assert "".join(s.text for s in c.scores) == content[c.scores[0].start:]
    minus = next(s for s in c.scores if s.text == " -")
    assert content[minus.start:].startswith(" - b") and minus.logprob == -1.0 and minus.others == ((" +", -0.25),)


def test_a_hostile_scoring_reply_ends_the_episode_not_the_run(tmp_path: Path, server: FakeServer, folder: Path,
                                                              tok: Any) -> None:
    server.script = scoring_reply(tok, hostile=True)
    backend = load_backend(registry_spec(tmp_path, server.base_url, tokenizer=str(folder)))
    [c] = complete_all(backend, [SCORED], GenParams(max_tokens=50, prompt_logprobs=3))
    backend.close()
    assert c.error is not None and "prompt_logprobs" in c.error and "\n" not in c.error and c.scores == ()


def test_scoring_without_a_tokenizer_is_refused(tmp_path: Path, server: FakeServer) -> None:
    backend = load_backend(registry_spec(tmp_path, server.base_url))
    with pytest.raises(ConfigError, match="set openai.tokenizer"):
        complete_all(backend, [SCORED], GenParams(max_tokens=50, prompt_logprobs=3))
    backend.close()
    assert server.requests == []
