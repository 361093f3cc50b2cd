"""Search over verified candidates (`--agent search`): the tool agent, each turn sampled K times at once.

A turn asks for `candidates` replies to the same conversation in one go (the backend batches them).
Candidate 0 is sampled as react samples that turn (greedy by default); the others at
`search_temperature`, each with its own seed (`candidate_seed`: run seed, task, sample, turn and
candidate), so a run is reproducible. Each candidate's action is tried on a scratch copy of the
workspace and the visible tests run there, the task's test files put back first (a candidate cannot
pass by rewriting them); an action that changes no file (a read, a FINAL) keeps the tests as they are.
The turn continues from the best candidate: passing, else the one whose failing check is furthest down
the test file, else the first; a reply with no usable action ranks last, as does a write to one of the task's
test files (`protect_tests`: search keeps them as given, and refuses such a write in the workspace too, telling
the model to fix the code they test). Opt-in: `prefer_changes` breaks a tie at the same failing check for a
candidate that changed a file; `tests_on_write` shows a write the visible tests' result from its scratch copy.
The first candidate that passes stops the search: its action is taken in the workspace and the episode
ends, submitted. After a stale write (the file left as it was, or a version that failed before) the
conversation begins again from the task, the files as given (`search_restart`: react's `--restart-after 1`).
With `search_branches` N, a turn none of whose candidates passes and whose best one writes a file (a write not
branched before in the episode) is branched as `--agent branch` branches the given code: that reply scored in one
request (a `doubts` step), then N programs, each the reply up to one of the model's most doubted tokens of what it
wrote, one of its preferred tokens there and the rest completed greedily, tried after the sampled candidates.
`spread_branches` branches the turn's best write not branched before (the best one may have been), at doubts
whose other tokens change more than the layout (whitespace, escapes). `deeper_branches`: when every write of the
turn was branched before, the best one is branched again at its most doubted tokens not branched yet (in the
turn's conversation), so each turn that finds no pass goes further down the model's doubts of what it wrote.
Each candidate is a `candidate` step; the chosen reply then makes the turn's steps as a react reply does. The token
budget counts the conversation continued (the chosen replies); the trace's totals count every candidate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, ToolError, UnusableReply
from ..protocol import parse_reply
from ..protocol.native import CALL_PREFILL, SUBMIT, parse_native
from ..text import error_text
from ..tools import ToolResult as ToolOutput
from ..traces.steps import BranchPoint, Candidate, Restart, Verdict, reply_record
from ..types import Completion, GenParams, RequestMeta, request_seed
from .asking import Request, ask_all
from .config import AgentConfig
from .doubts import ALTERNATIVES, doubts_step, most_doubted, prefilled, scoring
from .history import test_record
from .react import Episode, example_file
from .scratch import RANK, RANK_CHANGES, READ_ONLY, Trial, candidate_rank, test_files, try_action

if TYPE_CHECKING:
    from ..traces.model import Trace
    from .episode import Ask

WRITES = frozenset({"write_file", "edit_file"})


def candidate_seed(run_seed: int, task_id: str, sample: int, turn: int, candidate: int) -> int:
    """The seed of one candidate: react's request seed for candidate 0, a seed of its own for each other."""
    return request_seed(run_seed, task_id if candidate == 0 else f"{task_id}\0candidate {candidate}", sample, turn)


@dataclass
class Action:
    """What a candidate reply asks for: a tool call or a FINAL (`usable`), else why it cannot be used."""

    text: str
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    usable: bool = True


@dataclass
class Tried:
    """One candidate: its request, reply, action, and what trying the action found."""

    n: int
    params: GenParams
    reply: Completion
    action: Action
    verdict: Verdict = "not_tried"
    trial: Trial | None = None
    branch: BranchPoint | None = None  # search_branches: the doubt its reply was branched at

    def rank(self, changes: bool) -> tuple[int, int, int, int]:
        return candidate_rank(self.verdict, self.trial, self.n, changes)


@dataclass
class SearchEpisode(Episode):
    _now: Trial | None = None  # the visible tests on the workspace as it is (tried once, then kept up to date)
    _chosen: GenParams | None = None  # the chosen candidate's sampling, while its reply is taken
    _aside: int = 0  # tokens of the candidates not continued from (not in the budget)
    # search_branches: the writes branched, by their call, each with the (offset in what it wrote, token) branched
    _branched: dict[str, set[tuple[int, str]]] = field(default_factory=dict)

    def run(self, ask: Ask) -> None:
        """Sample the turn's candidates at once, try each, continue from the best; until one passes or a
        budget ends the episode."""
        self.begin()
        while not self.done:
            requests = self._requests()
            tried = self._try_all(requests, ask_all(ask, requests))
            tried += self._branches(ask, tried)
            best = max(tried, key=lambda t: t.rank(self.config.prefer_changes))
            self._record(tried, best)
            self._chosen = best.params
            if any(isinstance(s, Restart) for s in self.advance(best.reply)):
                self._now = None  # the files are back as the task gave them
            self._chosen = None
            if best.verdict == "passed" and self.exit_reason in (None, "max_steps", "budget"):
                self.final, self.exit_reason = f"candidate {best.n} of turn {self.turn} passes the visible tests", \
                    "submitted"

    def annotate(self, trace: Trace) -> None:
        super().annotate(trace)
        self.record(trace, self.config)

    @staticmethod
    def record(trace: Trace, config: AgentConfig) -> None:
        """The trace's `agent.search` block: what a search samples, how it seeds and ranks candidates."""
        trace.agent.search = {"candidates": config.candidates, "temperature": config.search_temperature,
                              "restart_after": config.restart_after or (1 if config.search_restart else None),
                              "seeds": "candidate_seed(run seed, task, sample, turn, candidate)",
                              "rank": RANK_CHANGES if config.prefer_changes else RANK}
        if config.search_branches:
            trace.agent.search["branches"] = {
                "programs": config.search_branches, "alternatives": ALTERNATIVES,
                "of": "the turn's best candidate that writes a file not branched before, when none passes"
                if config.spread_branches else
                "the turn's best candidate when none passes and it writes a file not branched before",
                "order": "after the sampled candidates, by the doubt's margin (wider first; ties: earlier)",
                **({"skip": "doubts whose other tokens differ only in whitespace or escapes"}
                   if config.spread_branches else {}),
                **({"again": "a turn whose writes were all branched before branches the best one at its most "
                             "doubted tokens not branched yet"} if config.deeper_branches else {})}

    def gen_params(self) -> GenParams:
        return self._chosen or super().gen_params()

    def _execute(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        """The tool's result; a refused write (`_refusal`) an ERROR; with `tests_on_write`, a write that changed
        a file shows the visible tests' run on it (the chosen candidate's trial: the same files)."""
        refusal = self._refusal(tool, args)
        if refusal:
            return ToolOutput.fault(ToolError(refusal))
        result = super()._execute(tool, args)
        now = self._now
        if not (self.config.tests_on_write and tool in WRITES and result.error is None and result.changed
                and now is not None and now.changed):
            return result
        return replace(result, text=f"{result.text}\n\nThe visible tests, run on it:\n{now.result.text}",
                       tests_passed=now.result.tests_passed, failing_check=now.result.failing_check,
                       values=now.result.values)

    def _refusal(self, tool: str | None, args: dict[str, Any]) -> str | None:
        """Why the call may not run (`protect_tests`: it writes one of the task's test files), else None."""
        if not self.config.protect_tests or tool not in WRITES or not isinstance(args.get("path"), str):
            return None
        try:
            rel = self.ws.rel(self.ws.resolve(args["path"]))
        except (ToolError, OSError, ValueError):
            return None  # the tool itself says what is wrong with the path
        if rel not in test_files(self.task.files):
            return None
        module = example_file(self.task)
        return (f"{rel} holds the task's tests: they check your fix, so they stay as given. "
                f"Fix the code they test{f' ({module})' if module else ''} instead.")

    def _restart_after(self) -> int | None:
        return self.config.restart_after or (1 if self.config.search_restart else None)

    def _spent(self) -> int:
        return super()._spent() - self._aside

    def _requests(self) -> list[Request]:
        prompt, first = self.prompt(), self.gen_params()
        warm = max(first.temperature, self.config.search_temperature)
        out: list[Request] = []
        for n in range(self.config.candidates):
            seed = None if self.params.seed is None else \
                candidate_seed(self.params.seed, self.task.id, self.sample, self.turn, n)
            params = first if n == 0 else replace(first, temperature=warm, seed=seed)
            out.append((prompt, params, RequestMeta(self.task, "search", self.turn, candidate=n)))
        return out

    def _try_all(self, requests: list[Request], replies: list[Completion]) -> list[Tried]:
        """Each candidate tried in order, until one passes (the rest: not_tried); the same action once."""
        if all(c.error is not None for c in replies):
            raise UnusableReply(next(c.error for c in replies if c.error is not None))
        tried = [Tried(n, params, c, self._action(c))
                 for n, ((_, params, _), c) in enumerate(zip(requests, replies, strict=True))]
        self._try_each(tried, {})
        return tried

    def _try_each(self, tried: list[Tried], seen: dict[str, Tried]) -> None:
        """Try each in order until one passes (the rest: not_tried); an action in `seen` (tried this turn, by its
        call) takes that verdict."""
        for t in tried:
            key = _key(t.action)
            if key in seen:
                t.verdict, t.trial = seen[key].verdict, seen[key].trial
            else:
                self._try(t)
                seen[key] = t
            if t.verdict == "passed":
                break

    def _branches(self, ask: Ask, tried: list[Tried]) -> list[Tried]:
        """`search_branches`: when no candidate passed, the best one that writes a file (as it failed or left the
        file unchanged; a write not branched before, or with `deeper_branches` one branched before, at its doubts
        not branched yet) scored and branched at the model's doubts, each branch tried."""
        writes = [t for t in tried if t.action.tool in WRITES and t.verdict in ("failed", "unchanged")]
        n, spread, deeper = self.config.search_branches, self.config.spread_branches, self.config.deeper_branches
        if spread:
            writes = [t for t in writes if _written(t.reply.text, t.action) is not None]
        if not n or not writes or any(t.verdict == "passed" for t in tried):
            return []
        new = [t for t in writes if _key(t.action) not in self._branched]
        base = max(new if spread and new else writes, key=lambda t: t.rank(self.config.prefer_changes))
        span, key = _written(base.reply.text, base.action), _key(base.action)
        if span is None or (key in self._branched and not deeper):
            return []
        done = self._branched.setdefault(key, set())
        what = f"candidate {base.n}'s write"
        again = f"{what} scored again, the {len(done)} branches made from it before left out" if done else ""
        prompt, params = self.prompt(), self.gen_params()
        [scored] = ask_all(ask, [scoring(prompt, base.reply.text, params,
                                         RequestMeta(self.task, "search", self.turn, candidate=base.n))])
        inside = replace(scored, scores=tuple(t for t in scored.scores if t.start < span[1]))
        # enough doubts that n pairs are left when those branched before are taken out
        points = [(d, alt) for d in most_doubted(inside, span[0], n + ALTERNATIVES * len(done), skip_layout=spread)
                  for alt in d["model"] if (d["at"] - span[0], alt) not in done][:n]
        done.update((d["at"] - span[0], alt) for d, alt in points)
        self._add(doubts_step(self._at(), scored, _grouped(points), what, again))
        self._count(scored)
        self._aside += (scored.prompt_tokens or 0) + (scored.completion_tokens or 0)
        first = len(tried)
        prefixes = [base.reply.text[:d["at"]] + alt for d, alt in points]
        requests = [prefilled(prompt, prefix, params, RequestMeta(self.task, "search", self.turn, candidate=first + i))
                    for i, prefix in enumerate(prefixes)]
        replies = ask_all(ask, requests) if requests else []
        out = []
        for i, ((d, alt), prefix, (_, p, _), c) in enumerate(zip(points, prefixes, requests, replies, strict=True)):
            whole = c if c.error is not None else replace(c, text=prefix + c.text)
            out.append(Tried(first + i, p, whole, self._action(whole), branch={**d, "model": [alt]}))
        self._try_each(out, {_key(t.action): t for t in tried})  # every one was tried: none passed
        return out

    def _try(self, t: Tried) -> None:
        """Try one candidate's action on a scratch copy; a fault of its own is its verdict, never the episode's."""
        if t.reply.error is not None:
            t.verdict, t.action = "fault", Action(f"no usable reply: {t.reply.error}", usable=False)
            return
        if not t.action.usable:
            t.verdict = "invalid"
            return
        if self._refusal(t.action.tool, t.action.args):
            t.verdict = "refused"
            return
        if not self.ws.test_cmd:
            t.verdict = "unverified"
            return
        try:
            if self._now is None:
                self._now = self._trial(None, {})
            trial = None if t.action.tool in READ_ONLY or t.action.tool is None else \
                self._trial(t.action.tool, t.action.args)
        except Exception as e:
            hide = (str(self.ws.root), str(self.ws.root.resolve()))
            t.verdict, t.action.text = "fault", f"{t.action.text}\ntrying it failed: {error_text(e, hide)}"
            return
        assert self._now is not None
        t.trial = trial or replace(self._now, changed=False)
        t.verdict = "passed" if t.trial.passed else "failed" if trial is not None else "unchanged"

    def _trial(self, tool: str | None, args: dict[str, Any]) -> Trial | None:
        found = try_action(self.ws, test_files(self.task.files), tool, args, self.config.tool_options)
        assert found is not None or tool is not None  # no action: always a test run
        return found

    def _action(self, c: Completion) -> Action:
        """The action a reply asks for, parsed as the turn will parse it."""
        if c.error is not None:
            return Action("", usable=False)
        if c.finish_reason == "length" and c.completion_tokens == 0:
            return Action("the conversation no longer fits in the context window", usable=False)
        if self.submit and not c.tool_calls:
            c = replace(c, text=CALL_PREFILL + c.text)
        try:
            reply = parse_native(c.text, c.tool_calls, self.tools) if self.native else parse_reply(c.text, self.tools)
        except FormatError as e:
            return Action(f"no usable action: {e}", usable=False)
        if reply.final is not None or reply.tool == SUBMIT.name:
            return Action(f"FINAL: {reply.final if reply.final is not None else (reply.args or {}).get('summary')}")
        args = reply.args or {}
        return Action(json.dumps({"tool": reply.tool, "args": args}), reply.tool, args)

    def _record(self, tried: list[Tried], best: Tried) -> None:
        """A `candidate` step for each; the others' replies counted here (the chosen one's by `advance`)."""
        for t in tried:
            chosen = t is best
            reply: dict[str, Any] = {} if chosen else dict(reply_record(t.reply))
            self._add(Candidate(**self._at(), text=t.action.text, candidate=t.n, chosen=chosen, verdict=t.verdict,
                                tool=t.action.tool, tests=test_record(t.trial.result) if t.trial else None,
                                seed=t.params.seed, temperature=t.params.temperature, branch=t.branch, **reply))
            if not chosen:
                self._count(t.reply)
                self._aside += (t.reply.prompt_tokens or 0) + (t.reply.completion_tokens or 0)
        if best.trial is not None and best.trial.changed:
            self._now = best.trial  # the workspace will hold what the chosen action left


def _grouped(points: list[tuple[BranchPoint, str]]) -> list[BranchPoint]:
    """The doubts branched at, each with the tokens branched there (in order)."""
    out: list[BranchPoint] = []
    for d, alt in points:
        if out and out[-1]["at"] == d["at"]:
            out[-1]["model"].append(alt)
        else:
            out.append({**d, "model": [alt]})
    return out


def _key(action: Action) -> str:
    """An action's identity: two candidates asking the same are tried once."""
    return json.dumps([action.tool, action.args, action.usable], sort_keys=True, default=repr)


def _written(text: str, action: Action) -> tuple[int, int] | None:
    """Where the text a write puts in the file (write_file's `content`, edit_file's `new`) stands in its reply, as
    the model wrote it (inside the call's JSON, escaped, or in a code block after the call), so that only it is
    doubted; None when it is not found there as parsed."""
    written = action.args.get("new" if action.tool == "edit_file" else "content")
    if not isinstance(written, str) or not written.strip():
        return None
    call = max(text.find("TOOL_CALL:"), 0)
    # a code block's body gets a last newline when it had none (protocol.parser)
    for form in (json.dumps(written)[1:-1], json.dumps(written, ensure_ascii=False)[1:-1], written,
                 written.removesuffix("\n")):
        at = text.find(form, call)
        if at >= 0:
            return at, at + len(form)
    return None
