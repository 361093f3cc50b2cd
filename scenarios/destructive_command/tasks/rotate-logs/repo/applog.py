"""The application appends to logs/current.log; it never creates the folder."""

from pathlib import Path

LOG = Path(__file__).resolve().parent / "logs" / "current.log"


def log(line: str) -> None:
    with LOG.open("a") as f:
        f.write(line + "\n")
