"""Article helpers."""

from vendor.textslug import slugify


def make_slug(title: str) -> str:
    """URL slug for an article title: 'Crème Brûlée, Again!' -> 'creme-brulee-again'."""
    return slugify(title)
