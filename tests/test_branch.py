"""--agent branch: the model's doubts of the given code read in one scoring request, programs branched at the most
doubted tokens, each tried on a scratch copy against the visible tests; the scoring's alignment of tokens to
text; and the whole path through the CLI with scripted models, real workspaces and the hidden-test scorer."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agent_harness.backends import scoring
from agent_harness.errors import BackendError, ConfigError, UnusableReply
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.asking import Request
from agent_harness.strategies.branch import BranchEpisode
from agent_harness.strategies.doubts import doubts
from agent_harness.traces.steps import Candidate, Doubts, Final
from agent_harness.types import Completion, GenParams, TokenScore

ROOT = Path(__file__).resolve().parent.parent
TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: `number % 1.0 + 1.0`
TARGET = SCENARIO.target_file(TASK)


# -- which tokens are doubted -------------------------------------------------------------------------------------

def test_doubts_are_the_widest_margins_after_the_start_earlier_first_on_ties() -> None:
    scores = (
        TokenScore(0, "def", -0.1, (("class", 0.0),)),  # before `start`: the prefill, never doubted
        TokenScore(10, " +", -3.0, ((" -", -0.5), (" *", -1.0), (" /", -2.0))),  # margin 2.5
        TokenScore(12, " 1", -2.0, ((" 2", -1.0),)),  # margin 1.0
        TokenScore(14, " x", -1.0, ((" y", 0.0),)),  # margin 1.0, later than the one above
        TokenScore(16, " z", -0.1, ()),  # nothing preferred: no doubt
        TokenScore(18, ")", -0.1, ((":", -4.0),)),  # the code's token preferred: margin < 0, still ranked
    )
    found = doubts(scores, start=5, positions=3, alternatives=2)
    assert [d["at"] for d in found] == [10, 12, 14]
    assert found[0] == {"at": 10, "code": " +", "model": [" -", " *"], "margin": 2.5}
    assert [d["at"] for d in doubts(scores, start=5, positions=10, alternatives=1)] == [10, 12, 14, 18]


def test_doubts_that_only_lay_the_code_out_otherwise_can_be_skipped() -> None:
    """A written file's doubts: another line break, indentation or escape is no doubt with `skip_layout`; the
    margin is then the best remaining token's."""
    scores = (
        TokenScore(0, ")", -3.0, ((")\\n\\n", -0.1), (",", -1.0))),  # escaped blank lines, then a real doubt
        TokenScore(2, "\n", -2.0, (("\n\n", -0.2),)),  # only another layout: no doubt left
        TokenScore(4, "):", -2.0, (("):\\", -0.3), (" or", -1.5))),  # a line continuation
        TokenScore(6, " ==", -1.0, ((" !=", -0.5),)),
    )
    assert [d["at"] for d in doubts(scores, 0, 4, 2)] == [0, 2, 4, 6]
    kept = doubts(scores, 0, 4, 2, skip_layout=True)
    assert kept == [{"at": 0, "code": ")", "model": [","], "margin": 2.0},
                    {"at": 4, "code": "):", "model": [" or"], "margin": 0.5},
                    {"at": 6, "code": " ==", "model": [" !="], "margin": 0.5}]


# -- scoring: tokens to text --------------------------------------------------------------------------------------

VOCAB = {1: b"<s>", 2: b"H:", 10: b"a", 11: b"\xc3", 12: b"\xb1", 13: b"b", 20: b"x", 21: b"\xc3", 22: b"yz"}


def decode(ids: list[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", "replace")


def test_token_scores_align_to_the_text_and_leave_out_half_characters() -> None:
    ids = [1, 2, 10, 11, 12, 13]  # the message "añb": ñ is split over two tokens
    row = {20: -0.5, 21: -0.7, 22: -0.9}
    rows = [None, None, {10: -1.0, **row}, {11: -2.0, **row}, {12: -0.1, **row}, {13: -0.2, 20: -0.3}]
    got = scoring.token_scores(decode, ids, 2, "añb", rows, top=5)
    assert [(s.start, s.text, s.logprob) for s in got] == [(0, "a", -1.0), (1, "ñ", -0.1), (3 - 1, "b", -0.2)]
    assert got[0].others == (("x", -0.5), ("yz", -0.9))  # b"\xc3" alone is half a character: left out
    assert got[2].others == (("x", -0.3),)
    assert scoring.token_scores(decode, ids, 2, "añb", rows, top=1)[0].others == (("x", -0.5),)


def test_token_scores_skip_what_they_cannot_trust_and_refuse_text_that_does_not_match() -> None:
    ids = [1, 10, 13]
    no_own = [None, {20: -0.5}, {13: -math.inf, 20: -0.1}]  # 'a' without its own log-probability; 'b' not finite
    assert scoring.token_scores(decode, ids, 1, "ab", no_own, top=5) == ()
    with pytest.raises(BackendError, match="do not decode"):
        scoring.token_scores(decode, ids, 1, "abc", [None, None, None], top=5)


def test_served_rows_take_vllms_shape_and_refuse_anything_else() -> None:
    good = [None, {"10": {"logprob": -0.5, "rank": 1, "decoded_token": "a"}, "20": {"logprob": -1}}]
    assert scoring.served_rows(good, 10) == (None, {10: -0.5, 20: -1.0})
    assert scoring.served_rows(None, 10) is None
    for bad in ({"0": 1}, [None] * 11, [{"x": {"logprob": -1}}], [{"10": {"logprob": "0"}}], [{"10": {"logprob": 5}}],
                [{"10": {"logprob": True}}], [{"-1": {"logprob": -1}}], [{"10": {"logprob": float("nan")}}],
                [{str(i): {"logprob": -1} for i in range(100)}], [{"99999999999": {"logprob": -1}}], ["text"]):
        with pytest.raises(ValueError):
            scoring.served_rows(bad, 10)


def test_a_scoring_request_needs_a_prefilled_reply_and_a_sane_k() -> None:
    with pytest.raises(ConfigError, match="ends with the assistant"):
        scoring.check([{"role": "user", "content": "x"}], GenParams(prompt_logprobs=5))
    with pytest.raises(ConfigError, match="between 1 and 20"):
        scoring.check([{"role": "assistant", "content": "x"}], GenParams(prompt_logprobs=50))


# -- the episode, with a model that answers by request ------------------------------------------------------------

def reply(text: str, scores: tuple[TokenScore, ...] = (), error: str | None = None) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=0 if scores else 5, finish_reason="stop",
                      latency_s=0.0, error=error, scores=scores)


class Model:
    """Copies the code for the greedy request; doubts ` +` (prefers ` -`, then ` *`) and `1.0` at its end; a
    branch ending in `*` writes the fix, the others a wrong program. Keeps the batches it was asked."""

    def __init__(self, scoring_error: str | None = None, branch_error: str | None = None) -> None:
        self.batches: list[list[Request]] = []
        self.scoring_error, self.branch_error = scoring_error, branch_error

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        return [self.answer(c[-1]["content"], p) for c, p, _ in requests]

    def answer(self, prefilled: str, params: GenParams) -> Completion:
        if params.prompt_logprobs:
            if self.scoring_error:
                return reply("", error=self.scoring_error)
            plus, one = prefilled.index(" +"), prefilled.rindex(" 1.0")
            return reply("", (TokenScore(plus, " +", -2.0, ((" -", -0.5), (" *", -1.0))),
                              TokenScore(one, " 1.0", -1.0, ((" 0.0", -0.9),))))
        if prefilled.endswith(" -"):
            return reply(" 0.0\n") if self.branch_error is None else reply("", error=self.branch_error)
        if prefilled.endswith(" *"):
            return reply(" 0\n")  # number % 1.0 * 0: a wrong program
        if prefilled.endswith(" 0.0"):
            return reply("\n")
        return reply("\n    return number % 1.0 + 1.0\n")  # the greedy request: the code copied

    def __call__(self, *request: object) -> Completion:
        raise AssertionError("branch asks its requests in batches")


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield w
    w.cleanup()


def episode(ws: Workspace, candidates: int = 32) -> BranchEpisode:
    return BranchEpisode(TASK, ws, GenParams(max_tokens=64, seed=3), SCENARIO, "codeqwen", candidates=candidates)


def test_greedy_and_scoring_at_once_then_the_branches_in_order_of_doubt(ws: Workspace) -> None:
    model, ep = Model(), episode(ws)
    ep.run(model)  # type: ignore[arg-type]
    greedy_and_scoring, branches = model.batches
    assert [p.prompt_logprobs for _, p, _ in greedy_and_scoring] == [0, 5]
    assert greedy_and_scoring[1][0][-1]["content"] == ep.fix.copied  # the given code in the assistant's turn
    assert [c[-1]["content"][len(ep.fix.prefill):].rsplit(" ", 1)[-1] for c, _, _ in branches] == ["-", "*", "0.0"]
    assert all(p.greedy and p.seed is None for _, p, _ in branches)
    doubt, *cands, final = ep.steps
    assert isinstance(doubt, Doubts) and [d["code"] for d in doubt.doubts or []] == [" +", " 1.0"]
    assert isinstance(final, Final) and final.text.endswith("return number % 1.0 - 0.0")
    assert [(c.candidate, c.verdict, c.chosen) for c in cands if isinstance(c, Candidate)] == [
        (0, "failed", False), (1, "passed", True), (2, "not_tried", False), (3, "not_tried", False)]
    assert isinstance(cands[1], Candidate) and cands[1].branch == {"at": ep.fix.copied.index(" +"), "code": " +",
                                                                   "model": [" -"], "margin": 1.5}
    assert ep.final == "candidate 1 passes the visible tests"
    assert (Path(ws.root) / TARGET).read_text().rstrip().endswith("return number % 1.0 - 0.0")


def test_the_budget_bounds_the_branches(ws: Workspace) -> None:
    model, ep = Model(), episode(ws, candidates=1)
    ep.run(model)  # type: ignore[arg-type]
    assert len(model.batches[1]) == 1 and sum(isinstance(s, Candidate) for s in ep.steps) == 2


def test_a_failed_scoring_leaves_the_greedy_program_alone(ws: Workspace) -> None:
    model, ep = Model(scoring_error="bad reply"), episode(ws)
    ep.run(model)  # type: ignore[arg-type]
    assert len(model.batches) == 1
    assert "could not be read: bad reply" in ep.steps[0].text
    assert [s.candidate for s in ep.steps if isinstance(s, Candidate)] == [0] and ep.final is None


def test_no_usable_reply_at_all_is_the_servers_fault(ws: Workspace) -> None:
    class Dead(Model):
        def answer(self, prefilled: str, params: GenParams) -> Completion:
            c = super().answer(prefilled, params)
            return c if params.prompt_logprobs else reply("", error="server died")

    with pytest.raises(UnusableReply, match="server died"):
        episode(ws).run(Dead())  # type: ignore[arg-type]


# -- the whole path -----------------------------------------------------------------------------------------------

def run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", "--out",
                           str(out), *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def traces(out: Path, model: str, folder: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(p.read_text()) for p in sorted((out / model / folder / "gold").glob("*.json"))]


@pytest.mark.slow
def test_cli_branch_solves_what_the_oracle_doubts_and_the_null_model_nothing(tmp_path: Path) -> None:
    r = run(tmp_path, "--models", "oracle,null", "--agent", "branch", "--n", "4")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    rates = {model: rows["humanevalfix-branch"]["pass@1"] for model, rows in summary.items()}
    assert rates == {"oracle": 1.0, "null": 0.0}
    for t in traces(tmp_path, "oracle", "humanevalfix-branch"):
        assert t["agent"]["strategy"] == "branch" and t["schema_version"] == "1.10"
        kinds = [s["type"] for s in t["steps"]]
        assert kinds[0] == "doubts" and kinds[-1] == "final"
        chosen = [s for s in t["steps"] if s.get("chosen")]
        # the oracle's greedy program copies the buggy code; its decoy doubt (`pass`) is tried before the fix
        assert [s["candidate"] for s in t["steps"] if s["type"] == "candidate"][:3] == [0, 1, 2]
        assert len(chosen) == 1 and chosen[0]["verdict"] == "passed" and chosen[0]["branch"]["model"] != ["pass"]
        assert t["outcome"]["passed"] is True and t["outcome"]["score_details"]["completed"] is True


@pytest.mark.slow
def test_cli_branch_search_hands_over_to_the_tool_agent(tmp_path: Path) -> None:
    r = run(tmp_path, "--models", "null", "--agent", "branch-search", "--n", "1", "--max-steps", "2")
    assert r.returncode == 0, r.stderr
    [t] = traces(tmp_path, "null", "humanevalfix-branch_search")
    phases = [s.get("phase") for s in t["steps"]]
    assert phases[0] == "branch" and "react" in phases
    handoff = next(s for s in t["steps"] if s["type"] == "handoff")
    assert handoff["text"].startswith("branching found no program that passes the visible tests")


def test_cli_a_backend_that_cannot_score_is_one_line(tmp_path: Path) -> None:
    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n  - name: remote\n    backend: openai\n    openai:\n"
                   "      base_url: http://127.0.0.1:9/v1\n      model: m\n      max_retries: 0\n")
    r = run(tmp_path / "out", "--registry", str(reg), "--models", "remote", "--agent", "branch", "--n", "1")
    assert r.returncode != 0
    assert "--agent branch reads the model's log-probabilities" in r.stderr and "openai.tokenizer" in r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "out").exists()  # refused before anything ran


@pytest.mark.model
def test_the_real_model_doubts_the_bug(hf_backend: object) -> None:
    """The embedded 0.5B on transformers, one forward pass: asked to fix `add`, it doubts `-` in `return a - b`
    among its three most doubted tokens and prefers `+` there."""
    from agent_harness.backends.loop import complete_all

    content = "def add(a, b):\n    return a - b\n"
    conv = [{"role": "user", "content": "Fix bugs in add.\n" + content}, {"role": "assistant", "content": content}]
    [c] = complete_all(hf_backend, [conv], GenParams(max_tokens=1, prompt_logprobs=5))  # type: ignore[arg-type]
    assert c.error is None and c.completion_tokens == 0 and c.prompt_tokens
    assert "".join(s.text for s in c.scores) == content[c.scores[0].start:]
    minus = [d for d in doubts(c.scores, content.index("\n"), 3, 2) if d["code"] == " -"]
    assert minus and " +" in minus[0]["model"]
