"""The vLLM engine's processes: its stderr teed (and sent to the engine log), and leftovers reaped.

vLLM's engine runs in child processes. They print the real reason a start failed on the stderr they
inherit, and a failed start can leave them running; this module keeps the one and ends the other,
apart from the backend that drives the engine (vllm_backend.py).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import sys
import threading
import time
from typing import Any

from ..trace_io import open_append

log = logging.getLogger(__name__)


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


_EXC_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)")


class StderrTee:
    """Tees file descriptor 2 through a pipe while the engine starts, keeping the last lines.

    vLLM's engine runs in child processes that inherit fd 2 and print the real error there; the
    parent only gets "Engine core initialization failed. See root cause above". The tee keeps
    copying to the real stderr for the engine's whole life (the children hold the pipe), and a
    failed start reads its root cause from the kept lines.
    """

    def __init__(self, keep: int = 400, log_path: str | None = None) -> None:
        self.log_path = log_path  # copy to this file (appended) instead of the real stderr
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._bytes = 0
        self._thread: threading.Thread | None = None
        self._saved: int | None = None

    def __enter__(self) -> StderrTee:
        try:
            sys.stderr.flush()
            read_fd, write_fd = os.pipe()
            self._saved = os.dup(2)
        except (OSError, ValueError):
            return self  # no usable fd 2 (embedded interpreter): no tee, no root cause
        out = os.dup(self._saved)
        if self.log_path:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
                log_fd = open_append(self.log_path)
            except OSError as e:
                log.warning("engine log %s: %s; engine output goes to stderr", self.log_path, e.strerror)
            else:
                os.close(out)
                out = log_fd
        self._thread = threading.Thread(target=self._pump, args=(read_fd, out), name="vllm-stderr-tee",
                                        daemon=True)
        self._thread.start()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(self._saved, 2)  # our end of the pipe closes; the children keep theirs
        os.close(self._saved)
        self._saved = None

    def _pump(self, read_fd: int, out_fd: int) -> None:
        partial = b""
        try:
            while chunk := os.read(read_fd, 65536):
                with contextlib.suppress(OSError):
                    os.write(out_fd, chunk)
                self._bytes += len(chunk)
                partial += chunk
                *done, partial = partial.split(b"\n")
                self.lines.extend(line.decode("utf-8", "replace") for line in done)
        finally:
            if partial:
                self.lines.append(partial.decode("utf-8", "replace"))
            os.close(read_fd)
            os.close(out_fd)

    def root_cause(self, wait_s: float = 5.0) -> str | None:
        """The last exception line the engine printed.

        Waits for the dead children's last output: until the pipe closes, or nothing new came for
        0.5 s (a process that outlives the engine, e.g. multiprocessing's resource tracker, may hold
        the pipe open), at most `wait_s`.
        """
        deadline = time.monotonic() + wait_s
        seen, quiet_since = self._bytes, time.monotonic()
        while self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
            self._thread.join(0.1)
            if self._bytes != seen:
                seen, quiet_since = self._bytes, time.monotonic()
            elif time.monotonic() - quiet_since >= 0.5:
                break
        for line in reversed(self.lines):
            m = _EXC_LINE.search(line)
            if m and "Engine core initialization failed" not in m.group(2):
                text = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
                return text[:400]
        return None


def log_to_file(name: str, path: str) -> None:
    """Point the stream handlers of logger `name` at `path` (appended)."""
    for h in logging.getLogger(name).handlers:
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            try:
                h.setStream(os.fdopen(open_append(path), "a", encoding="utf-8"))
            except OSError:
                return
