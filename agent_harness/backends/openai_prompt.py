"""What the openai backend sends for a conversation: its messages, or prompt token ids encoded here.

A server that renders the chat template itself (``/chat/completions``) tokenizes the rendering with
special tokens parsed: against `vllm serve` 0.32 an observation holding
``<|im_end|>\\n<|im_start|>system\\n...`` became real turn markers (its /tokenize counted 7
``<|im_start|>`` against 5), and no request option or server flag prevents it. With `openai.tokenizer`
set (the served model's tokenizer), a conversation is encoded by the local backends' `encode`
(contents stay text; a trailing assistant message is continued) and sent to ``/completions`` as
``prompt: [ids]``: the server computes on exactly those ids, and its `usage.prompt_tokens` is
checked against their number. Unset (a foreign endpoint), the messages go to ``/chat/completions``
as before. The trace header's `details.prompt_encoding` says which. A request's own chat template
(`GenParams.chat_template`, the calibrated single-shot's) is used for the encoding here, or sent as
vLLM's `chat_template` field in chat mode (`vllm serve` takes it only with
--trust-request-chat-template; a server that refuses it answers 4xx, which stops the run with its message).
A native-protocol request's tools (`GenParams.tools`) are rendered by the template here, or sent as the
API's `tools` (OpenAI function schemas) with the messages in the API's shape (`api_message`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MissingExtraError
from ..protocol.native import tool_schemas
from ..types import Conversation, Message, ToolSpec
from .chat_ids import continued
from .local import encode, load_tokenizer
from .openai_reply import prompt_token_bound

if TYPE_CHECKING:
    from ..registry import ModelSpec

IDS = "token ids (harness tokenizer)"
CHAT = "server chat template (special-token text in contents is not guarded)"


@dataclass(frozen=True)
class Prompt:
    """The request's prompt fields and what bounds the server's prompt-token count."""

    fields: dict[str, Any]  # {"prompt": ids} or {"messages": [...]} (+ continuation flags, `tools`)
    bound: int  # the most prompt tokens `usage` may report
    n_ids: int | None  # the number of prompt ids, when encoded here


def _source(spec: ModelSpec, name: str) -> str:
    """A local folder (resolved) or a hub id, as `from_pretrained` takes it."""
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local.resolve())
    if name.startswith(("/", "./", "../", "~")):
        raise ConfigError(f"model '{spec.name}': openai.tokenizer folder {name} does not exist")
    return name


class PromptEncoder:
    """Builds each request's prompt: token ids with a tokenizer (`openai.tokenizer`), else chat messages."""

    def __init__(self, spec: ModelSpec, tokenizer: str | None) -> None:
        self.tokenizer: Any = None
        self.source: str | None = None
        self._lock = threading.Lock()  # a fast tokenizer used from several threads at once can fail
        if tokenizer is None:
            return
        try:
            import transformers
        except ImportError:
            raise MissingExtraError("openai.tokenizer needs transformers: pip install 'agent-harness[hf]'") from None
        self.source = _source(spec, tokenizer)
        self.tokenizer = load_tokenizer(transformers, spec, self.source)

    @property
    def path(self) -> str:
        """The endpoint's path under `base_url`."""
        return "/chat/completions" if self.tokenizer is None else "/completions"

    def details(self) -> dict[str, Any]:
        """For the trace header (`model.details`)."""
        if self.tokenizer is None:
            return {"prompt_encoding": CHAT}
        return {"prompt_encoding": IDS, "tokenizer": self.source}

    def prompt(self, conv: Conversation, chat_template: str | None = None, tools: Sequence[ToolSpec] = ()) -> Prompt:
        """The prompt of `conv` (rendered by `chat_template` when given, else the model's template), with
        `tools` (native protocol: rendered by the template here, or sent as the API's `tools`);
        BackendError when it cannot be encoded without turning text into tokens."""
        if self.tokenizer is None:
            schemas = tool_schemas(tools)
            fields: dict[str, Any] = {"messages": [api_message(m) for m in conv]}
            if continued(conv):  # vLLM's (and SGLang's) extension; an endpoint without it refuses the request
                fields |= {"continue_final_message": True, "add_generation_prompt": False}
            if chat_template is not None:
                fields["chat_template"] = chat_template
            if schemas:
                fields["tools"] = schemas
            return Prompt(fields, prompt_token_bound(conv, schemas), None)
        with self._lock:
            ids = encode(self.tokenizer, conv, chat_template, tools)
        return Prompt({"prompt": ids}, len(ids), len(ids))


def api_message(m: Message) -> dict[str, Any]:
    """`m` as the chat API takes it: a tool call's `arguments` as JSON text (templates take an object);
    a tool message as it is (role "tool", `tool_call_id`, content)."""
    calls = m.get("tool_calls")
    if not calls:
        return dict(m)
    sent = []
    for call in calls:
        fn = call["function"]
        args = fn.get("arguments")
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        sent.append({**call, "function": {**fn, "arguments": text}})
    return {**m, "tool_calls": sent}
