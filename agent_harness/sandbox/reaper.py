"""A started command's output, read within its bounds, and the killing of everything it left behind.

`collect` reads stdout and stderr until the command has exited and both pipes are closed; on a
timeout or too much output it kills the whole command: bwrap's pid namespace (through a pidfd of
its pid 1), the process group, and in the fallback every process of the command's own uid.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time

from .bounds import Limits

READ_CHUNK = 65536
DRAIN_S = 2.0  # how long to wait for the pipes to close once the command and its leftovers are killed


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process whose real uid is `uid` (the fallback's per-command uid)."""
    for _ in range(50):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                    status = f.read()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if fields.get("State", "").strip().startswith(("Z", "X")):
                continue
            if fields.get("Uid", "").split()[:1] == [str(uid)]:
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


class Proc:
    """A started command and how to kill everything it left behind."""

    def __init__(self, popen: subprocess.Popen[bytes], uid: int | None, info_fd: int | None) -> None:
        self.popen, self.uid, self.info_fd = popen, uid, info_fd
        self.inner: int | None = None  # pidfd of bwrap's pid 1 in the sandbox's pid namespace

    def note_info(self, data: bytes) -> None:
        """bwrap's --info-fd report: the host pid of the sandbox's pid 1."""
        try:
            pid = int(json.loads(data)["child-pid"])
            self.inner = os.pidfd_open(pid)  # opened while the sandbox runs, so the pid is still its
        except (ValueError, KeyError, TypeError, OSError):
            self.inner = None

    def kill_all(self) -> None:
        # Called before the leader is reaped, so its pid (= the group id) cannot have been reused.
        if self.inner is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.inner, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if self.uid is not None:
            _kill_uid(self.uid)
        if self.inner is not None:  # its exit completes only once the whole pid namespace is gone
            with selectors.DefaultSelector() as sel:
                sel.register(self.inner, selectors.EVENT_READ)
                sel.select(DRAIN_S)

    def close(self) -> None:
        for fd in (self.inner, self.info_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.inner = self.info_fd = None


def has_exited(pid: int) -> bool:
    """Whether `pid` (our child) has exited, without reaping it: its pid stays reserved."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def collect(proc: Proc, limits: Limits, deadline: float) -> tuple[bytes, bytes, str | None]:
    """Read stdout/stderr until the command has exited and both pipes are closed. Kill everything
    on timeout or too much output; once the command exits, kill leftovers that hold the pipes."""
    p = proc.popen
    assert p.stdout is not None and p.stderr is not None
    bufs: dict[int, bytearray] = {p.stdout.fileno(): bytearray(), p.stderr.fileno(): bytearray()}
    info = bytearray()
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    if proc.info_fd is not None:
        sel.register(proc.info_fd, selectors.EVENT_READ)
    exit_fd: int | None = None
    try:
        exit_fd = os.pidfd_open(p.pid)
        sel.register(exit_fd, selectors.EVENT_READ)
    except OSError:  # no pidfd (kernel < 5.3): poll instead
        exit_fd = None
    reason: str | None = None
    total, open_fds, exited, drain_until = 0, len(bufs), False, None
    try:
        while open_fds or not exited:
            now = time.monotonic()
            if drain_until is not None and now >= drain_until:
                break
            if drain_until is None and now >= deadline:
                reason, drain_until = "timeout", now + DRAIN_S
                proc.kill_all()
                continue
            wait = (drain_until or deadline) - now
            events = sel.select(wait if exit_fd is not None or exited else min(wait, 0.02))
            if not exited and (any(key.fd == exit_fd for key, _ in events) or
                               (exit_fd is None and has_exited(p.pid))):
                exited = True  # the command is gone: so must be anything it left running
                proc.kill_all()
                drain_until = drain_until or time.monotonic() + DRAIN_S
            for key, _ in events:
                if key.fd == exit_fd:
                    sel.unregister(key.fd)
                    continue
                data = os.read(key.fd, READ_CHUNK)
                if key.fd == proc.info_fd:
                    info += data
                    if not data:
                        sel.unregister(key.fd)
                        proc.note_info(bytes(info))
                    continue
                if not data:
                    sel.unregister(key.fd)
                    open_fds -= 1
                    continue
                bufs[key.fd] += data[: max(limits.output_bytes - total, 0)]
                total += len(data)
                if total > limits.output_bytes and reason is None:
                    reason, drain_until = "output", time.monotonic() + DRAIN_S
                    proc.kill_all()
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)
    return bytes(bufs[p.stdout.fileno()]), bytes(bufs[p.stderr.fileno()]), reason


def finish(popen: subprocess.Popen[bytes], proc: Proc, limits: Limits,
           start: float) -> tuple[bytes, bytes, str | None, int]:
    """A command's output within its bounds, why it was killed (or None) and its exit code (128 + N when a
    signal ended it); whatever happens, nothing of it is left running and its pipes are closed."""
    try:
        out, err, reason = collect(proc, limits, start + limits.wall_s)
        raw = popen.wait()
    finally:
        if popen.returncode is None:
            proc.kill_all()
            popen.wait()
        proc.close()
        for stream in (popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()
    return out, err, reason, 128 - raw if raw < 0 else raw
