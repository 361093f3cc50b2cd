"""Pass signals that the code under test cannot forge by the cheap routes.

The test program reports to the harness on a pipe whose write end it inherits (its number is an
argument): nothing the tests print counts, and a program that exits 0 before reporting (an
`os._exit(0)` at import, a stubbed test runner) is a failure flagged *suspicious*. Code running in
the same process can still find the pipe and write to it on purpose; that is out of scope.
A unittest run passes only when every test it found ran and passed (`unittest_verdict`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_REPORT = 4096

# The scorer's unittest runner (run with `-P -c`, see its docstring) and the counts it reports.
UNITTEST_RUNNER = Path(__file__).with_name("unittest_runner.py")
COUNTS = ("tests_run", "failures", "errors", "skipped", "expected_failures", "unexpected_successes")


def unittest_args(cmd: list[str]) -> list[str] | None:
    """The arguments after `python3 -m unittest` when `cmd` is such a command, else None."""
    if len(cmd) >= 3 and os.path.basename(cmd[0]).startswith("python") and cmd[1:3] == ["-m", "unittest"]:
        return cmd[3:]
    return None


def wrap_unittest(cmd: list[str], fd: int) -> list[str]:
    args = unittest_args(cmd)
    assert args is not None
    return [cmd[0], "-P", "-c", UNITTEST_RUNNER.read_text(encoding="utf-8"), str(fd), *args]


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


def unittest_verdict(report: dict[str, Any] | None, exited_ok: bool) -> tuple[bool, str, str]:
    """(passed, why not, suspicious reason or "") of a wrapped unittest run. It passes only when
    the runner reported, at least one test ran, and none failed, errored, was skipped, was
    expected to fail or passed unexpectedly, and nothing looked forged."""
    if report is None:
        if exited_ok:
            return (False, "the tests did not run to completion (exit 0 before the runner reported)",
                    "the test command exited 0 but the test runner never reported")
        return False, "the test runner did not report", ""
    n = {k: report.get(k) for k in COUNTS}
    flags = report.get("suspicious")
    if any(type(v) is not int or v < 0 for v in n.values()) or type(flags) is not list:
        return False, "the test runner's report is malformed", "the test runner's report is malformed"
    if flags:
        why = "; ".join(str(f)[:200] for f in flags[:5])
        return False, why, why
    odd = ", ".join(f"{n[k]} {k.replace('_', ' ')}" for k in ("skipped", "expected_failures", "unexpected_successes")
                    if n[k])
    if odd:
        return False, f"{odd} (every test must run and pass)", f"the test run had {odd}"
    if n["tests_run"] == 0:
        return False, "no tests ran", "the test runner ran no tests"
    if n["failures"] or n["errors"]:
        why = f"{n['failures']} failures, {n['errors']} errors"
        return False, why, "the test command exited 0 although its tests failed" if exited_ok else ""
    if not exited_ok:
        return False, "the test command failed although its tests passed", ""
    return True, "", ""
