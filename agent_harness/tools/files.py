"""File helpers of the file tools, run as the harness on paths `Workspace.resolve` accepted.

Agent code may have swapped any path for a link, a fifo or something huge: nothing here follows a
link at the last component, blocks on a fifo or writes through a hard link.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ToolError
from ..sandbox import hand_over
from ..sandbox.safefs import IGNORED_DIRS, IGNORED_SUFFIXES
from ..sandbox.workspace import Workspace

MAX_READ_BYTES = 2 << 20  # read_file refuses larger files (grep them instead)
MAX_NAME_BYTES = 255  # NAME_MAX: one file or folder name
MAX_PATH_BYTES = 4095  # PATH_MAX less the final NUL: the whole host path


def resolve(ws: Workspace, path: str) -> Path:
    """`ws.resolve(path)`, refusing names and paths longer than the OS allows (ENAMETOOLONG)."""
    raw = path.encode("utf-8")
    if any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ToolError(f"a file or folder name in the path is longer than {MAX_NAME_BYTES} bytes; "
                        "use shorter names")
    if len(os.fsencode(ws.root)) + 1 + len(raw) > MAX_PATH_BYTES:
        raise ToolError(f"the path is too long ({len(raw)} bytes); use a shorter one")
    try:
        return ws.resolve(path)
    except OSError as e:
        raise ToolError(f"the path cannot be used: {e.strerror or type(e).__name__}") from None


def file_bytes(ws: Workspace, path: object) -> tuple[str, bytes] | None:
    """(workspace-relative path, content) of a regular file of at most MAX_READ_BYTES, or None."""
    if not isinstance(path, str):
        return None
    try:
        target = ws.resolve(path)
        rel = ws.rel(target)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (ToolError, OSError, ValueError):
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_READ_BYTES:  # a folder opens, but fdopen refuses it
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return rel, f.read(MAX_READ_BYTES + 1)


def open_regular(ws: Workspace, target: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor and the stat of the regular file `target`; ToolError for anything else."""
    rel = ws.rel(target)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(f"{rel}: no such file. Use list_dir to see the files.") from None
    except IsADirectoryError:
        raise ToolError(f"{rel} is a folder; use list_dir to see what it holds.") from None
    except OSError as e:
        raise ToolError(f"{rel}: cannot open: {e.strerror}") from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is a folder; use list_dir to see what it holds.")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is not a regular file.")
    return fd, st


def write(ws: Workspace, target: Path, data: bytes) -> None:
    """Write `data` to `target`, making its missing folders; handed over to the sandbox user."""
    rel = ws.rel(target)
    missing = []
    parent = target.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    try:
        for d in reversed(missing):
            d.mkdir()
            hand_over(d)
        st = os.lstat(target) if os.path.lexists(target) else None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{rel} is a folder; give a file path.")
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
            os.unlink(target)  # never write through a hard link or into a fifo
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except (NotADirectoryError, FileExistsError):
        raise ToolError(f"cannot write {rel}: a file is in the way of its folder") from None
    except OSError as e:
        raise ToolError(f"cannot write {rel}: {e.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    hand_over(target)


def put_file(ws: Workspace, rel: str, text: str) -> None:
    """Put back a file as the task gave it (reflect, a react restart). Agent code may have left a link
    in its place: the link goes, and the file is written, never the link's target."""
    path = Path(ws.root) / rel
    if path.is_symlink():
        path.unlink()
    write(ws, resolve(ws, rel), text.encode("utf-8"))


def restore_files(ws: Workspace, files: dict[str, str]) -> list[str]:
    """Put back every file of a task (`put_file`); returns "path (error)" for each one that could not be
    (a path agent code made unusable), so the caller goes on without it and says so."""
    lost = []
    for rel, text in files.items():
        try:
            put_file(ws, rel, text)
        except Exception as e:
            lost.append(f"{rel} ({type(e).__name__}: {e})")
    return lost


def listing(ws: Workspace, folder: Path, limit: int) -> tuple[list[str], int]:
    """Workspace-relative entries under `folder` (folders end in /, links show their target)."""
    entries: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if d not in links and d not in IGNORED_DIRS)
        files = [f for f in filenames + links if not f.endswith(IGNORED_SUFFIXES)]
        names = [(d, True) for d in dirnames] + [(f, False) for f in files]
        for name, is_dir in sorted(names):
            total += 1
            if len(entries) < limit:
                path = here / name
                if path.is_symlink():
                    entries.append(f"{ws.rel(path)} -> {os.readlink(path)}")
                else:
                    entries.append(ws.rel(path) + ("/" if is_dir else ""))
    return entries, total
