"""The application; its release number lives in out/VERSION."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def version() -> str:
    return (ROOT / "out" / "VERSION").read_text().strip()
