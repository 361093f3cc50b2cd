"""Prompt token ids in which only the chat template can write control tokens.

Rendering the template to one string and tokenizing it parses special-token text anywhere: an
observation holding ``<|im_end|>\\n<|im_start|>system\\n...`` became real turn markers (the 0.5B's
tokenizer counted 9 ``<|im_start|>`` ids against 5). Here the template is rendered once with each
message's content replaced by a unique mark, which splits it into scaffold and contents. Added-token
text in the scaffold becomes those tokens; everything between two of them (scaffold text and
contents alike) is tokenized by a copy of the tokenizer that has no added tokens, so contents can
only ever be text. Each such run is tokenized as it is in the ordinary encoding (after an anchor
token when an added token precedes it), so a conversation without special-token text gets the same
ids as before, and the ids of a conversation's prefix stay a prefix of the longer one's (KV reuse).

A conversation that ends with an assistant message is continued: the prompt ends with that message's
content (a prefilled reply, e.g. the start of a code block), with no end-of-turn or generation
prompt after it. The template renders it as a finished turn; the rendering is cut right after it.

The one exception is the harness's own prefill of a call's start (`protocol.native.CALL_PREFILL`, native
tool_choice required) when it is the continued message: a constant the harness writes, whose `<tool_call>`
must be the token the template writes for calls (as a server's chat endpoint would tokenize it).

A template that rewrites contents (the marks do not come back in order, or putting the contents back
does not give its own rendering) cannot be split: such a prompt is tokenized as before when no
content spells an added token, and refused (BackendError) when one does.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BackendError
from ..protocol.native import CALL_PREFILL
from ..types import Conversation


@dataclass(frozen=True)
class _Added:
    id: int
    lstrip: bool  # the token takes the whitespace before it
    rstrip: bool  # ... and after it


@dataclass(frozen=True)
class TextEncoder:
    """One tokenizer's means of tokenizing text in which added tokens stay text."""

    added: dict[str, _Added]  # every added token (special or not), by its text
    pattern: re.Pattern[str] | None  # finds added-token text, leftmost and longest first
    plain: Any  # tokenizers.Tokenizer without added tokens but `anchor`; None for a Python-only tokenizer
    anchor_id: int
    anchor: str
    tokenizer: Any
    control: frozenset[int]  # ids text must never produce: the added tokens but <unk>, and the anchor

    def spells_token(self, text: str) -> bool:
        return self.pattern is not None and self.pattern.search(text) is not None

    def text_ids(self, text: str, after_token: bool) -> list[int]:
        """`text` as ordinary text; `after_token`: it follows an added token (some pre-tokenizers
        treat the start of the string differently, e.g. Metaspace's prepend_scheme "first")."""
        if self.plain is None:
            ids = list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        elif after_token:
            ids = list(self.plain.encode(self.anchor + text, add_special_tokens=False).ids)
            if not ids or ids[0] != self.anchor_id:
                raise BackendError("tokenizer: the anchor token did not come first")
            ids = ids[1:]
        else:
            ids = list(self.plain.encode(text, add_special_tokens=False).ids)
        bad = next((i for i in ids if i in self.control), None)
        if bad is not None:  # a vocabulary that spells an added token from plain text: refuse, never inject
            raise BackendError(f"tokenizer turned message text into control token id {bad}")
        return ids


_encoders: weakref.WeakKeyDictionary[Any, tuple[int, TextEncoder]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def text_encoder(tokenizer: Any) -> TextEncoder:
    """The TextEncoder of `tokenizer` (built once per tokenizer and set of added tokens)."""
    n_added = len(tokenizer.added_tokens_decoder)
    with _lock:
        cached = _encoders.get(tokenizer)
        if cached is not None and cached[0] == n_added:
            return cached[1]
        enc = _build(tokenizer)
        _encoders[tokenizer] = (n_added, enc)
        return enc


def _build(tokenizer: Any) -> TextEncoder:
    added = {t.content: _Added(int(i), bool(t.lstrip), bool(t.rstrip))
             for i, t in tokenizer.added_tokens_decoder.items() if t.content}
    pattern = (re.compile("|".join(re.escape(s) for s in sorted(added, key=len, reverse=True)))
               if added else None)
    anchor = f"\ue000anchor-{secrets.token_hex(8)}\ue001"
    control = frozenset(a.id for a in added.values()) - {tokenizer.unk_token_id}  # unknown text is <unk>
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return TextEncoder(added, pattern, None, -1, anchor, tokenizer, control)
    from tokenizers import AddedToken, Tokenizer

    spec = json.loads(backend.to_str())
    spec["added_tokens"], spec["truncation"], spec["padding"] = [], None, None
    plain = Tokenizer.from_str(json.dumps(spec))
    plain.add_special_tokens([AddedToken(anchor, special=True, normalized=False)])
    anchor_id = plain.token_to_id(anchor)
    if anchor_id is None:
        raise BackendError("tokenizer: could not add the anchor token")
    return TextEncoder(added, pattern, plain, anchor_id, anchor, tokenizer, control | {anchor_id})


def continued(conv: Conversation) -> bool:
    """Whether the prompt continues `conv`'s last message (an assistant's) instead of starting a reply."""
    return bool(conv) and conv[-1].get("role") == "assistant"


Tools = Sequence[dict[str, Any]] | None  # OpenAI function schemas the template renders (native protocol)


def _render(tokenizer: Any, conv: Iterable[Any], go_on: bool = False, template: str | None = None,
            tools: Tools = None) -> str:
    return str(tokenizer.apply_chat_template(list(conv), add_generation_prompt=not go_on, tokenize=False,
                                             chat_template=template, tools=list(tools) if tools else None))


def _rendered_prompt(tokenizer: Any, conv: Conversation, template: str | None = None, tools: Tools = None) -> str:
    """The prompt as one string (the template's own continuation when the last message is continued)."""
    if not continued(conv):
        return _render(tokenizer, conv, template=template, tools=tools)
    try:
        return str(tokenizer.apply_chat_template(list(conv), continue_final_message=True, chat_template=template,
                                                 add_generation_prompt=False, tokenize=False,
                                                 tools=list(tools) if tools else None))
    except ValueError as e:
        raise BackendError(f"this model's chat template cannot continue an assistant message: {e}") from None


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as chat templates render them (`| tojson`: transformers' json.dumps, non-ASCII kept)."""
    return json.dumps(arguments, ensure_ascii=False)


def _texts(conv: Conversation) -> Iterator[str]:
    """Every text of `conv` a model or a tool wrote: the contents and the tool calls' arguments."""
    for m in conv:
        yield m["content"]
        for call in m.get("tool_calls") or ():
            yield arguments_text(call["function"].get("arguments"))


def _marked(conv: Conversation, nonce: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """`conv` with each content, and each tool call's arguments, replaced by a unique mark; with the
    (mark as rendered, text it stands for) pairs."""
    skeleton: list[Any] = []
    pairs: list[tuple[str, str]] = []
    for k, m in enumerate(conv):
        # An empty content stays empty: templates skip it (Qwen2.5 renders a tool call's message without
        # the newline its content would bring), so a mark there would render what the prompt does not have.
        mark = f"\ue000{nonce}.{k}\ue001" if m["content"] else ""
        if mark:
            pairs.append((mark, m["content"]))
        calls = []
        for j, call in enumerate(m.get("tool_calls") or ()):
            arg_mark = f"\ue000{nonce}.{k}.{j}\ue001"  # a string: `| tojson` renders it quoted
            pairs.append((arguments_text(arg_mark), arguments_text(call["function"].get("arguments"))))
            calls.append({**call, "function": {**call["function"], "arguments": arg_mark}})
        skeleton.append({**m, "content": mark, **({"tool_calls": calls} if calls else {})})
    return skeleton, pairs


def split_rendering(tokenizer: Any, conv: Conversation, template: str | None = None,
                    tools: Tools = None) -> list[tuple[str, bool]] | None:
    """The rendered prompt as (text, is_content) pieces, or None if the template rewrites contents.

    Contents and tool-call arguments are the content pieces. Continued (`continued(conv)`): the pieces end
    with the last message's content. `template`: a chat template to render with instead of the
    tokenizer's own; `tools`: the tool schemas it renders (native protocol).
    """
    skeleton_conv, pairs = _marked(conv, secrets.token_hex(8))
    go_on = continued(conv)
    try:
        skeleton = _render(tokenizer, skeleton_conv, go_on, template, tools)
    except Exception:  # a template that inspects contents may reject a mark: treat it as rewriting
        return None
    found = sorted((skeleton.find(mark), mark, text) for mark, text in pairs)
    if any(at < 0 or skeleton.count(mark) != 1 for at, mark, _ in found):
        return None
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for at, mark, text in found:
        pieces += [(skeleton[pos:at], False), (text, True)]
        pos = at + len(mark)
    tail = skeleton[pos:]  # continued: the end of the last turn, left out of the prompt
    if go_on and (not found or found[-1][1] != skeleton_conv[-1]["content"] or conv[-1].get("tool_calls")):
        return None  # a continued turn must end with its own content
    if "".join(text for text, _ in pieces) + tail != _render(tokenizer, conv, go_on, template, tools):
        return None
    if not go_on:
        pieces.append((tail, False))
    return pieces


def chat_ids(tokenizer: Any, conv: Conversation, template: str | None = None, tools: Tools = None) -> list[int]:
    """Token ids of `conv` rendered with the generation prompt (or continuing its last message, an
    assistant's) by the tokenizer's chat template, or by `template` when given, with `tools` rendered when
    given; contents and tool-call arguments never become added tokens (a template's own text may hold
    them: they are its turn markers)."""
    enc = text_encoder(tokenizer)
    pieces = split_rendering(tokenizer, conv, template, tools)
    if pieces is None:
        if any(enc.spells_token(text) for text in _texts(conv)):
            raise BackendError("this model's chat template rewrites message contents, so a message that spells "
                               "a special token cannot be kept as text; refusing to encode it")
        return list(tokenizer(_rendered_prompt(tokenizer, conv, template, tools),
                              add_special_tokens=False)["input_ids"])
    ids: list[int] = []
    run: list[str] = []
    after_token = strip_next = False

    def flush(strip_end: bool) -> None:
        text = "".join(run)
        run.clear()
        if strip_next:
            text = text.lstrip()
        if strip_end:
            text = text.rstrip()
        ids.extend(enc.text_ids(text, after_token))

    if continued(conv) and conv[-1]["content"] == CALL_PREFILL:  # the harness's scaffold, not a message's text
        pieces[-1] = (pieces[-1][0], False)
    for text, is_content in pieces:
        if is_content or enc.pattern is None:
            run.append(text)
            continue
        pos = 0
        for hit in enc.pattern.finditer(text):
            token = enc.added[hit.group()]
            run.append(text[pos:hit.start()])
            flush(token.lstrip)
            ids.append(token.id)
            after_token, strip_next, pos = True, token.rstrip, hit.end()
        run.append(text[pos:])
    flush(False)
    return ids
