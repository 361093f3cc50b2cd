"""Scoring a prefilled reply (`GenParams.prompt_logprobs`): the backends that run a tokenizer find the tokens of
the conversation's last (assistant) message and turn the engine's per-token log-probabilities into
`TokenScore`s, whose texts and offsets are in the message's own characters.

The message's tokens are those after the longest common prefix of the prompt's ids and the ids of the same
conversation with that message empty. A token's text is what it adds to the decoded text before it (a
character split over two tokens belongs to the one that ends it); an alternative whose text would end in half
a character is left out, as no prefill can hold it. Decoding looks back a few tokens only, so scoring a long
message costs little more than its length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import BackendError, ConfigError
from ..types import Conversation, GenParams, TokenScore

MAX_PROMPT_LOGPROBS = 20  # vLLM's default limit; more is a configuration error on every backend
_WINDOW = 8  # tokens decoded before the one whose text is wanted: enough for any UTF-8 character
_SPLIT = "\ufffd"

MAX_TOKEN_ID = 1 << 31
MAX_SCORED = 64  # log-probabilities at one prompt position (vLLM gives at most its max_logprobs + 1)

Decode = Callable[[list[int]], str]
Row = Mapping[int, float] | None  # token id -> log-probability at one position (the position's own token included)


def decoder(tokenizer: Any) -> Decode:
    """A transformers tokenizer's decode that gives back the text as tokenized (no clean-up of spaces)."""
    return lambda ids: str(tokenizer.decode(ids, clean_up_tokenization_spaces=False))


def check(conversation: Conversation, params: GenParams) -> None:
    """Refuse, in one line, a scoring request that cannot be one."""
    if not 0 < params.prompt_logprobs <= MAX_PROMPT_LOGPROBS:
        raise ConfigError(f"prompt_logprobs must be between 1 and {MAX_PROMPT_LOGPROBS}, got {params.prompt_logprobs}")
    if not conversation or conversation[-1]["role"] != "assistant":
        raise ConfigError("a scoring request needs a conversation that ends with the assistant's (prefilled) reply")


def message_start(encode: Callable[[Conversation], list[int]], conversation: Conversation) -> tuple[list[int], int]:
    """The prompt's ids and the index of the first id of its last message's content."""
    ids = encode(conversation)
    head = encode([*conversation[:-1], {"role": "assistant", "content": ""}])
    n = 0
    for a, b in zip(ids, head, strict=False):
        if a != b:
            break
        n += 1
    return ids, n


def _text(decode: Decode, ids: Sequence[int], first: int, j: int, token: int) -> str | None:
    """What `token` at position `j` adds to the decoded text of `ids[first:j]`; None if it ends in half a character."""
    s = max(first, j - _WINDOW)
    before = decode(list(ids[s:j])).rstrip(_SPLIT)
    after = decode([*ids[s:j], token])
    if after.endswith(_SPLIT) or not after.startswith(before):
        return None
    return after[len(before):]


def token_scores(decode: Decode, ids: Sequence[int], first: int, content: str, rows: Sequence[Row],
                 top: int) -> tuple[TokenScore, ...]:
    """The message's tokens (`ids[first:]`, whose text ends with `content`) as TokenScores; `rows[j]` the
    log-probabilities at position j (None, or without the token's own: unknown, that token is left out; a
    value that is not finite is left out too). At most `top` others each."""
    out: list[TokenScore] = []
    texts: list[str] = []
    tail = decode(list(ids[first:]))
    if not tail.endswith(content):
        raise BackendError("the prefilled reply's tokens do not decode to its text")
    at = len(content) - len(tail)  # where ids[first]'s text starts in `content` (< 0: it takes template text too)
    for j in range(first, len(ids)):
        piece = _text(decode, ids, first, j, ids[j])
        if piece is None:  # half a character: its text comes with the next token
            piece = ""
        texts.append(piece)
        row = rows[j] if j < len(rows) else None
        own = row.get(ids[j]) if row else None
        if row and at >= 0 and piece and own is not None and math.isfinite(own):
            others: list[tuple[str, float]] = []
            for tid, lp in sorted(row.items(), key=lambda kv: (-kv[1], kv[0])):
                if tid == ids[j] or len(others) >= top or not math.isfinite(lp):
                    continue
                alt = _text(decode, ids, first, j, tid)
                if alt:
                    others.append((alt, float(lp)))
            out.append(TokenScore(at, piece, float(own), tuple(others)))
        at += len(piece)
    if "".join(texts) != tail:
        raise BackendError("the prefilled reply's tokens do not decode piece by piece to its text")
    return tuple(out)


def served_rows(value: Any, most: int) -> tuple[Row, ...] | None:
    """A `vllm serve` reply's `prompt_logprobs` (a list with, per prompt token, null or an object of token id ->
    {"logprob": number, ...}) as rows, checked as hostile input: at most `most` positions, token ids in range,
    log-probabilities finite and not above 0 (by more than rounding), at most `MAX_SCORED` a position;
    ValueError says what is wrong. None when the reply has none."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > most:
        raise ValueError(f"not a list of at most {most} positions")
    rows: list[Row] = []
    for j, entry in enumerate(value):
        if entry is None:
            rows.append(None)
            continue
        if not isinstance(entry, dict) or len(entry) > MAX_SCORED:
            raise ValueError(f"position {j} is not an object of at most {MAX_SCORED} tokens")
        row: dict[int, float] = {}
        for key, scored in entry.items():
            lp = scored.get("logprob") if isinstance(scored, dict) else None
            if (not (isinstance(key, str) and key.isascii() and key.isdigit() and int(key) < MAX_TOKEN_ID)
                    or isinstance(lp, bool) or not isinstance(lp, int | float) or not math.isfinite(lp) or lp > 1e-3):
                raise ValueError(f"position {j} holds a key that is not a token id with a log-probability")
            row[int(key)] = float(lp)
        rows.append(row)
    return tuple(rows)
