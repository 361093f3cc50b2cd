"""Making text that came from the model safe for the OS, for JSON files and for tokenizers."""

from __future__ import annotations

# A lone surrogate (e.g. the JSON escape "\ud800") is a valid Python str but not encodable as UTF-8:
# the OS, the trace writer and the tokenizers would all raise on it.
_SURROGATES = {c: 0xFFFD for c in range(0xD800, 0xE000)}
MAX_ERROR_CHARS = 500


def has_surrogates(s: str) -> bool:
    """True when `s` cannot be encoded as UTF-8 (it holds a lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def safe_text(s: str) -> str:
    """`s` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    return s.translate(_SURROGATES) if has_surrogates(s) else s


def error_message(e: BaseException, hide: tuple[str, ...] = ()) -> str:
    """The message of an exception for an observation or a trace: the `hide` paths (the workspace's
    host folder) removed, surrogates replaced, and cut to a readable length."""
    msg = str(e)
    for path in sorted({p for p in hide if p}, key=len, reverse=True):
        msg = msg.replace(path + "/", "").replace(path, ".")
    msg = safe_text(msg)
    return msg if len(msg) <= MAX_ERROR_CHARS else msg[: MAX_ERROR_CHARS - 3] + "..."


def error_text(e: BaseException, hide: tuple[str, ...] = ()) -> str:
    """`Type: message` of an exception (see `error_message`)."""
    msg = error_message(e, hide)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__
