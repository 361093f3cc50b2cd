"""The processes of a local engine: its log read back, the root cause of a failed start found in it, and
leftover child processes reaped."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Any

LOG_READ = 65536  # bytes of the log's end read for a failed start's cause


_EXC_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)")


def read_log(path: Path, start: int = 0, limit: int = LOG_READ) -> str:
    """The end of what was written to the log `path` from byte `start` (at most `limit` bytes); "" when
    it is unreadable or not a regular file (a FIFO or link planted there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(start, st.st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def root_cause(log_text: str) -> str | None:
    """The last exception line a failed server printed, as `Type: message` (at most 400 characters).

    vLLM's API server only says "Engine core initialization failed. See root cause above": the line
    before it, printed by the engine core, names the cause (out of memory, a bad flag, a port taken).
    """
    for line in reversed(log_text.splitlines()):
        m = _EXC_LINE.search(line)
        if m and "Engine core initialization failed" not in m.group(2):
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"[:400]
    return None


def children() -> dict[int, Any]:
    try:
        import psutil
    except ImportError:
        return {}
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def reap(before: set[int], grace_s: float = 5.0) -> list[int]:
    """Terminate (then kill) child processes that appeared since `before` and still run."""
    try:
        import psutil
    except ImportError:
        return []

    new = []
    for pid, p in children().items():
        if pid in before:
            continue
        try:
            if "resource_tracker" in " ".join(p.cmdline()):  # multiprocessing's, shared and harmless
                continue
        except psutil.Error:
            continue
        new.append(p)
    for p in new:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(new, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return [p.pid for p in new]
