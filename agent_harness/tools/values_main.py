"""Run a Python test script as `python3 script.py [args]` runs it; when it stops at a failing `assert`,
print what the assert's operands held (`--show-values`: run_tests passes this file's text to `python3 -c`).

A bare `assert f(x) == y` says only that it failed; a small model fixing `f` needs what `f(x)` returned.
The operands (and the calls of non-builtin functions inside them) are evaluated again in the failing
frame, once each, after the traceback is printed as Python prints it; whatever they print or raise is the
script's own doing, like the rest of its run. A call with side effects or randomness may return something
else the second time: the line shows what it returned then. Self-contained: it runs inside the sandbox, where the
harness is not importable.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import reprlib
import sys
import traceback
import types
from types import FrameType, TracebackType

HEADER = "Values in the failing assert:"
MAX_VALUES = 4
MAX_LINE = 300
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 160
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 12
_REPR.maxlevel = 4
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a default repr's address: no run shows the same one


def _literal(node: ast.expr) -> bool:
    """A constant the source already shows (`3`, `"a"`, `[1, -2]`, `{"k": None}`)."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _calls(node: ast.expr) -> list[ast.expr]:
    """The calls inside `node` of functions that are not builtins (`candidate(x)` in `abs(candidate(x) - 1)`)."""
    found: list[ast.expr] = []
    for sub in ast.walk(node):
        if sub is not node and isinstance(sub, ast.Call) and \
                not (isinstance(sub.func, ast.Name) and hasattr(builtins, sub.func.id)):
            found.append(sub)
    return found


def shown(test: ast.expr) -> list[ast.expr]:
    """The expressions of an assert's test worth showing: its operands, then the calls inside them."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Compare):
        operands = [test.left, *test.comparators]
    elif isinstance(test, ast.BoolOp):
        operands = list(test.values)
    else:
        operands = [test]
    operands = [op for op in operands if not _literal(op)]
    out: list[ast.expr] = []
    for expr in [*operands, *(c for op in operands for c in _calls(op))]:
        if all(ast.dump(expr) != ast.dump(o) for o in out):
            out.append(expr)
    return out[:MAX_VALUES]


def _assert_at(tree: ast.AST, line: int) -> ast.Assert | None:
    """The innermost assert whose lines hold `line`."""
    holding = [node for node in ast.walk(tree)
               if isinstance(node, ast.Assert) and node.lineno <= line <= (node.end_lineno or node.lineno)]
    return max(holding, key=lambda node: node.lineno, default=None)


def _value(expr: ast.expr, source: str, frame: FrameType) -> str:
    text = " ".join((ast.get_source_segment(source, expr) or ast.unparse(expr)).split())
    try:
        code = compile(ast.Expression(expr), frame.f_code.co_filename, "eval")
        value = _REPR.repr(eval(code, frame.f_globals, dict(frame.f_locals)))  # noqa: S307 - the test's own code
    except Exception as e:  # noqa: BLE001 - what it raised is the value to show
        value = f"raised {type(e).__name__}: {e}"
    line = f"  {text} = {_ADDRESS.sub('', value)}"
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + " ..."


def values(tb: TracebackType) -> list[str]:
    """The lines to print for a traceback that ends at a failing assert (none when it does not)."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame, line = tb.tb_frame, tb.tb_lineno
    try:
        with open(frame.f_code.co_filename, encoding="utf-8") as f:
            source = f.read()
        node = _assert_at(ast.parse(source), line)
    except (OSError, ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    if node is None:
        return []
    found = [_value(e, source, frame) for e in shown(node.test)]
    return [HEADER, *found] if found else []


def run(script: str) -> None:
    """Run `script` as Python runs a script: a fresh `__main__` module, its file's absolute path in
    `__file__`, its folder first on sys.path, sys.argv as given."""
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec")
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - the test script, as `python3 script.py` runs it


def main() -> None:
    """Run sys.argv[1]; on an uncaught exception print its traceback from the script's first frame on,
    then, for an AssertionError, the assert's values; exit 1 as Python does."""
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(script)
    try:
        run(script)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported as Python reports it
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        sys.stdout.flush()
        traceback.print_exception(type(e), e, tb)
        if isinstance(e, AssertionError) and tb is not None:
            try:
                shown_lines = values(tb)
            except Exception:  # noqa: BLE001 - the values are a courtesy; the failure is already printed
                shown_lines = []
            if shown_lines:
                print("\n".join(shown_lines), file=sys.stderr)
        sys.stderr.flush()
        sys.exit(1)


if __name__ == "__main__":
    main()
