"""Branching where the model doubts the given code (`--agent branch`): the model as a bug locator.

The calibrated single-shot's prompt, with the code to fix written out in the assistant's turn (the reply of a
model that copied what it was shown), is scored in one request: for each token of that code the model gives
its log-probability and the tokens it would rather have written there (`GenParams.prompt_logprobs`). Where it
prefers another token by the widest margin it doubts the code. At each of the most doubted tokens, for each
of its `ALTERNATIVES` preferred tokens, the code up to there and that token are prefilled and the rest of the
function is completed greedily; these programs, candidate 0 (single-shot's own greedy answer, asked together
with the scoring) first and the others in order of doubt, are tried on scratch copies against the visible
tests as best-of-n tries its samples, and the first that passes is submitted (else the one that got furthest).

It spends its budget where the model disagrees with the code, not on samples of the whole function: on the
0.5B, 32 branches solved 59 of HumanEvalFix's 82 odd tasks and 16 of the 42 held-out ones, where 32 samples
solved 38 and 5 (bench/RESULTS.md).
Nothing is sampled, so a run is the same every time. `opening_candidates` (default 32) bounds the branches:
the `ceil(N / ALTERNATIVES)` most doubted tokens. Needs a backend that can score a prefilled reply: vllm,
transformers, openai with `openai.tokenizer` (a `vllm serve`), scripted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UnusableReply
from ..traces.steps import BranchPoint
from ..types import Completion, RequestMeta
from .asking import Request, ask_all
from .best_of_n import BestOfNEpisode, Sample
from .doubts import ALTERNATIVES, TOP, doubts_step, most_doubted, prefilled, scoring
from .scratch import RANK

if TYPE_CHECKING:
    from ..traces.model import Trace
    from .episode import Ask

ORDER = "candidate 0 (the greedy program), then the branches by the doubt's margin (wider first; ties: earlier)"


@dataclass
class BranchEpisode(BestOfNEpisode):
    candidates: int = 32  # branches (the strategy registry passes `opening_candidates`)

    def run(self, ask: Ask) -> None:
        """Greedy answer and scoring at once; the branches at once; each tried until one passes."""
        first = self._first()
        greedy, scored = ask_all(ask, [first, self._scoring()])
        points = self._doubts(scored)
        branches = [(d, alt) for d in points for alt in d["model"]][:self.candidates]
        requests = [self._branch(d, alt, n) for n, (d, alt) in enumerate(branches, 1)]
        replies = ask_all(ask, requests) if requests else []
        if greedy.error is not None and all(c.error is not None for c in replies):
            raise UnusableReply(greedy.error)
        self._submit([Sample(0, first, greedy)] + [
            Sample(n, r, c, branch={**d, "model": [alt]}, prefix=self._prefix(d, alt))
            for n, ((d, alt), r, c) in enumerate(zip(branches, requests, replies, strict=True), 1)])

    def annotate(self, trace: Trace) -> None:
        super().annotate(trace)
        trace.agent.search = {"candidates": self.candidates, "alternatives": ALTERNATIVES, "top": TOP,
                              "order": ORDER, "rank": RANK}

    def _first(self) -> Request:
        return (self.prompt(), self.gen_params(), RequestMeta(self.task, "branch", 0, candidate=0))

    def _scoring(self) -> Request:
        """The prompt with the given code as the assistant's reply, scored."""
        return scoring(self.prompt()[:-1], self.fix.copied, self.gen_params(), RequestMeta(self.task, "branch", 0,
                                                                                           candidate=0))

    def _doubts(self, scored: Completion) -> list[BranchPoint]:
        """The doubts the scoring found (none when it failed: candidate 0 is then tried alone), recorded."""
        found = most_doubted(scored, len(self.fix.prefill), self.candidates)
        self._add(doubts_step(self._at(), scored, found, "the given code"))
        self._count(scored)
        return found

    def _prefix(self, d: BranchPoint, alt: str) -> str:
        """The branch's prefill after the fix's own: the given code up to the doubt, then the model's token."""
        return self.fix.copied[len(self.fix.prefill):d["at"]] + alt

    def _branch(self, d: BranchPoint, alt: str, n: int) -> Request:
        return prefilled(self.prompt()[:-1], self.fix.prefill + self._prefix(d, alt), self.gen_params(),
                         RequestMeta(self.task, "branch", 0, candidate=n))
