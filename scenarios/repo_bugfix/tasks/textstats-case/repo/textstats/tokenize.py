import re

WORD = re.compile(r"[a-z']+")


def words(text: str) -> list[str]:
    """Split text into lowercase words; case and punctuation do not matter."""
    return [w.strip("'") for w in WORD.findall(text) if w.strip("'")]
