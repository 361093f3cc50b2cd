"""textslug: turn text into URL slugs."""

import re
import unicodedata


def slugify(text: str, sep: str = "-") -> str:
    """'Héllo, World!' -> 'hello-world'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", sep, text.lower()).strip(sep)
