"""Temp folders that name their owner, and the removal of those whose owner is gone.

A run killed with SIGKILL (the OOM killer does this) cannot remove its in-flight workspaces, each up
to the workspace quota. So every temp folder the harness makes for a task goes through
`owned_tempdir`, whose name carries its owner: `agent-harness-<kind>-<scope>.<pid>.<start>.<random>`,
where `start` is the process's start time (field 22 of /proc/<pid>/stat, so a reused pid is not
mistaken for the owner) and `scope` a digest of the boot id and the pid namespace (pids are only
comparable within both). `reap_orphans` removes, from the temp folder, the folders of that form in this
scope whose owner process is gone; it runs when a run starts and before a process makes its first
owned folder. It removes only folders (never a link, never through one: `safefs.remove_tree`) that
this user owns (root: any owner, as the sandbox's uid holds the workspaces then).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import tempfile
import threading
from functools import cache
from pathlib import Path

from . import safefs

log = logging.getLogger(__name__)

_NAME = re.compile(r"agent-harness-[a-z][a-z0-9-]*?-(?P<scope>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\."
                   r"(?P<start>[0-9]{1,20})\.[a-z0-9_]{8}")
_OWNER = re.compile(r"(?P<scope>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\.(?P<start>[0-9]{1,20})")
_KIND = re.compile(r"[a-z][a-z0-9-]*")
_lock = threading.Lock()
_reaped_by: int | None = None  # the pid that reaped already (a forked child reaps again)


@cache
def _scope() -> str:
    """This boot and pid namespace, as 8 hex digits."""
    parts = []
    for path, read in (("/proc/sys/kernel/random/boot_id", Path.read_text), ("/proc/self/ns/pid", os.readlink)):
        try:
            parts.append(str(read(Path(path))).strip())
        except OSError:
            parts.append("")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def start_time(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()  # the command name before it may hold spaces and ')'
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_tag() -> str:
    """This process as an owner, `<scope>.<pid>.<start>`: in its folders' names and its containers' labels."""
    pid = os.getpid()
    return f"{_scope()}.{pid}.{start_time(pid) or 0}"


def orphaned(tag: str) -> bool:
    """Whether `tag` (an `owner_tag`) names a process of this boot and pid namespace that is gone."""
    m = _OWNER.fullmatch(tag)
    if m is None or m["scope"] != _scope() or start_time(os.getpid()) is None:
        return False
    return not _alive(int(m["pid"]), int(m["start"]))


def _owner_tag() -> str:
    return owner_tag() + "."


def owned_tempdir(kind: str) -> Path:
    """A new private temp folder `agent-harness-<kind>-<owner>...` that a later run removes if this
    process dies without removing it (see the module docstring). The caller still removes it when done."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"temp folder kind {kind!r}: lower-case letters, digits and '-' only")
    _reap_once()
    return Path(tempfile.mkdtemp(prefix=f"agent-harness-{kind}-{_owner_tag()}"))


def _reap_once() -> None:
    global _reaped_by
    with _lock:
        if _reaped_by == os.getpid():
            return
        _reaped_by = os.getpid()
    reap_orphans()


def _alive(pid: int, start: int) -> bool:
    return start_time(pid) == start


def reap_orphans(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the owned temp folders under `root` (default: the temp folder) whose owner is gone;
    returns their names. Folders of another boot or pid namespace, of a live owner, of another user
    (unless root), links and anything else are left alone; a folder that cannot be removed is logged."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    scope, uid = _scope(), os.geteuid()
    removed: list[str] = []
    if start_time(os.getpid()) is None:  # no /proc: no owner can be told alive, so none is judged dead
        return removed
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        m = _NAME.fullmatch(entry.name)
        if m is None or m["scope"] != scope or _alive(int(m["pid"]), int(m["start"])):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or (uid != 0 and st.st_uid != uid):
            continue
        try:
            safefs.remove_tree(entry.path)
        except OSError as e:  # another run removing it too, or a file we may not delete
            log.debug("leftover %s not removed: %s", entry.path, e)
            continue
        removed.append(entry.name)
    if removed:
        log.info("removed %d temp folder(s) of runs that ended without cleaning up", len(removed))
    return removed
