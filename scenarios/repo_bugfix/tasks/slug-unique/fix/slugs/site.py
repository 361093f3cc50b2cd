from .text import slugify


class Site:
    """Hands out slugs; a repeated title gets -2, -3, ... appended."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def slug_for(self, title: str) -> str:
        base = slugify(title)
        count = self.seen.get(base, 0) + 1
        self.seen[base] = count
        if count == 1:
            return base
        return f"{base}-{count}"
