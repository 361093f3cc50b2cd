"""Whether a process group still has live processes (tests that an engine or server is stopped whole)."""

from __future__ import annotations

import os
from pathlib import Path


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
    for stat_file in proc.glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False
