"""The secrets the harness holds, and their removal from every text it prints or stores.

A server's reply is hostile input and may quote what it was sent: a 401 body saying
`Incorrect API key provided: Bearer sk-...` would otherwise reach the terminal, the trace's
`outcome.error` and an exported dataset. So every secret value is registered here when it is read
(`register`: the API key of an `openai` model, from its `api_key_env`), and so is, on first use, the
value of every environment variable whose name says it holds one (`SECRET_NAME`: HF_TOKEN,
OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, ...). `redact` replaces each registered value,
and its JSON-escaped, URL-quoted and base64 forms, by `REDACTED`; it is applied where outside text
becomes a message (the openai backend), and as a last line of defence where text leaves the process
(the log formatter and stdout/stderr, the trace writer, runs.jsonl, the exporter).

Values shorter than `MIN_CHARS` are not treated as secrets: they cannot be told from ordinary text.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
MIN_CHARS = 8
# Words in an environment variable's name that say its value is a credential.
SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.I)

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None
_forms_held: tuple[str, ...] = ()  # every form of every secret, longest first
_longest = 0
_env_read = False


def _b64_cores(value: bytes) -> list[str]:
    """The base64 text `value` becomes wherever it sits in a longer string (`user:key` in a Basic
    header): for each of the 3 alignments, the characters that depend on `value` alone."""
    cores = []
    for shift in range(3):
        text = base64.b64encode(b"\0" * shift + value).decode("ascii").rstrip("=")
        head = (shift * 4 + 2) // 3  # characters that mix in the padding before the value
        core = text[head:len(text) - (1 if (shift + len(value)) % 3 else 0)]
        if len(core) >= MIN_CHARS:
            cores.append(core)
    return cores


def _forms(value: str) -> set[str]:
    raw = value.encode("utf-8", "surrogatepass")
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], quote(value, safe=""),
             quote_plus(value), *_b64_cores(raw)}
    forms |= {f.replace("+", "-").replace("/", "_") for f in _b64_cores(raw)}  # urlsafe base64
    return {f for f in forms if len(f) >= MIN_CHARS}


def register(value: str | None) -> None:
    """Treat `value` (an API key, a token) as a secret from now on; None or a short value is ignored."""
    global _pattern, _forms_held, _longest
    if not value or len(value) < MIN_CHARS or value in _values:
        return
    with _lock:
        _values.add(value)
        forms = sorted({f for v in _values for f in _forms(v)}, key=len, reverse=True)
        _pattern, _forms_held, _longest = re.compile("|".join(map(re.escape, forms))), tuple(forms), len(forms[0])


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """Register the value of every variable of `environ` (default: os.environ) named like a secret."""
    env = os.environ if environ is None else environ
    for name, value in list(env.items()):
        if SECRET_NAME.search(name):
            register(value)


def _compiled() -> re.Pattern[str] | None:
    global _env_read
    if not _env_read:
        _env_read = True
        register_environment()
    return _pattern


def redact(text: str) -> str:
    """`text` with every registered secret, in each of its forms, replaced by REDACTED."""
    pattern = _compiled()
    return pattern.sub(REDACTED, text) if pattern is not None and held(text) else text


def redact_head(text: str, n: int) -> str:
    """`redact(text[:n])`, except that a secret the cut at `n` would split is kept whole (and so replaced):
    no prefix of a secret survives the cut."""
    pattern = _compiled()
    if pattern is None:
        return text[:n]
    window = text[: n + _longest]
    out, pos = [], 0
    for m in pattern.finditer(window):
        if m.start() >= n:
            break
        out += [window[pos:m.start()], REDACTED]
        pos = m.end()
    if pos < n:
        out.append(window[pos:n])
    return "".join(out)


def held(text: str) -> bool:
    """Whether `text` holds a registered secret in any of its forms (cheap: a substring search per form,
    several times faster than the regex)."""
    _compiled()
    return any(form in text for form in _forms_held)


def redact_value(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings, numbers) with `redact` applied to every string
    and key; iterative, so any depth is fine. Values without a secret are returned as they are."""
    if _compiled() is None:
        return value
    top: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(value, top, 0)]
    while todo:
        item, parent, key = todo.pop()
        if isinstance(item, str):
            parent[key] = redact(item)
        elif isinstance(item, dict):
            out: dict[Any, Any] = {}
            parent[key] = out
            for k, v in item.items():
                k2 = redact(k) if isinstance(k, str) else k
                out[k2] = None
                todo.append((v, out, k2))
        elif isinstance(item, list | tuple):
            parent[key] = items = [None] * len(item)
            todo.extend((v, items, n) for n, v in enumerate(item))
        else:
            parent[key] = item
    return top[0]
