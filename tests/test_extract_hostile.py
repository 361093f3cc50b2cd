"""Hostile replies to the code extraction, through the CLI with a scripted model and the real sandbox:
each reply becomes an attempt the harness judges (a syntax error, a failing module), never a stall or a
crash, and the episode goes on to the next reply. (How many steps the extraction takes is counted in
tests/test_protocol_linear.py; no test here times anything.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAD = "```python\ndef truncate_number(number: float) -> float:\n"
UNCLOSED = HEAD + "    return round(\n" + "        number,\n" * 8000  # cut off inside a bracket
DEEP = HEAD + "    return number" + ".real" * 50_000 + "\n```"  # nests past the parser's recursion limit
FIX = HEAD + "    return number % 1.0\n```"


def run(tmp_path: Path, agent: str, replies: list[str], *flags: str) -> dict[str, Any]:
    """One scripted episode of Python/2 (truncate_number) under `agent`; returns its trace."""
    tmp_path.mkdir(exist_ok=True)
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    reg = tmp_path / "models.yaml"
    model = {"name": "hostile", "backend": "scripted", "max_tokens": 32768, "script": str(script)}
    reg.write_text(f"models:\n  - {json.dumps(model)}\n")  # room for the 8,000-line reply
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--models", "hostile",
                        "--agent", agent, "--tasks", "Python/2", "--out", str(out), "--no-embed", *flags],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "summary.json").is_file(), r.stderr[-3000:]
    [trace] = list(out.rglob("run_*.json"))
    return dict(json.loads(trace.read_text()))


@pytest.mark.parametrize("draft", ["chat", "bigcode"])
def test_reflect_judges_each_hostile_reply_and_goes_on(tmp_path: Path, draft: str) -> None:
    """The chat draft takes a code block every turn; the default bigcode draft continues the prefilled
    declaration on the first turn, so its hostile body comes without the head, then chat turns follow."""
    first = DEEP if draft == "chat" else DEEP.removeprefix(HEAD).removesuffix("```")
    trace = run(tmp_path, "reflect", [first, UNCLOSED, FIX], "--reflect-draft", draft)
    assert trace["agent"]["reflect"]["draft"] == draft
    feedback = [s for s in trace["steps"] if s["type"] == "feedback"]
    assert [s["check"] for s in feedback] == ["syntax", "syntax", "passed"], [s["text"][:200] for s in feedback]
    assert "cannot be compiled" in feedback[0]["text"]
    assert "never closed" in feedback[1]["text"]
    attempts = [s for s in trace["steps"] if s["type"] == "attempt"]
    assert attempts[1]["text"].count("        number,\n") == 8000  # the code as written, not cut short
    assert trace["outcome"]["passed"] is True


def test_single_shot_scores_a_hostile_reply_as_a_failure(tmp_path: Path) -> None:
    for name, reply in (("deep", DEEP), ("unclosed", UNCLOSED)):
        outcome = run(tmp_path / name, "single-shot-chat", [reply])["outcome"]  # the one that extracts code
        assert outcome["exit_reason"] == "submitted" and outcome["error"] is None, (name, outcome["error"])
        assert outcome["completed"] is True and outcome["passed"] is False, name
