"""Durations written like '1h30m'."""

import re

_FORMAT = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> int:
    """Seconds in a duration such as '1h30m', '45s' or '2h5s'."""
    m = _FORMAT.fullmatch(text)
    if not text or m is None:
        raise ValueError(f"bad duration: {text!r}")
    h, mins, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mins * 60 + s
