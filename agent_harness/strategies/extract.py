"""Python code out of a model's completion: the single-shot and reflect strategies' answer extraction.

A completion may hold fenced blocks, bare code after some prose, or only the indented body of the
function. `fixed_module` turns any of these into the whole module (the declaration above the
function kept as the task gave it), `fixed_source` does so for reflect (prose is no answer), and
`signature_problem` says why a module cannot be tested. No regex ever scans model text for fences:
`_fenced_blocks` is a linear str.find scan.
"""

from __future__ import annotations

import ast
import re
import textwrap

_LANG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")
_CODE_START = re.compile(r"^(from |import |def |async def |class |@)")
_TOP_DEF = re.compile(r"^(async\s+)?def\s+\w+\s*\(", re.M)
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
         ast.AnnAssign)


def _def_re(name: str, top_level: bool = False) -> re.Pattern[str]:
    indent = "" if top_level else r"[ \t]*"
    return re.compile(rf"^{indent}(async\s+)?def\s+{re.escape(name)}\s*\(", re.M)


def _defines(code: str, name: str, top_level: bool = False) -> bool:
    return _def_re(name, top_level).search(code) is not None


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
        if _CODE_START.match(line):
            return "\n".join(lines[i:]) + "\n"
    return completion


def has_code(completion: str) -> bool:
    """A fenced block, a line that starts code (def, import, ...) or an indented body: not prose only."""
    lines = completion.splitlines()
    return bool(_fenced_blocks(completion) or (lines and lines[0][:1] in (" ", "\t") and completion.strip())
                or any(_CODE_START.match(line) for line in lines))


def _parse_prefix(code: str) -> ast.Module | None:
    """Parse the longest prefix of `code` (whole lines) that is valid Python; prose may follow."""
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except SyntaxError:
            continue
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
    m = _def_re(entry_point, top_level=True).search(declaration)
    return declaration[: m.start()] if m else ""


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
    if _TOP_DEF.search(code) and not _defines(code, entry_point, top_level=True):
        return code
    return fixed_module(completion, entry_point, declaration)
