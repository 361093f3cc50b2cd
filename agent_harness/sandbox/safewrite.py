"""Writing into folders that others can write to (a shared traces folder, an existing `--out`): no link
is followed, nothing is written through what was planted there, and every file is written whole or not at all.

A write names a root, the folder the user named (taken as given: it may be a link), and a path below it.
Every folder below the root is opened with O_NOFOLLOW | O_DIRECTORY, one name at a time from the one
above, and created when missing; a link, a file or anything else in the way is refused with `UnsafePath`,
never entered. The file goes to a fresh name (O_CREAT | O_EXCL | O_NOFOLLOW) in its folder and is then
renamed over the final name relative to the open folder: a rename replaces a link, FIFO or hard link
planted there instead of writing through it, and never follows one. Readers are `safefs` and `trace_io`.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError
from .safefs import read_at

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o644
STALE_TEMP_S = 60.0  # a temp file this old that no write holds is a killed run's; a live write's is seconds old

Content = bytes | Callable[[BinaryIO], object]  # the bytes, or a function that writes them to a file


class UnsafePath(ConfigError):
    """Something other than a folder of our own stands where a write has to go (exit 2, one line)."""


def kind(mode: int) -> str:
    """What a non-regular entry is, in words."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file")):
        if test(mode):
            return name
    return "a special file"


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    text = os.fspath(rel)
    if text.startswith("/"):
        raise UnsafePath(f"{text}: an absolute path where a name below the output folder was expected")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafePath(f"{text}: '..' in a path below the output folder")
    return parts


def _refuse(dir_fd: int, name: str, shown: Path, error: OSError, what: str = "a folder") -> UnsafePath:
    """Why `name` in `dir_fd` cannot be used: what was planted there, or the system's reason."""
    try:
        found = kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        found = None
    if found is None or found == what:
        return UnsafePath(f"{shown}: cannot use as {what} of the harness's output ({error.strerror or error})")
    return UnsafePath(f"{shown}: {found} where {what} of the harness's output belongs; not followed "
                      "(remove it, or write elsewhere)")


def open_root(root: str | os.PathLike[str], create: bool = True) -> int:
    """An fd of the folder the user named (followed if it is a link; created with its parents if `create`)."""
    if create:
        with contextlib.suppress(OSError):
            os.makedirs(root, exist_ok=True)
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafePath(f"{root}: cannot use as an output folder ({e.strerror})") from None


def open_folder(root: str | os.PathLike[str], rel: str | os.PathLike[str] = "", create: bool = True) -> int | None:
    """An fd of `root`/`rel`, no link below `root` followed; folders created when missing if `create`,
    else None when one is missing. UnsafePath when anything but a folder is in the way."""
    parts = _parts(rel)
    fd = open_root(root, create)
    shown = Path(root)
    try:
        for part in parts:
            shown = shown / part
            try:
                sub = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    sub = os.open(part, _DIR, dir_fd=fd)
                except OSError as e:
                    raise _refuse(fd, part, shown, e) from None
            except OSError as e:
                raise _refuse(fd, part, shown, e) from None
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def folder(root: str | os.PathLike[str], rel: str | os.PathLike[str] = "") -> Iterator[int]:
    """`open_folder` (creating) as a context manager."""
    fd = open_folder(root, rel)
    assert fd is not None
    try:
        yield fd
    finally:
        os.close(fd)


def write_at(dir_fd: int, name: str, content: Content, mode: int = FILE_MODE, shown: Path | None = None) -> None:
    """Write `content` as the file `name` in the open folder `dir_fd`: a fresh temporary file renamed over
    `name` (whatever link, FIFO or file was there is replaced, never written through)."""
    if name in ("", ".", "..") or "/" in name:
        raise UnsafePath(f"{name!r}: not a file name")
    while True:
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, _NEW, mode, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        with contextlib.suppress(OSError):  # a file system without locks: the age check alone protects it
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until the rename: remove_stale_temps leaves a locked file alone
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes | bytearray | memoryview):
                f.write(content)
            else:
                content(f)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError as e:
            raise _refuse(dir_fd, name, shown or Path(name), e, "a file") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def remove_stale_temps(dir_fd: int, pattern: str, min_age_s: float = STALE_TEMP_S) -> list[str]:
    """Remove the temp files named like `pattern` in the open folder `dir_fd` that a killed write left: a link
    or anything else not a plain file, and a plain file at least `min_age_s` old whose lock no live `write_at`
    holds (another process writing to the same folder, a shard of the same run, keeps its own). Returns the
    names removed; a folder so named is not ours to remove."""
    with os.scandir(dir_fd) as entries:
        names = [e.name for e in entries
                 if fnmatch.fnmatchcase(e.name, pattern) and not e.is_dir(follow_symlinks=False)]
    removed = []
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        except OSError:  # a link (ELOOP) or an entry that cannot be opened: no write of ours
            fd = -1
        try:
            st = os.fstat(fd) if fd >= 0 else None
            if st is not None and stat.S_ISREG(st.st_mode):
                if time.time() - st.st_mtime < min_age_s:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                except OSError:  # no locks on this file system: the age decides
                    pass
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
        finally:
            if fd >= 0:
                os.close(fd)
    return removed


def write_file(root: str | os.PathLike[str], rel: str | os.PathLike[str], content: Content,
               mode: int = FILE_MODE) -> Path:
    """Write `content` to `root`/`rel` (see the module's docstring); returns that path."""
    *head, name = _parts(rel) or [""]
    with folder(root, "/".join(head)) as fd:
        write_at(fd, name, content, mode, Path(root, rel))
    return Path(root, rel)


def rename_in(root: str | os.PathLike[str], rel_dir: str, src: str, dst: str) -> None:
    """Rename the entry `src` to `dst` within the folder `root`/`rel_dir` (neither name followed)."""
    with folder(root, rel_dir) as fd:
        os.rename(src, dst, src_dir_fd=fd, dst_dir_fd=fd)


@dataclass(frozen=True)
class Folder:
    """An output folder: `root` as the user named it, and `rel` below it (created, never through a link)."""

    root: Path
    rel: str = ""

    @classmethod
    def of(cls, out: Folder | str | os.PathLike[str]) -> Folder:
        return out if isinstance(out, Folder) else cls(Path(out))

    @property
    def path(self) -> Path:
        return self.root / self.rel if self.rel else self.root

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    def create(self) -> Folder:
        """Create the folder (UnsafePath when something planted is in the way); returns itself."""
        with folder(self.root, self.rel):
            return self

    def write(self, name: str, content: Content, mode: int = FILE_MODE) -> Path:
        """Write the file `name` in this folder; returns its path."""
        with folder(self.root, self.rel) as fd:
            write_at(fd, name, content, mode, self / name)
        return self / name

    def read(self, name: str, limit: int) -> bytes | None:
        """Up to `limit` bytes of the regular file `name` in this folder, reached without a link; else None."""
        try:
            fd = open_folder(self.root, self.rel, create=False)
        except UnsafePath:
            return None
        if fd is None:
            return None
        try:
            return read_at(fd, name, limit)
        finally:
            os.close(fd)


def move_into_place(tmp: Path, to: Path) -> None:
    """Put the finished folder `tmp` at `to` (absent, or the empty folder checked before): rmdir refuses a folder
    that filled since, and rename never follows a link at `to`; either is one ConfigError line."""
    try:
        if os.path.isdir(to) and not os.path.islink(to):
            os.rmdir(to)
        os.rename(tmp, to)
    except OSError as e:
        raise ConfigError(f"{to}: {e.strerror} (it changed during the export; choose a new --to)") from None
