"""Release tooling."""

from vendor.semverkit import key


def newest(versions: list[str]) -> str:
    """The highest semantic version in the list ('v' prefixes and pre-releases allowed)."""
    return max(versions, key=key)
