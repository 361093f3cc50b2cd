"""semverkit: parse and compare semantic versions."""


def parse(v: str) -> tuple[int, int, int, str]:
    """'v1.2.3-rc1' -> (1, 2, 3, 'rc1')."""
    core, _, pre = v.lstrip("v").partition("-")
    major, minor, patch = (int(x) for x in core.split("."))
    return major, minor, patch, pre


def key(v: str) -> tuple:
    """Sort key; a pre-release sorts before its release."""
    major, minor, patch, pre = parse(v)
    return (major, minor, patch, pre == "", pre)
