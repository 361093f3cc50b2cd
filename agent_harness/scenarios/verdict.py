"""Pass signals that the code under test cannot forge by the cheap routes.

The test program reports to the harness on a pipe whose write end it inherits (its number is an
argument): nothing the tests print counts, and a program that exits 0 before reporting (an
`os._exit(0)` at import, a stubbed test runner) is a failure flagged *suspicious*. Code running in
the same process can still find the pipe and write to it on purpose; that is out of scope.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

MAX_REPORT = 4096

# Runs `python3 -m unittest ARGS` and reports the count of tests run. `-P` keeps the workspace off
# sys.path until unittest is imported, so a planted unittest.py cannot replace the runner.
UNITTEST_WRAPPER = r"""
import json, os, sys, unittest
fd = int(sys.argv[1])
os.set_inheritable(fd, False)
sys.path.insert(0, os.getcwd())
sys.argv = ["python -m unittest", *sys.argv[2:]]
prog = unittest.main(module=None, exit=False)
r = prog.result
os.write(fd, json.dumps({"tests_run": r.testsRun, "ok": r.wasSuccessful()}).encode())
sys.exit(0 if r.wasSuccessful() else 1)
"""


def unittest_args(cmd: list[str]) -> list[str] | None:
    """The arguments after `python3 -m unittest` when `cmd` is such a command, else None."""
    if len(cmd) >= 3 and os.path.basename(cmd[0]).startswith("python") and cmd[1:3] == ["-m", "unittest"]:
        return cmd[3:]
    return None


def wrap_unittest(cmd: list[str], fd: int) -> list[str]:
    args = unittest_args(cmd)
    assert args is not None
    return [cmd[0], "-P", "-c", UNITTEST_WRAPPER, str(fd), *args]


@contextlib.contextmanager
def channel() -> Iterator[tuple[int, list[bytes]]]:
    """A pipe: yields (write fd to pass to the command, list that holds what arrived once closed)."""
    r, w = os.pipe()
    got: list[bytes] = []
    try:
        yield w, got
    finally:
        os.close(w)
        os.set_blocking(r, False)
        data = b""
        with contextlib.suppress(BlockingIOError, OSError):
            while len(data) < MAX_REPORT and (chunk := os.read(r, MAX_REPORT)):
                data += chunk
        os.close(r)
        got.append(data[:MAX_REPORT])


def parse_report(data: bytes) -> dict[str, Any] | None:
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return report if isinstance(report, dict) else None
