"""Where the model doubts a reply: one scoring request reads its log-probability of each token of the reply and
the tokens it would rather have written (`GenParams.prompt_logprobs`); the most doubted tokens are where `--agent
branch` and search's `--search-branches` branch, each branch the reply up to the doubt, one of the model's tokens
there, and the rest completed greedily."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import cast

from ..traces.steps import BranchPoint, Doubts, Place, StepTokens
from ..types import Completion, Conversation, GenParams, RequestMeta, TokenScore
from .asking import Request

ALTERNATIVES = 2  # the model's preferred tokens branched at, at each doubted one
TOP = 5  # log-probabilities read at each token of the given code


def layout(text: str) -> str:
    """`text` without whitespace and escapes (`\\n`, `\\t`, `\\r`, a lone backslash): what is left the same when
    the model would only have laid the same code out otherwise."""
    return re.sub(r"\\[ntr]|\\|\s", "", text)


def doubts(scores: tuple[TokenScore, ...], start: int, positions: int, alternatives: int,
           skip_layout: bool = False) -> list[BranchPoint]:
    """The `positions` most doubted tokens that start at or after character `start`, most doubted first (ties:
    earlier first); margin = log p(the best other token) - log p(the code's token). `skip_layout`: the other
    tokens that differ from the code's only in whitespace or escapes are not doubts (a token with no other left
    is not doubted)."""
    found: list[BranchPoint] = []
    for s in scores:
        others = [(t, p) for t, p in s.others if not skip_layout or layout(t) != layout(s.text)]
        if s.start >= start and others:
            found.append({"at": s.start, "code": s.text, "model": [t for t, _ in others[:alternatives]],
                          "margin": round(others[0][1] - s.logprob, 4)})
    found.sort(key=lambda d: (-d["margin"], d["at"]))
    return found[:positions]


def most_doubted(scored: Completion, start: int, n: int, skip_layout: bool = False) -> list[BranchPoint]:
    """The doubts `n` branches go to: the `ceil(n / ALTERNATIVES)` most doubted tokens from `start` (none when the
    scoring failed); `skip_layout` as `doubts`."""
    return [] if scored.error else doubts(scored.scores, start, -(-n // ALTERNATIVES), ALTERNATIVES, skip_layout)


def doubts_step(place: Place, scored: Completion, found: list[BranchPoint], what: str, again: str = "") -> Doubts:
    """The `doubts` step of a scoring: the doubted tokens, or why there are none (`what`: the code scored);
    `again`, when given, begins the text (why the code was scored again)."""
    if scored.error:
        text = f"the model's doubts could not be read: {scored.error}"
    elif not found:
        text = f"the model doubts no token of {what}"
    else:
        text = "; ".join(f"{d['code']!r} at {d['at']}: {' or '.join(map(repr, d['model']))} "
                         f"(margin {d['margin']:.2f})" for d in found)
    if again:
        text = f"{again}: {text}"
    return Doubts(**place, text=text, doubts=found, latency_s=scored.latency_s,
                  tokens=cast(StepTokens, scored.token_counts()))


def scoring(prompt: Conversation, reply: str, params: GenParams, meta: RequestMeta) -> Request:
    """`reply` written out as the assistant's answer to `prompt`, scored (nothing generated)."""
    conv: Conversation = [*prompt, {"role": "assistant", "content": reply}]
    return (conv, replace(params, prompt_logprobs=TOP, max_tokens=1, temperature=0.0, seed=None), meta)


def prefilled(prompt: Conversation, prefill: str, params: GenParams, meta: RequestMeta) -> Request:
    """`prompt` with the assistant's answer begun with `prefill`, the rest completed greedily."""
    conv: Conversation = [*prompt, {"role": "assistant", "content": prefill}]
    return (conv, replace(params, temperature=0.0, seed=None), meta)
