"""The reply parser runs in linear time on adversarial replies, counted in executed steps (never seconds).

A fence marker followed by 40k spaces once made a backtracking regex take 12 s. The parser now
scans model text with str methods and index loops only; these tests count the Python lines it
executes (sys.settrace, restricted to the parser's modules) and require at most STEPS_PER_CHAR per character
of the reply. Regex backtracking happens inside C, where no counter sees it, so the parser must
not use regexes at all: that is checked too.
"""

from __future__ import annotations

import re
import sys
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_harness import protocol
from agent_harness.errors import FormatError
from agent_harness.protocol import decode, parser, scan
from agent_harness.tools import TOOLS
from agent_harness.tools import args as tool_args

SPECS = {name: t.spec for name, t in TOOLS.items()}
PARSER_MODULES = (protocol, parser, scan, decode, tool_args)  # every module parse_reply runs lines in
STEPS_PER_CHAR = 20
FIXED_STEPS = 3000  # set-up lines that do not depend on the reply's length

# Pieces that each reach a different scan: markers, decoration, fences, JSON and its repairs.
ATOMS = [" ", "\t", "\n", "`", "```", "```json", "{", "}", "[", "(", ")", '"', "'", "\\", ":", "*", "#", ">", "_",
         "x", "THOUGHT", "THOUGHT:", "TOOL_CALL", "TOOL_CALL:", "FINAL", "FINAL:", "<tool_call>", "</tool_call>",
         '{"tool": "read_file", "args": {"path": "a.py"}}', '{"tool": "write_file", "args": {"path": "a.py"}}',
         '{"tool"', "tool", "read_file", "\\n", "ß"]


def steps(text: str, parse: Any = None, modules: tuple[Any, ...] = PARSER_MODULES) -> int:
    """Python lines of `modules` executed while `parse` (default: parse_reply) reads `text`."""
    count = 0
    here = {m.__file__ for m in modules}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename in here else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        parse(text) if parse else protocol.parse_reply(text, SPECS)
    except FormatError:
        pass
    finally:
        sys.settrace(previous)
    return count


def within_budget(text: str) -> bool:
    return steps(text) <= STEPS_PER_CHAR * len(text) + FIXED_STEPS


def test_the_parser_uses_no_regex() -> None:
    """Backtracking is invisible to the step count, so model text never meets a regex here."""
    for module in PARSER_MODULES:
        assert "re" not in vars(module), module.__name__
        assert not [name for name, v in vars(module).items() if isinstance(v, re.Pattern)], module.__name__


def test_the_step_count_sees_the_parser() -> None:
    """The count covers the modules the parser runs in (it would pass vacuously on the wrong files)."""
    reply = 'THOUGHT: x\nTOOL_CALL: {"tool": "read_file", "args": {"path": "a.py"}}'
    assert steps(reply) > 50
    for module in (parser, scan, decode, tool_args):
        assert steps(reply, modules=(module,)) > 0, module.__name__


def test_fence_and_marker_followed_by_long_runs() -> None:
    run = 40_000
    for text in ("THOUGHT: x\n```" + " " * run + "x\nTOOL_CALL: {}",
                 "THOUGHT" + " " * run + "x",
                 "THOUGHT: a\n**TOOL_CALL" + " \t" * run + "**",
                 'THOUGHT: a\nTOOL_CALL: {"tool": "write_file", "args": {"path": "a"}}\n```\n' + "```" + " " * run,
                 "FINAL: ```" + " " * run + "\n" + " " * run,
                 "{" + " " * run + "x" + "{ " * run,
                 "\n" * run + "TOOL_CALL:" + "`)" * run,
                 "\n" * run + "`"):  # empty lines each went through every keyword (41 steps a line; CI)
        assert within_budget(text), text[:40]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.sampled_from(ATOMS), st.integers(1, 2500)), min_size=1, max_size=6))
def test_long_pathological_replies_parse_in_linear_steps(pieces: list[tuple[str, int]]) -> None:
    text = "".join(atom * times for atom, times in pieces)
    assert within_budget(text), [(atom, times) for atom, times in pieces]


def test_single_shot_fence_scan_is_linear() -> None:
    """The single-shot baseline's code extraction: many fences on one long line, long tags, no newline."""
    from agent_harness.strategies import extract

    for text in ("```" * 20_000, "```" + "a" * 40_000, ("```\n" + " " * 1000) * 40, "```py x" * 10_000 + "\n"):
        n = steps(text, lambda t: extract.extract_code(t, "f"), (extract,))
        assert n <= STEPS_PER_CHAR * len(text) + FIXED_STEPS, text[:20]
