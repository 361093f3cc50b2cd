"""An episode's Docker container: started at its first command, each command a ``docker exec`` in it.

About four times faster per command than a container per command (bench/sandbox_latency.py), with
the same promises (docker_sandbox.py): the container's init is docker-init (tini) with a sleeper,
run as the container's root so the command's uid cannot kill it, which reaps what is killed. When a
command ends, its wrapper kills every process of its uid in the container; then the harness kills,
from the host, whatever of the container's cgroup is left but the init, and empties /tmp and
/dev/shm, so that the next command finds what a bubblewrap command finds. The memory cgroup's OOM
count tells a command killed for the memory of all its processes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..errors import HarnessError
from ..types import CmdResult
from .bounds import Limits
from .bwrap import WORKDIR, make_result
from .docker import (
    LIMITS,
    bind,
    command_uid,
    container_flags,
    env_args,
    new_name,
    reap_once,
    remove,
    rlimit_args,
    shown,
    state,
    track,
)
from .docker_image import Image, docker, docker_cli
from .reaper import Proc, finish

log = logging.getLogger(__name__)

INIT = "/.agent-harness-init"  # where docker-init (tini) is bound in the container
SESSION_LIFETIME_S = 86400  # the init exits after this long, in case no process is left to remove its container

# one command of a session: then every process of its uid in the container dies (not the init)
EXEC = LIMITS + """shift 3
"$@" </dev/null
rc=$?
kill -9 -1 2>/dev/null
exit $rc
"""


@functools.cache
def _init_binary() -> str:
    for name in ("docker-init", "tini-static", "tini"):
        found = shutil.which(name, path="/usr/bin:/usr/local/bin:/usr/sbin:/bin")
        if found:
            return os.path.realpath(found)
    raise HarnessError("docker sandbox: docker-init (tini) is not installed; it comes with docker.io")


def _cgroup_dirs(pid: int) -> dict[str, Path]:
    """The cgroup folders of process `pid`: "pids" and "memory" (v1) or "v2", where they exist."""
    from ..settings import get_settings

    fs = get_settings().cgroup_fs
    found: dict[str, Path] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":
            for base in (fs, fs / "unified"):
                if (base / rel / "cgroup.procs").exists() and (base / "cgroup.controllers").exists():
                    found["v2"] = base / rel
                    break
        for c in ("pids", "memory"):
            if c in controllers.split(",") and (fs / c / rel / "cgroup.procs").exists():
                found[c] = fs / c / rel
    return found


def _first_child(pid: int) -> list[int]:
    """The child docker-init starts (the sleeper), waited for: it is spared like the init."""
    for _ in range(400):
        with contextlib.suppress(OSError, ValueError):
            children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            if children:
                return children[:1]
        time.sleep(0.005)
    return []


def _read_int_field(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    return 0


class Session:
    """A workspace's container: started at the first command, each command a `docker exec` in it."""

    def __init__(self, image: Image, root: Path, limits: Limits) -> None:
        self.image, self.root, self.limits = image, root, limits
        self.name: str | None = None
        self._init: int | None = None  # pidfd of the container's init
        self._spared: set[int] = set()  # host pids of the init and its sleeper
        self._cgroups: dict[str, Path] = {}
        self._pidns: str | None = None
        self._pid: int | None = None  # host pid of the init

    # -- lifetime --
    def _start(self) -> None:
        reap_once()
        name = new_name("agent")
        track(name)
        self.name = name
        docker(["run", "-d", "--pull", "never", *container_flags(self.image, self.root, self.limits, "agent", name, 2),
                *bind(_init_binary(), INIT, True), "--user", "0:0", "--entrypoint", INIT, self.image.id,
                "-s", "--", "sleep", str(SESSION_LIFETIME_S)])
        pid = int(state(name, "Pid") or 0)
        if pid <= 0:
            raise HarnessError(f"docker sandbox: container {name} did not start")
        self._pid, self._init = pid, os.pidfd_open(pid)
        self._spared = {pid, *_first_child(pid)}
        self._cgroups = _cgroup_dirs(pid)
        with contextlib.suppress(OSError):
            self._pidns = os.readlink(f"/proc/{pid}/ns/pid")

    def _running(self) -> bool:
        """Whether the container's init still runs (its pidfd turns readable when it exits)."""
        return self._init is not None and not select.select([self._init], [], [], 0)[0]

    def close(self) -> None:
        """Remove the container (safe to call twice); a later `run` starts a new one unless closed for good."""
        if self._init is not None:
            with contextlib.suppress(OSError):
                os.close(self._init)
            self._init = None
        if self.name is not None:
            name, self.name = self.name, None
            remove(name)

    # -- commands --
    def run(self, cmd: list[str], limits: Limits, env: dict[str, str]) -> CmdResult:
        if self.name is None or not self._running():
            self.close()
            self._start()
        assert self.name is not None
        cli = docker_cli()
        assert cli is not None
        argv = [cli, "exec", "-u", f"{command_uid()}:{command_uid()}", "-w", WORKDIR, *env_args(env), self.name,
                "/bin/sh", "-c", EXEC, "sh", *rlimit_args(limits), *cmd]
        ooms = self._ooms()
        start = time.monotonic()
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 close_fds=True, process_group=0)
        proc = _Exec(popen, self)
        try:
            out, err, reason, code = finish(popen, proc, limits, start)
        finally:
            self.sweep()
            self._wipe()
        duration = time.monotonic() - start
        if reason is None and self._ooms() > ooms:
            reason = "memory"
        return make_result(code, out, err, reason, duration, shown(self.root), "docker")

    def _procs(self) -> set[int]:
        """The host pids of the container's processes: its cgroup's, else those in its pid namespace."""
        for key in ("pids", "memory", "v2"):
            if key in self._cgroups:
                with contextlib.suppress(OSError, ValueError):
                    return {int(p) for p in (self._cgroups[key] / "cgroup.procs").read_text().split()}
        found: set[int] = set()
        if self._pidns is None:
            return found
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry.name}/ns/pid") == self._pidns:
                        found.add(int(entry.name))
        return found

    def sweep(self) -> None:
        """SIGKILL every process of the container but its init, until none is left."""
        for _ in range(400):
            left = self._procs() - self._spared
            if not left:
                return
            fds: dict[int, int] = {}
            for pid in left:
                with contextlib.suppress(OSError):
                    fds[pid] = os.pidfd_open(pid)
            still = self._procs()  # read while we hold the pidfds: these pids are not reused ones
            for pid, fd in fds.items():
                with contextlib.suppress(OSError):
                    if pid in still:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                os.close(fd)
            time.sleep(0.005)
        log.warning("docker sandbox: processes of %s outlived the kill", self.name)

    def _wipe(self) -> None:
        """Empty the container's /tmp and /dev/shm, as each bubblewrap command gets them."""
        from .safefs import remove_tree

        for folder in ("tmp", "dev/shm"):
            try:
                fd = os.open(f"/proc/{self._pid}/root/{folder}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not self._running():  # opened while the init lived: the folder is the container's
                    return
                with os.scandir(fd) as it:
                    entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
                for name, is_dir in entries:
                    with contextlib.suppress(OSError):
                        if is_dir:
                            remove_tree(f"/proc/self/fd/{fd}/{name}")
                        else:
                            os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)

    def _ooms(self) -> int:
        if "memory" in self._cgroups:
            return _read_int_field(self._cgroups["memory"] / "memory.oom_control", "oom_kill")
        if "v2" in self._cgroups:
            return _read_int_field(self._cgroups["v2"] / "memory.events", "oom_kill")
        return 0


class _Exec(Proc):
    """A `docker exec`: killing it kills every process of the session's container but the init."""

    def __init__(self, popen: subprocess.Popen[bytes], session: Session) -> None:
        super().__init__(popen, None, None)
        self.session = session

    def kill_all(self) -> None:
        self.session.sweep()
        super().kill_all()
