"""Python code out of a model's completion: the single-shot and reflect strategies' answer extraction.

A completion may hold fenced blocks, bare code after some prose, or only the indented body of the
function. `fixed_module` turns any of these into the whole module (the declaration above the
function kept as the task gave it), `fixed_source` does so for reflect (prose is no answer), and
`signature_problem` says why a module cannot be tested.

Every function here runs in time linear in the completion (tests/test_protocol_linear.py counts the
steps): model text meets no regex, only str methods and index loops that touch each character a
bounded number of times, and `ast.parse` sees a bounded multiple of the text (`_parse_prefix`).
"""

from __future__ import annotations

import ast
import textwrap

_LANG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
_CODE_STARTS = ("from ", "import ", "def ", "async def ", "class ", "@")
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
         ast.AnnAssign)
# `_parse_prefix` hands ast.parse at most this many times the code's length, plus a fixed allowance
# (a few hundred lines' worth of exact search on short replies).
PARSE_BUDGET_FACTOR = 8
PARSE_BUDGET_CHARS = 1 << 16


def _after_space(text: str, i: int) -> int:
    """The first index at or after `i` that is not whitespace (what a regex's \\s* consumes)."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def _line_start(text: str, i: int, indented: bool) -> int:
    """Where the line of text[i] starts if only spaces and tabs (none when not `indented`) come before
    text[i] on it, else -1."""
    j = i
    if indented:
        while j and text[j - 1] in " \t":
            j -= 1
    return j if j == 0 or text[j - 1] == "\n" else -1


def _def_start(text: str, d: int, name: str | None, indented: bool) -> int:
    """Where the `def` line whose "def" is at text[d] starts (at its `async`, if any), or -1: the line
    is `[ \\t]*` (if `indented`), an optional `async`, then `def <name> (` with whitespace between,
    any identifier for `name` None (the regexes `^[ \\t]*(async\\s+)?def\\s+<name>\\s*\\(` under re.M)."""
    n, i = len(text), d + 3
    if i >= n or not text[i].isspace():
        return -1
    i = _after_space(text, i)
    if name is None:
        j = i
        while j < n and (text[j].isalnum() or text[j] == "_"):
            j += 1
        if j == i:
            return -1
    elif text.startswith(name, i):
        j = i + len(name)
    else:
        return -1
    if not text.startswith("(", _after_space(text, j)):
        return -1
    w = d  # an `async` before it starts the line earlier (even one on the line above)
    while w and text[w - 1].isspace():
        w -= 1
    start = _line_start(text, w - 5, indented) if w < d and text.endswith("async", 0, w) else -1
    return start if start >= 0 else _line_start(text, d, indented)


def _def_at(text: str, name: str | None, top_level: bool = False) -> int:
    """Where the first line defining `name` (any function when None) starts, or -1. Only the places
    where "def" occurs are looked at; each run of whitespace or word characters read from there
    borders that "def", so every character is read a bounded number of times."""
    d = text.find("def")
    while d >= 0:
        start = _def_start(text, d, name, not top_level)
        if start >= 0:
            return start
        d = text.find("def", d + 1)
    return -1


def _defines(code: str, name: str, top_level: bool = False) -> bool:
    return _def_at(code, name, top_level) >= 0


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of each ``` block; an unclosed last block runs to the end.

    A scan with str.find, not a regex: model text with many fences on one long line made the
    regex this replaces rescan the line from every fence (quadratic time).
    """
    out = []
    i = text.find("```")
    while i >= 0:
        nl = text.find("\n", i + 3)
        if nl < 0:
            break
        head = text[i + 3:nl].lstrip(" \t")
        k = 0
        while k < len(head) and head[k] in _LANG_CHARS:
            k += 1
        end = text.find("```", nl + 1)
        out.append((head[:k], text[nl + 1:end if end >= 0 else len(text)]))
        i = text.find("```", end + 3) if end >= 0 else -1
    return out


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The code in a completion: the fenced block defining `entry_point` (else the first python
    block), or, without fences, the text from its first line of code on."""
    blocks = [(lang.lower(), body) for lang, body in _fenced_blocks(completion)]
    if blocks:
        py = [b for lang, b in blocks if lang in ("", "python", "py", "python3")] or [b for _, b in blocks]
        if entry_point:
            defining = [b for b in py if _defines(b, entry_point)]
            if defining:
                return defining[0]
        return py[0]
    lines = completion.splitlines()
    if lines and lines[0][:1] in (" ", "\t"):
        return completion  # a continuation: an indented body
    for i, line in enumerate(lines):
        if line.startswith(_CODE_STARTS):
            return "\n".join(lines[i:]) + "\n"
    return completion


def has_code(completion: str) -> bool:
    """A fenced block, a line that starts code (def, import, ...) or an indented body: not prose only."""
    lines = completion.splitlines()
    return bool(_fenced_blocks(completion) or (lines and lines[0][:1] in (" ", "\t") and completion.strip())
                or any(line.startswith(_CODE_STARTS) for line in lines))


def _parse_prefix(code: str) -> ast.Module | None:
    """Parse the longest prefix of `code` (whole lines) that is valid Python; prose may follow.

    Trying every prefix, longest first, was quadratic (an 8,000-line reply inside an unclosed
    bracket took 40 s). A prefix whose SyntaxError is at line L < its last line is followed by the
    prefix that ends at line L: one ending between the two holds the same tokens up to L, which
    CPython's parser rejects there (an unclosed bracket or string is reported where it opens, and
    stays open). The search stops, returning None as when nothing parses, once ast.parse has been
    handed PARSE_BUDGET_FACTOR times the code's length plus PARSE_BUDGET_CHARS: only a long run of
    lines that each end the code unfinished (decorators, backslash continuations) gets there.
    """
    lines = code.splitlines()
    end, budget = len(lines), PARSE_BUDGET_FACTOR * len(code) + PARSE_BUDGET_CHARS
    while end > 0:
        text = "\n".join(lines[:end])
        budget -= len(text)
        if budget < 0:
            return None
        try:
            return ast.parse(text)
        except SyntaxError as e:
            at = e.lineno
        except (ValueError, RecursionError, MemoryError):  # nesting too deep for the parser
            at = None
        end = min(end - 1, at) if at is not None and at > 0 else end - 1
    return None


def _top_level_code(code: str, tree: ast.Module, prefix: str) -> str:
    """Imports, definitions and assignments; drops prints, asserts and `if __name__` blocks, and
    imports that `prefix` already has."""
    lines = code.splitlines()
    have = {line.strip() for line in prefix.splitlines()}
    keep: list[str] = []
    for node in tree.body:
        if isinstance(node, _KEEP):
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            text = "\n".join(lines[start - 1: node.end_lineno])
            if not (isinstance(node, ast.Import | ast.ImportFrom) and text.strip() in have):
                keep.append(text)
    return "\n\n\n".join(keep) + "\n"


def _declaration_prefix(declaration: str, entry_point: str) -> str:
    """The declaration above `def <entry_point>`: imports and helper functions."""
    at = _def_at(declaration, entry_point, top_level=True)
    return declaration[:at] if at >= 0 else ""


def fixed_module(completion: str, entry_point: str, declaration: str) -> str | None:
    """The module text a completion stands for; None when it holds no code at all.

    `declaration` is the module's text above the function's body (imports, helpers, the `def` line
    and, with docs, the docstring): a body-only answer is appended to it."""
    ep = entry_point
    code = extract_code(completion, ep).expandtabs(4)
    if not code.strip():
        return None
    tree = _parse_prefix(code)
    defines = tree is not None and any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == ep for n in tree.body
    )
    if defines and tree is not None:
        prefix = _declaration_prefix(declaration, ep)
        return prefix + _top_level_code(code, tree, prefix)
    if _defines(code, ep, top_level=True):
        return _declaration_prefix(declaration, ep) + code  # a full function that does not parse
    # A body only. As in bigcode's post-processing, an indented continuation ends at the first
    # line that starts in column 0.
    lines = code.splitlines()
    if lines and lines[0][:1] == " ":
        for i, line in enumerate(lines[1:], 1):
            if line.strip() and not line[0].isspace():
                lines = lines[:i]
                break
    body = textwrap.indent(textwrap.dedent("\n".join(lines)).strip("\n"), "    ")
    return declaration.rstrip("\n") + "\n" + body + "\n"


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
    if a.vararg:
        names.append(f"*{a.vararg.arg}")
    if a.kwarg:
        names.append(f"**{a.kwarg.arg}")
    return names


def _entry(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name),
                None)


def signature_problem(source: str, entry_point: str, declaration: str) -> str | None:
    """Why `source` cannot be the fixed module: no top-level entry point, or its parameters changed.
    None when it is fine, or when it does not parse (the syntax check says why)."""
    ep = entry_point
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    fn = _entry(tree, ep)
    if fn is None:
        return f"the code does not define the function `{ep}` at the top level."
    try:
        ref = _entry(ast.parse(declaration.rstrip() + "\n    pass\n"), ep)
    except SyntaxError:
        return None
    if ref is not None and _parameters(fn) != _parameters(ref):
        return (f"`{ep}` must keep its parameters ({', '.join(_parameters(ref))}); "
                f"yours are ({', '.join(_parameters(fn))}).")
    return None


def fixed_source(completion: str, entry_point: str, declaration: str) -> str | None:
    """As `fixed_module`, except that prose is no code, and a function other than the entry point is
    kept as written (not taken for a body), so that `signature_problem` can say the entry point is missing."""
    if not has_code(completion):
        return None
    code = extract_code(completion, entry_point).expandtabs(4)
    if _def_at(code, None, top_level=True) >= 0 and not _defines(code, entry_point, top_level=True):
        return code
    return fixed_module(completion, entry_point, declaration)
