"""The bounds a sandboxed command runs under: `Limits`, the uid it runs as, and the memory cgroup.

Rlimits bound each process (set by `prlimit` in the command line, see sandbox.py); when the harness
is root, commands run as an unprivileged uid, which is what makes RLIMIT_NPROC bind; and a memory
cgroup, when one is usable, bounds all of a command's processes together. The workspace's disk
quota (`Limits.disk_bytes`, `disk_files`) is checked by the workspace after each command.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path


def sandbox_uid() -> int:
    """$AGENT_HARNESS_SANDBOX_UID (default 65534), validated by settings.py when first needed."""
    from ..settings import get_settings

    return get_settings().sandbox_uid


@dataclass(frozen=True)
class Limits:
    """Resource limits for one command; the defaults suit unit tests of small Python programs."""

    cpu_s: int = 30  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL a second later)
    wall_s: float = 60.0  # wall clock for the whole command
    mem_bytes: int = 2 << 30  # RLIMIT_AS per process
    mem_total_bytes: int = 2 << 30  # all of the command's processes together (memory cgroup, when usable)
    nproc: int = 64  # processes and threads of this command
    fsize_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file the command may write
    output_bytes: int = 1 << 20  # stdout + stderr kept; beyond it the command is killed
    tmp_bytes: int = 256 << 20  # size of the private /tmp (bwrap)
    disk_bytes: int = 512 << 20  # workspace quota: bytes of its files, checked after each command
    disk_files: int = 10000  # workspace quota: files and folders, checked after each command



# --------------------------------------------------------------------------------------------
# Who runs the command


def switches_uid() -> bool:
    """Commands run as SANDBOX_UID when the harness is root (RLIMIT_NPROC never binds root)."""
    return os.geteuid() == 0 and sandbox_uid() != 0


def hand_over(path: Path, uid: int | None = None) -> None:
    """Give a tree to `uid` so commands can write in it (no-op unless we switch uid).

    Files with several hard links are left alone: one of them could be a host file.
    """
    if not switches_uid():
        return
    uid = sandbox_uid() if uid is None else uid
    os.lchown(path, uid, uid)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                if (st.st_uid, st.st_gid) != (uid, uid) and (st.st_nlink == 1 or stat.S_ISDIR(st.st_mode)):
                    os.lchown(full, uid, uid)



# --------------------------------------------------------------------------------------------
# Memory cgroup: bounds the memory of all of a command's processes together


_lock = threading.Lock()
_probed: list[tuple[str, Path] | None] = []  # the probe's answer, once made
JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'  # the shell moves itself into the cgroup, then becomes the command


def _probe_cgroup() -> tuple[str, Path] | None:
    """("v2" or "v1", a folder to make per-command cgroups in), or None when none is usable here.

    Needs root: the command joins its cgroup before it drops to the sandbox uid.
    """
    from ..settings import get_settings

    settings = get_settings()
    if os.geteuid() != 0 or not settings.cgroup:
        return None
    cgroup_fs = settings.cgroup_fs
    candidates = []
    if "memory" in _read(cgroup_fs / "cgroup.controllers").split():
        candidates.append(("v2", cgroup_fs / "agent-harness"))
    if (cgroup_fs / "memory" / "memory.limit_in_bytes").exists():
        candidates.append(("v1", cgroup_fs / "memory" / "agent-harness"))
    for version, base in candidates:
        try:
            base.mkdir(exist_ok=True)
            if version == "v2":
                (base / "cgroup.subtree_control").write_text("+memory")
            probe = new_cgroup(version, base, 64 << 20)
            remove_cgroup(probe)
            return version, base
        except OSError:
            continue
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def memory_cgroup() -> tuple[str, Path] | None:
    """The memory cgroup in use (probed once per process), or None: rlimits only."""
    with _lock:
        if not _probed:
            _probed.append(_probe_cgroup())
        return _probed[0]


def new_cgroup(version: str, base: Path, limit: int) -> Path:
    d = base / f"cmd-{os.getpid()}-{secrets.token_hex(6)}"
    d.mkdir()
    try:
        if version == "v2":
            (d / "memory.max").write_text(str(limit))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
        else:
            (d / "memory.limit_in_bytes").write_text(str(limit))
            if (d / "memory.memsw.limit_in_bytes").exists():
                (d / "memory.memsw.limit_in_bytes").write_text(str(limit))
    except OSError:
        remove_cgroup(d)
        raise
    return d


def oom_killed(version: str, d: Path) -> bool:
    text = _read(d / ("memory.events" if version == "v2" else "memory.oom_control"))
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value) > 0
    return False


def remove_cgroup(d: Path) -> None:
    """Kill what is left in the cgroup and remove it (its last processes may take a moment to go)."""
    for _ in range(100):
        for pid in _read(d / "cgroup.procs").split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
