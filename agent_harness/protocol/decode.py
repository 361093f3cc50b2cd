"""Decoding the call object after TOOL_CALL:: strict JSON, then JSON with raw control characters,
then a Python literal (read from its syntax tree, never evaluated). Records which one in `repairs`."""

from __future__ import annotations

import ast
import json
import warnings
from typing import Any

from ..errors import FormatError

MAX_DEPTH = 100  # nesting depth accepted from Python-literal replies


def scan_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes text[start], skipping '...' and "..." strings."""
    depth, i, quote, n = 0, start, "", len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def from_ast(node: ast.AST, depth: int = 0) -> Any:
    """Turn a Python/JSON literal AST into JSON values; evaluates nothing."""
    if depth > MAX_DEPTH:
        raise ValueError("too deep")
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "True": True, "false": False, "False": False}.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = from_ast(node.operand, depth + 1)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [from_ast(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            key = from_ast(k, depth + 1) if k is not None else None
            if not isinstance(key, str):
                raise ValueError("non-string key")
            out[key] = from_ast(v, depth + 1)
        return out
    raise ValueError(f"not a literal: {type(node).__name__}")


def python_literal(src: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes like '\d' warn, and tests may run -W error
        tree = ast.parse(src.strip(), mode="eval")
    return from_ast(tree.body)


def decode(text: str, start: int, repairs: list[str]) -> tuple[dict[str, Any], int]:
    """Decode the object at text[start] ("{"): strict JSON, then lax JSON, then a Python literal."""
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        err = e
    except (ValueError, RecursionError, MemoryError):  # e.g. an int of 5000 digits, deep nesting
        raise FormatError("The JSON after TOOL_CALL: has a number too long or nests too deep.") from None
    try:
        obj, end = json.JSONDecoder(strict=False).raw_decode(text, start)
        repairs.append("literal_newlines")
        return obj, end
    except json.JSONDecodeError as e:
        err = e  # control characters are forgiven now, so this is the real fault
    except (ValueError, RecursionError, MemoryError):
        pass
    closed = scan_end(text, start)
    if closed is None:
        raise FormatError(
            "The JSON after TOOL_CALL: is not closed (missing }). Was the reply cut off? Keep it shorter."
        )
    try:
        obj = python_literal(text[start:closed])  # a dict: the slice starts at "{" and sets are refused
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        near = text[max(start, err.pos - 15) : err.pos + 15]
        raise FormatError(
            f"Invalid JSON after TOOL_CALL: {err.msg} near {near!r}. "
            'Use double quotes; inside strings write \\" and \\n.'
        ) from None
    repairs.append("python_literal")
    return obj, closed

