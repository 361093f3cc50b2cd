"""Best of n verified samples (`--agent best-of-n`): the calibrated single-shot asked `candidates` times at once,
each program tried on a scratch copy of the workspace against the visible tests; the first that passes is
submitted, else the one whose failing check is furthest down a test file, else the first.

Candidate 0 is single-shot's own request (greedy by default, so one candidate is single-shot); the others are
sampled at `search_temperature`, each with its own seed (`candidate_seed`), so a run is reproducible. It turns
the batch slots an engine has idle into samples and keeps the agent's feedback out: beside single-shot's pass@k
at the same token budget (bench/strategies.py) it shows what verification alone is worth. Each sample is a
`candidate` step; the one submitted is the `final` step, as single-shot's answer is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import UnusableReply
from ..text import error_text
from ..tools import ToolOptions
from ..traces.steps import BranchPoint, Candidate, Verdict, reply_record
from ..types import Completion, RequestMeta
from .asking import Request, ask_all
from .history import test_record
from .scratch import RANK, Trial, candidate_rank, test_files, try_change
from .search import candidate_seed
from .single_shot import SingleShotEpisode

if TYPE_CHECKING:
    from ..sandbox.workspace import Workspace
    from ..traces.model import Trace
    from .episode import Ask

@dataclass
class Sample:
    """One candidate program: its request's sampling, the reply, and what the visible tests said of it."""

    n: int
    request: Request
    reply: Completion
    verdict: Verdict = "not_tried"
    trial: Trial | None = None
    note: str = ""
    branch: BranchPoint | None = None  # branch: the doubt it branched at; its prefill's text after the fix's own
    prefix: str = ""

    @property
    def text(self) -> str:
        """The completion of the fix's prefill: the branch's prefix, then the reply."""
        return self.prefix + self.reply.text

    @property
    def rank(self) -> tuple[int, int, int, int]:
        return candidate_rank(self.verdict, self.trial, self.n)


@dataclass
class BestOfNEpisode(SingleShotEpisode):
    candidates: int = 4
    temperature: float = 0.8
    options: ToolOptions = field(default_factory=ToolOptions)
    run_seed: int | None = None
    sample: int = 0

    def run(self, ask: Ask) -> None:
        """All candidates asked at once, each tried until one passes; the best is applied and submitted."""
        requests = self._requests()
        replies = ask_all(ask, requests)
        if all(c.error is not None for c in replies):
            raise UnusableReply(next(c.error for c in replies if c.error is not None))
        self._submit([Sample(n, r, c) for n, (r, c) in enumerate(zip(requests, replies, strict=True))])

    def _submit(self, samples: list[Sample]) -> None:
        """Each sample tried until one passes; every one recorded, the best applied and submitted."""
        samples = self._try_all(samples)
        best = max(samples, key=lambda s: s.rank)
        self._record(samples, best)
        self.advance(best.reply, best.prefix)
        if best.verdict == "passed":
            self.final = f"candidate {best.n} passes the visible tests"

    def annotate(self, trace: Trace) -> None:
        super().annotate(trace)
        trace.agent.search = {"candidates": self.candidates, "temperature": self.temperature,
                              "seeds": "candidate_seed(run seed, task, sample, 0, candidate)", "rank": RANK}

    def _requests(self) -> list[Request]:
        first = self.gen_params()
        warm = max(first.temperature, self.temperature)
        out: list[Request] = []
        for n in range(self.candidates):
            seed = None if self.run_seed is None else candidate_seed(self.run_seed, self.task.id, self.sample, 0, n)
            params = first if n == 0 else replace(first, temperature=warm, seed=seed)
            out.append((self.prompt(), params, RequestMeta(self.task, "best_of_n", 0, candidate=n)))
        return out

    def _try_all(self, samples: list[Sample]) -> list[Sample]:
        """Each sample tried in order until one passes (the rest: not_tried); the same program once."""
        seen: dict[str, Sample] = {}
        for s in samples:
            if s.reply.error is not None:
                s.verdict, s.note = "fault", f"no usable reply: {s.reply.error}"
                continue
            module = self.fix.module(s.text)
            if module in seen:
                s.verdict, s.trial = seen[module].verdict, seen[module].trial
            else:
                self._try(s, module)
                seen[module] = s
            if s.verdict == "passed":
                break
        return samples

    def _try(self, s: Sample, module: str) -> None:
        """The program on a scratch copy against the visible tests; a fault of its own is its verdict only."""
        if not self.ws.test_cmd:
            s.verdict = "unverified"
            return
        def apply(copy: Workspace) -> None:
            self.scenario.apply_program(self.task, copy, module)

        try:
            s.trial = try_change(self.ws, test_files(self.task.files), apply, self.options, changes=False)
        except Exception as e:
            hide = (str(self.ws.root), str(self.ws.root.resolve()))
            s.verdict, s.note = "fault", f"trying it failed: {error_text(e, hide)}"
            return
        assert s.trial is not None
        s.verdict = "passed" if s.trial.passed else "failed"

    def _record(self, samples: list[Sample], best: Sample) -> None:
        """A `candidate` step for each; the others' replies counted here (the chosen one's by `advance`)."""
        for s in samples:
            chosen = s is best
            reply: dict[str, Any] = {} if chosen else dict(reply_record(s.reply))
            text = s.note or self.fix.program(s.text)
            self._add(Candidate(**self._at(), text=text, candidate=s.n, chosen=chosen, verdict=s.verdict,
                                tests=test_record(s.trial.result) if s.trial else None,
                                seed=s.request[1].seed, temperature=s.request[1].temperature, branch=s.branch,
                                **reply))
            if not chosen:
                self._count(s.reply)
