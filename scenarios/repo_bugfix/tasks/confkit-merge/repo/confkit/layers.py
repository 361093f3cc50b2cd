from .merge import deep_merge
from .parse import parse_lines


def load(*layers: list[str]) -> dict:
    """Merge config layers given as lists of lines; later layers win."""
    config: dict = {}
    for lines in layers:
        config = deep_merge(config, parse_lines(lines))
    return config
