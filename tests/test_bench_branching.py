"""bench/branching.py's ranking of the model's doubts over the given code (no model: log-probabilities made up)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from branching import doubts  # noqa: E402


def lp(**scores: float) -> dict[str, dict[str, float]]:
    """vLLM's `prompt_logprobs` entry: token id (as text) -> its log-probability."""
    return {k.removeprefix("t"): {"logprob": v} for k, v in scores.items()}


def test_doubts_rank_by_margin_and_skip_the_prompt() -> None:
    ids = [1, 2, 3, 4, 5]
    scored = [None, lp(t2=-0.1, t9=-0.2),  # in the prompt: never a doubt however close
              lp(t3=-2.0, t7=-0.5, t8=-1.0),  # the model prefers 7, then 8: margin 1.5
              lp(t4=-0.01, t6=-5.0),  # the code's own token is the model's choice: margin -4.99
              lp(t9=-0.3, t8=-0.4)]  # the code's token is not among the top: the largest doubt
    found = doubts(ids, scored, start=2, positions=3, alternatives=2)
    assert [d.position for d in found] == [4, 2, 3]
    assert found[0].others == (9, 8) and found[1].others == (7, 8) and found[2].others == (6,)
    assert found[1].margin == 1.5


def test_doubts_keep_the_first_positions_and_tolerate_missing_entries() -> None:
    ids = [1, 2, 3]
    assert doubts(ids, [None, None], start=0, positions=4, alternatives=1) == []  # shorter list, empty entries
    tied = doubts(ids, [lp(t5=-1.0, t1=-1.0), lp(t5=-1.0, t2=-1.0), lp(t5=-1.0, t3=-1.0)], 0, 2, 1)
    assert [d.position for d in tied] == [0, 1]  # equal margins: earlier first, cut at `positions`
