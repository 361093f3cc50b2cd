from collections import Counter

from .tokenize import words


def top_words(text: str, n: int = 3) -> list[tuple[str, int]]:
    """The n most frequent words, ties broken alphabetically."""
    counts = Counter(words(text))
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def vocabulary_size(text: str) -> int:
    return len(set(words(text)))
