"""The processes of a local engine server: a watchdog that ends them with the harness, the root cause of
a failed start read from the server's log, and leftovers reaped.

`watched(cmd)` wraps a server's command line in a small watchdog process (`WATCHDOG`), started as the
leader of its own process group. The watchdog runs the server in that group and, when it gets SIGTERM
(the harness stopping it, or its parent's death through PR_SET_PDEATHSIG), sends the server SIGTERM,
waits `grace_s`, and kills the whole group (the engine core vLLM's server spawns included), itself
last. A server that exits on its own takes its group with it the same way. So the harness ends every
process of a server through one pid, and a harness that dies hard (SIGKILL, a crash) takes its servers
along. PR_SET_PDEATHSIG fires when the *thread* that started the watchdog ends: start servers from a
thread that outlives them (the runner's main thread does).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

# argv: parent pid, grace seconds, the server's command. Self-contained (runs as `python -c`).
WATCHDOG = r"""
import ctypes, os, signal, subprocess, sys
parent, grace, cmd = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]


def stop(signum, frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):  # not Linux: the harness's own stop still works
    pass
child = None
try:
    if os.getppid() != parent:  # the harness died before prctl took effect
        sys.exit(1)
    child = subprocess.Popen(cmd)
    code = child.wait()
    print(f"[watchdog] the server exited with code {code}", file=sys.stderr, flush=True)
finally:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            print(f"[watchdog] the server ignored SIGTERM for {grace:g} s: killed", file=sys.stderr, flush=True)
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)  # the group: the server's children too, the watchdog last
"""


def watched(cmd: list[str], grace_s: float) -> list[str]:
    """`cmd` run under the watchdog (start it with `start_new_session=True`: its group is the server's)."""
    return [sys.executable, "-c", WATCHDOG, str(os.getpid()), f"{grace_s:g}", *cmd]


def group_alive(pgid: int) -> bool:
    """Whether a process that has not exited is left in process group `pgid` (zombies waiting to be
    reaped do not count); on a system without /proc, whether the group can still be signalled."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


_EXC_LINE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)")


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
