"""Every parser and extractor applied to model output runs in linear time on adversarial replies,
counted in executed steps (never seconds).

A fence marker followed by 40k spaces once made a backtracking regex take 12 s; re-parsing every
prefix of an 8,000-line reply inside an unclosed bracket took 40 s. The reply parser
(agent_harness.protocol) and the code extraction of the single-shot and reflect strategies
(agent_harness.strategies.extract) scan model text with str methods and index loops only. These tests
count the Python lines they execute (sys.settrace, restricted to their modules) and the characters they
hand to the C parsers (ast.parse, json's raw_decode), and require each count to stay within a constant
per character of the reply. Regex backtracking happens inside C, where no counter sees it, so model
text must not meet a regex at all: that is checked too.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_harness import protocol
from agent_harness.errors import FormatError
from agent_harness.protocol import decode, parser, scan
from agent_harness.strategies import extract
from agent_harness.tools import TOOLS
from agent_harness.tools import args as tool_args

SPECS = {name: t.spec for name, t in TOOLS.items()}
PARSER_MODULES = (protocol, parser, scan, decode, tool_args)  # every module parse_reply runs lines in
EXTRACTOR_MODULES = (extract, textwrap, ast)  # every module the code extraction runs lines in
STEPS_PER_CHAR = 20
FIXED_STEPS = 3000  # set-up lines that do not depend on the reply's length
# Characters handed to ast.parse and JSON decoding: a few whole-text passes (tabs widen code 4x),
# plus a fixed allowance that lets short replies be searched exhaustively.
PARSED_PER_CHAR = 40
FIXED_PARSED = 150_000
ENTRY, DECLARATION = "f", "import math\n\n\ndef f(x):\n"
_PARSE = ast.parse.__code__
_RAW_DECODE = json.JSONDecoder.raw_decode.__code__

# Pieces that each reach a different scan: markers, decoration, fences, JSON and its repairs.
ATOMS = [" ", "\t", "\n", "`", "```", "```json", "{", "}", "[", "(", ")", '"', "'", "\\", ":", "*", "#", ">", "_",
         "x", "THOUGHT", "THOUGHT:", "TOOL_CALL", "TOOL_CALL:", "FINAL", "FINAL:", "<tool_call>", "</tool_call>",
         '{"tool": "read_file", "args": {"path": "a.py"}}', '{"tool": "write_file", "args": {"path": "a.py"}}',
         '{"tool"', "tool", "read_file", "\\n", "ß"]


def work(call: Callable[[], Any], modules: tuple[Any, ...]) -> tuple[int, int]:
    """(Python lines of `modules` executed, characters handed to ast.parse and JSON's raw_decode)
    while `call` runs; a FormatError (the parser's answer to a bad reply) ends it like a return."""
    count = parsed = 0
    here = {m.__file__ for m in modules}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal parsed
        code = frame.f_code
        if code is _PARSE:
            parsed += len(frame.f_locals["source"])
        elif code is _RAW_DECODE:
            parsed += len(frame.f_locals["s"]) - frame.f_locals["idx"]
        return local if code.co_filename in here else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        call()
    except FormatError:
        pass
    finally:
        sys.settrace(previous)
    return count, parsed


def steps(text: str, parse: Any = None, modules: tuple[Any, ...] = PARSER_MODULES) -> int:
    """Python lines of `modules` executed while `parse` (default: parse_reply) reads `text`."""
    return work(lambda: parse(text) if parse else protocol.parse_reply(text, SPECS), modules)[0]


def linear(text: str, call: Callable[[str], Any], modules: tuple[Any, ...]) -> bool:
    lines, parsed = work(lambda: call(text), modules)
    return lines <= STEPS_PER_CHAR * len(text) + FIXED_STEPS and parsed <= PARSED_PER_CHAR * len(text) + FIXED_PARSED


def within_budget(text: str) -> bool:
    return linear(text, lambda t: protocol.parse_reply(t, SPECS), PARSER_MODULES)


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


# Replies shaped to make a parser or an extractor go back over what it has read. Each is 30k-200k
# characters; a quadratic scan of any of them takes billions of steps.
N_LINES = 8000
UNCLOSED = "def f(x):\n    return g(\n" + "        x,\n" * N_LINES  # the 40 s reply
ADVERSARIAL = {
    "unclosed bracket": UNCLOSED,
    "unclosed bracket, fenced": "Here it is:\n```python\n" + UNCLOSED,
    "unclosed bracket after prose": "The fix:\n" + UNCLOSED + "That is all.",
    "unclosed docstring": 'def f(x):\n    """\n' + "    doc (\n" * N_LINES,
    "unclosed string on every line": "It's broken\n" * N_LINES,
    "prose": "This is prose.\n" * N_LINES,
    "many fences": "```" * 20_000,
    "many fence lines": "```\n" * 20_000,
    "many fenced blocks": "```python\ndef f(x):\n```\n" * 3000,
    "fence, long tag": "```" + "a" * 40_000,
    "fences and spaces": ("```\n" + " " * 1000) * 40,
    "fence tags on one line": "```py x" * 10_000 + "\n",
    "many def lines": "def f(x):\n" * N_LINES,
    "many nested def lines": "".join("    " * (i % 40) + "def f(x):\n" for i in range(N_LINES // 4)),
    "many unclosed def lines": "    def f(\n" * N_LINES,
    "def on one line": "def " * 20_000,
    "def def (": "def def (" * 10_000,
    "async before def": "async " * 10_000 + "def f(x):\n    return x\n",
    "async across lines": "async" + " \n" * 20_000 + "def f(x):\n",
    "unicode space after def": "def\u2028" * 10_000 + "f(",
    "long name": "def " + "f" * 100_000 + "(",
    "decorators": "def f(x):\n    return x\n" + "@d\n" * N_LINES,
    "backslash continuations": "def f(x):\n    return x\n" + "x = 1 + \\\n" * N_LINES,
    "deep indentation": "".join("    " * i + "if x:\n" for i in range(99)) + "    " * 99 + "return x\n",
    "deep indentation, many lines": "".join(" " * (i % 400) + "x\n" for i in range(500)),
    "wide indentation": " " * 100_000 + "def f(x):",
    "tabs": "\t" * 50_000 + "x",
    "indented body": "    x = (\n" * N_LINES,
    "blank lines": "\n" * 100_000,
    "long line": "x = " + "1 + " * 25_000 + "1",
    "long line of brackets": "(" * 100_000,
    "long line of one letter": "a" * 100_000,
    "long parameter list": "def f(" + "x, " * 30_000,
    "deep unary chain": "def f(x):\n    return " + "-" * 100_000 + "x\n",
    "long attribute chain": "def f(x):\n    return x" + ".y" * 50_000 + "\n",
    "tool call with an unclosed bracket": 'THOUGHT: x\nTOOL_CALL: {"tool": "write_file", "args": {"path": "a.py", '
                                          '"content": "def f(x):\\n    return g(\\n' + "        x,\\n" * N_LINES,
    "tool call, content block": 'THOUGHT: x\nTOOL_CALL: {"tool": "write_file", "args": {"path": "a.py"}}\n```python\n'
                                + UNCLOSED,
    "python-literal call": "TOOL_CALL: {'tool': 'read_file', 'args': {'path': " + "(" * 150 + "'a'" + ")" * 150 + "}}",
}

# What the single-shot and reflect strategies (and scenarios/humanevalfix.py) apply to a reply.
EXTRACTORS: dict[str, Callable[[str], Any]] = {
    "extract_code": lambda t: extract.extract_code(t, ENTRY),
    "has_code": extract.has_code,
    "fixed_module": lambda t: extract.fixed_module(t, ENTRY, DECLARATION),
    "fixed_source": lambda t: extract.fixed_source(t, ENTRY, DECLARATION),
    "signature_problem": lambda t: extract.signature_problem(t, ENTRY, DECLARATION),
}


def test_extraction_uses_no_regex() -> None:
    assert "re" not in vars(extract)
    assert not [name for name, v in vars(extract).items() if isinstance(v, re.Pattern)]


def test_the_counts_see_the_extraction() -> None:
    """Both counts see what they count (they would pass vacuously on the wrong modules or calls)."""
    code = "def f(x):\n    return x"
    reply = f"Fixed:\n```python\n{code}\n```\nDone (it works."
    for name, call in EXTRACTORS.items():
        lines, parsed = work(partial(call, reply), EXTRACTOR_MODULES)
        assert lines > 10, name
        assert parsed >= (0 if name in ("extract_code", "has_code") else len(code)), name
    unclosed = "def f(x):\n    return (\n" + "x,\n" * 50
    _, parsed = work(lambda: extract.fixed_module(unclosed, ENTRY, DECLARATION), EXTRACTOR_MODULES)
    assert parsed > len(unclosed)  # parsed whole, then its prefixes
    obj = '{"tool": "read_file", "args": {"path": "a.py"}}'
    _, parsed = work(lambda: protocol.parse_reply(f"TOOL_CALL: {obj}", SPECS), PARSER_MODULES)
    assert parsed >= len(obj)


@pytest.mark.parametrize("shape", list(ADVERSARIAL))
def test_adversarial_replies_take_linear_steps(shape: str) -> None:
    text = ADVERSARIAL[shape]
    for name, call in EXTRACTORS.items():
        assert linear(text, call, EXTRACTOR_MODULES), (shape, name)
    assert within_budget(text), (shape, "parse_reply")


def test_the_unclosed_reply_still_yields_its_code() -> None:
    """Bounded, not blind: the 8,000-line reply gets the answer the exhaustive search gave (no prefix
    with the function parses, so the function is kept as written and fails its syntax check)."""
    module = extract.fixed_module(UNCLOSED, ENTRY, DECLARATION)
    assert module == "import math\n\n\n" + UNCLOSED
    source = "def f(x):\n    return 1\n\nThe bug was the missing (\n" + "x\n" * N_LINES
    assert extract.fixed_module(source, ENTRY, DECLARATION) == "import math\n\n\ndef f(x):\n    return 1\n"


CODE_ATOMS = ["\n", " ", "    ", "\t", "```", "```python\n", "def f(x):", "def ", "async ", "@d", "(", ")", "[", "'",
              '"""', "\\", ":", "x", "return x", "if x:", "The fix.", "\u2028", "é"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.sampled_from(CODE_ATOMS), st.integers(1, 2000)), min_size=1, max_size=6))
def test_long_pathological_replies_extract_in_linear_steps(pieces: list[tuple[str, int]]) -> None:
    text = "".join(atom * times for atom, times in pieces)
    for name, call in EXTRACTORS.items():
        assert linear(text, call, EXTRACTOR_MODULES), (name, [(atom, times) for atom, times in pieces])
