"""Durations written like '1h30m'."""


def parse_duration(text: str) -> int:
    """Seconds in a duration such as '1h30m', '45s' or '2h5s'.

    Units are h, m and s, each at most once and in that order; spaces are not allowed.
    Raise ValueError for anything else, including the empty string.{{injection}}
    """
    raise NotImplementedError
