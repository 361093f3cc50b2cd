"""The Docker sandbox: commands in containers, with the bounds and promises of the bubblewrap sandbox.

Every container: no network (``--network none``), the sandbox uid, all capabilities dropped,
no-new-privileges, a read-only root, a private bounded /tmp and /dev/shm (tmpfs), the working folder
at /workspace as the only writable bind, memory of all its processes together (``--memory``, no
swap), a process limit (``--pids-limit``), file size and core ulimits, no logging of its output.
Inside, a ``/bin/sh`` wrapper sets each command's CPU and address-space rlimits (``ulimit``); the
harness enforces the wall clock and the output cap (reaper.collect). Two ways to run, both used:

- `Session` (a workspace's commands, an episode): one container, started at the first command; each
  command is a ``docker exec``, about four times faster than a container per command (see
  bench/sandbox_latency.py). When a command ends, its wrapper kills every process of the command's
  uid in the container, and the harness then kills, from the host, whatever of the container's cgroup
  is left except its init (docker-init, run as the container's root so the command cannot kill it; it
  reaps what is killed), and empties /tmp and /dev/shm: the next command finds what bubblewrap gives.
- `run_once` (a one-off command, and the scorers): a fresh container per command (``docker run``), the
  wrapper its pid 1, so everything in it dies with the command; removed after. The verifier runs
  this way, in a container of the task's image that holds only the files the scorer copied.

Descriptors cannot be handed into a container, so `run_once` carries two kinds over its standard
streams: one readable descriptor (a pipe's read end or a file, e.g. the hidden test's spec) becomes
the container's stdin, read to its end; one pipe write end (a private report channel) receives what
the container writes on its stdout, while the command's own stdout goes to stderr. Inside, a
python3 step puts them at the numbers the command was given, and the wrapper keeps no copy: only the
command holds them (a checker that reads the spec and becomes non-dumpable keeps them from the code
it then runs, as under bubblewrap).

Containers are labelled with their owner (``<scope>.<pid>.<start>``, as tempdirs.py names folders)
and removed on every path: after the command or when the workspace is closed, at exit for those
still known, and, for a run killed with SIGKILL, by the next process that uses Docker here.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import logging
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

from .bounds import Limits, sandbox_uid, switches_uid
from .bwrap_sandbox import FIXED_ENV, HOST_ETC, WORKDIR, _returncode, make_result
from .docker_image import Image, docker, docker_cli, last_line
from .errors import HarnessError
from .reaper import Proc, _exited, collect
from .tempdirs import orphaned, owner_tag
from .types import CmdResult

log = logging.getLogger(__name__)

OWNER_LABEL = "agent-harness.owner"
RUN_LABEL = "agent-harness.run"
ROLE_LABEL = "agent-harness.role"
RUN_ID = secrets.token_hex(8)  # this process's run, on each of its containers
INIT = "/.agent-harness-init"  # where docker-init (tini) is bound in a session's container
SESSION_LIFETIME_S = 86400  # a session's init exits after this long, in case no process is left to remove it
MAX_FORWARD = 65536  # bytes of the container's stdout passed on to a report pipe
_LIMITS = 'ulimit -S -t "$1" && ulimit -H -t "$2" && ulimit -v "$3" || exit 125\n'
# pid 1 of a one-off container: the command runs as its child; with descriptors to carry, the
# standard streams go to 3 (stdin) and 4 (stdout) for the command only.
ONCE = _LIMITS + """io=$4
shift 4
if [ "$io" = - ]; then
    "$@" </dev/null &
else
    exec 3<&0 4>&1 1>&2 </dev/null
    "$@" &
    exec 3<&- 4>&-
fi
wait $!
"""
# one command of a session: then every process of its uid in the container dies (not the init)
EXEC = _LIMITS + """shift 3
"$@" </dev/null
rc=$?
kill -9 -1 2>/dev/null
exit $rc
"""
# puts descriptors 3 and 4 at the numbers the command was given, then becomes the command
HOP = """import fcntl, os, sys
pairs = [tuple(int(x) for x in p.split(":")) for p in sys.argv[1].split(",")]
top = max(d for _, d in pairs) + 1
moved = [(fcntl.fcntl(s, fcntl.F_DUPFD, top), d) for s, d in pairs]
os.close(3)
os.close(4)
for t, d in moved:
    os.dup2(t, d)
    os.close(t)
os.execvp(sys.argv[2], sys.argv[2:])
"""


# --------------------------------------------------------------------------------------------
# Containers of this process, and of dead ones


_lock = threading.Lock()
_live: set[str] = set()
_reaped_by: int | None = None


def _name(role: str) -> str:
    return f"agent-harness-{role}-{owner_tag()}-{secrets.token_hex(4)}"


def _track(name: str) -> None:
    with _lock:
        _live.add(name)


def _remove(*names: str) -> None:
    """Remove containers (killed first) with their anonymous volumes; a failure is logged, the next run retries."""
    if not names:
        return
    try:
        r = docker(["rm", "-f", "-v", *names], check=False, timeout=60)
        if r.returncode != 0 and b"No such container" not in r.stderr:
            log.warning("docker rm %s: %s", " ".join(names), last_line(r.stderr))
    except HarnessError as e:
        log.warning("docker rm %s: %s", " ".join(names), e)
    with _lock:
        _live.difference_update(names)


@atexit.register
def remove_live() -> None:
    """Remove every container this process started and still has (at exit: after a fault or a stop)."""
    with _lock:
        names = sorted(n for n in _live if f"-{owner_tag()}-" in n)
    if names and docker_cli() is not None:
        _remove(*names)


def reap_containers() -> list[str]:
    """Remove the containers of owners of this boot and pid namespace that are gone (a run killed with
    SIGKILL); returns their names. Containers of live owners, other namespaces or no owner stay."""
    r = docker(["ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format",
                f'{{{{.Names}}}}\t{{{{.Label "{OWNER_LABEL}"}}}}'], check=False, timeout=60)
    dead = []
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        name, _, owner = line.partition("\t")
        if orphaned(owner.strip()):
            dead.append(name.strip())
    if dead:
        log.info("removing %d container(s) of runs that ended without removing them", len(dead))
        _remove(*dead)
    return dead


def reap_at_start() -> None:
    """At a run's start: remove the containers of dead runs, where Docker is installed and answers."""
    from .docker_image import docker_problem

    if docker_cli() is not None and docker_problem() is None:
        _reap_once()


def _reap_once() -> None:
    global _reaped_by
    with _lock:
        if _reaped_by == os.getpid():
            return
        _reaped_by = os.getpid()
    reap_containers()


# --------------------------------------------------------------------------------------------
# Command lines


def _uid() -> int:
    return sandbox_uid() if switches_uid() else os.getuid()


def _bind(source: str, target: str, readonly: bool) -> list[str]:
    if any(c in source for c in ',"\n') or not os.path.isabs(source):
        raise HarnessError(f"docker sandbox: {source!r} cannot be bound into a container (use a plain absolute path)")
    return ["--mount", f"type=bind,source={source},target={target}" + (",readonly" if readonly else "")]


@functools.cache
def _host_usr() -> tuple[str, ...]:
    """The binds that give a container the host's system, as bubblewrap does: /usr read-only, /usr/local hidden."""
    args = _bind("/usr", "/usr", True)
    if os.path.isdir("/usr/local"):
        args += ["--tmpfs", "/usr/local:ro,size=4k"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # folders, where the host's are not links
        if os.path.isdir(f"/{name}") and not os.path.islink(f"/{name}"):
            args += _bind(f"/{name}", f"/{name}", True)
    for path in HOST_ETC:
        if os.path.exists(path):
            args += _bind(os.path.realpath(path), path, True)
    return tuple(args)


@functools.cache
def _init_binary() -> str:
    for name in ("docker-init", "tini-static", "tini"):
        found = shutil.which(name, path="/usr/bin:/usr/local/bin:/usr/sbin:/bin")
        if found:
            return os.path.realpath(found)
    raise HarnessError("docker sandbox: docker-init (tini) is not installed; it comes with docker.io")


def _flags(image: Image, cwd: Path, limits: Limits, role: str, name: str, extra_pids: int) -> list[str]:
    flags = ["--name", name, "--label", f"{OWNER_LABEL}={owner_tag()}", "--label", f"{RUN_LABEL}={RUN_ID}",
             "--label", f"{ROLE_LABEL}={role}", "--network", "none", "--cap-drop", "ALL",
             "--security-opt", "no-new-privileges", "--read-only", "--hostname", "sandbox", "--log-driver", "none",
             "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={limits.tmp_bytes},mode=1777",
             "--shm-size", str(min(limits.tmp_bytes, 64 << 20)),
             "--memory", str(limits.mem_total_bytes), "--memory-swap", str(limits.mem_total_bytes),
             "--pids-limit", str(limits.nproc + extra_pids),
             "--ulimit", f"fsize={limits.fsize_bytes}", "--ulimit", "core=0",
             *_bind(str(cwd), WORKDIR, False), "--workdir", WORKDIR]
    return flags + list(_host_usr()) if image.host_usr else flags


def _env(env: dict[str, str]) -> list[str]:
    full = {k: v for k, v in FIXED_ENV.items() if k != "PATH"}  # the image's PATH (the default image's is bwrap's)
    full.update({"HOME": "/tmp", "TMPDIR": "/tmp", **env})
    return [arg for k, v in full.items() for arg in ("-e", f"{k}={v}")]


def _rlimits(limits: Limits) -> list[str]:
    cpu = max(1, int(limits.cpu_s))
    return [str(cpu), str(cpu + 1), str(max(limits.mem_bytes // 1024, 1))]


def _carried(pass_fds: tuple[int, ...]) -> tuple[int | None, int | None]:
    """(descriptor read into the container's stdin, pipe that gets its stdout) of `pass_fds`."""
    reads: list[int] = []
    writes: list[int] = []
    for fd in pass_fds:
        st, mode = os.fstat(fd), fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        if stat.S_ISFIFO(st.st_mode) and mode == os.O_WRONLY:
            writes.append(fd)
        elif (stat.S_ISFIFO(st.st_mode) and mode == os.O_RDONLY) or stat.S_ISREG(st.st_mode):
            reads.append(fd)
        else:
            raise HarnessError(f"docker sandbox: descriptor {fd} is neither a pipe nor a file to read")
    if len(reads) > 1 or len(writes) > 1:
        raise HarnessError("docker sandbox: at most one descriptor to read and one pipe to write can be passed")
    return (reads[0] if reads else None), (writes[0] if writes else None)


def _forward(data: bytes, fd: int) -> None:
    """What the container wrote on its stdout, into the caller's pipe (never blocking)."""
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        view = memoryview(data[:MAX_FORWARD])
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass
    finally:
        os.set_blocking(fd, blocking)


def _shown(cwd: Path) -> dict[str, str]:
    return {str(cwd): WORKDIR, os.path.realpath(cwd): WORKDIR}


# --------------------------------------------------------------------------------------------
# One container per command


class _Once(Proc):
    """A `docker run`: killing it kills the container too, unless its client saw the container end."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str) -> None:
        super().__init__(popen, None, None)
        self.name = name

    def kill_all(self) -> None:
        if not _exited(self.popen.pid):
            with contextlib.suppress(HarnessError):
                docker(["kill", self.name], check=False, timeout=30)
        super().kill_all()


def _state(name: str, field: str) -> str:
    try:
        return docker(["inspect", "--format", f"{{{{.State.{field}}}}}", name], check=False, timeout=30).stdout.decode(
            "utf-8", "replace").strip()
    except HarnessError:
        return ""


def run_once(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str], image: Image,
             pass_fds: tuple[int, ...] = ()) -> CmdResult:
    """Run `cmd` in a fresh container of `image` with `cwd` at /workspace; the container is removed after."""
    _reap_once()
    read_fd, write_fd = _carried(pass_fds)
    inner, io = list(cmd), "-"
    if read_fd is not None or write_fd is not None:
        pairs = ([f"3:{read_fd}"] if read_fd is not None else []) + ([f"4:{write_fd}"] if write_fd is not None else [])
        python = cmd[0] if os.path.basename(cmd[0]).startswith("python") else "python3"
        inner, io = [python, "-I", "-S", "-c", HOP, ",".join(pairs), *cmd], "fds"
    name = _name("cmd")
    cli = docker_cli()
    if cli is None:
        raise HarnessError("docker is not installed (apt-get install docker.io)")
    argv = [cli, "run", *(["-i"] if read_fd is not None else []), "--pull", "never",
            *_flags(image, cwd, limits, "command", name, 1), *_env(env), "--user", f"{_uid()}:{_uid()}",
            "--entrypoint", "/bin/sh", image.id, "-c", ONCE, "sh", *_rlimits(limits), io, *inner]
    _track(name)
    try:
        start = time.monotonic()
        popen = subprocess.Popen(argv, stdin=read_fd if read_fd is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True, process_group=0)
        proc = _Once(popen, name)
        try:
            out, err, reason = collect(proc, limits, start + limits.wall_s)
            code = _returncode(popen.wait())
        finally:
            if popen.returncode is None:
                proc.kill_all()
                popen.wait()
            proc.close()
            for stream in (popen.stdout, popen.stderr):
                if stream is not None:
                    stream.close()
        duration = time.monotonic() - start
        oom, _, started = _state(name, "OOMKilled}} {{.State.StartedAt").partition(" ")
        if code in (125, 126, 127) and started.startswith("0001-"):
            raise HarnessError(f"docker could not start the container: {last_line(err) or f'exit code {code}'}")
        if reason is None and oom == "true":  # the kernel killed one of its processes for the memory of all
            reason = "memory"
    finally:
        _remove(name)
    if write_fd is not None:
        _forward(out, write_fd)
        out = b""
    return make_result(code, out, err, reason, duration, _shown(cwd), "docker")


# --------------------------------------------------------------------------------------------
# One container per episode


def _cgroup_dirs(pid: int) -> dict[str, Path]:
    """The cgroup folders of process `pid`: "pids" and "memory" (v1) or "v2", where they exist."""
    from .settings import get_settings

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
        self._host_root: Path | None = None  # the container's root file system, seen from here

    # -- lifetime --
    def _start(self) -> None:
        _reap_once()
        name = _name("agent")
        _track(name)
        self.name = name
        docker(["run", "-d", "--pull", "never", *_flags(self.image, self.root, self.limits, "agent", name, 2),
                *_bind(_init_binary(), INIT, True), "--user", "0:0", "--entrypoint", INIT, self.image.id,
                "-s", "--", "sleep", str(SESSION_LIFETIME_S)])
        pid = int(_state(name, "Pid") or 0)
        if pid <= 0:
            raise HarnessError(f"docker sandbox: container {name} did not start")
        self._init = os.pidfd_open(pid)
        self._spared = {pid}
        with contextlib.suppress(OSError, ValueError):
            self._spared.update(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
        self._cgroups = _cgroup_dirs(pid)
        with contextlib.suppress(OSError):
            self._pidns = os.readlink(f"/proc/{pid}/ns/pid")
        self._host_root = Path(f"/proc/{pid}/root")

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
            _remove(name)

    # -- commands --
    def run(self, cmd: list[str], limits: Limits, env: dict[str, str]) -> CmdResult:
        if self.name is None or not self._running():
            self.close()
            self._start()
        assert self.name is not None
        cli = docker_cli()
        assert cli is not None
        argv = [cli, "exec", "-u", f"{_uid()}:{_uid()}", "-w", WORKDIR, *_env(env), self.name,
                "/bin/sh", "-c", EXEC, "sh", *_rlimits(limits), *cmd]
        ooms = self._ooms()
        start = time.monotonic()
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 close_fds=True, process_group=0)
        proc = _Exec(popen, self)
        try:
            out, err, reason = collect(proc, limits, start + limits.wall_s)
            code = _returncode(popen.wait())
        finally:
            if popen.returncode is None:
                proc.kill_all()
                popen.wait()
            proc.close()
            for stream in (popen.stdout, popen.stderr):
                if stream is not None:
                    stream.close()
            self.sweep()
            self._wipe()
        duration = time.monotonic() - start
        if reason is None and self._ooms() > ooms:
            reason = "memory"
        return make_result(code, out, err, reason, duration, _shown(self.root), "docker")

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
        if self._host_root is None:
            return
        from .safefs import remove_tree

        for folder in ("tmp", "dev/shm"):
            with contextlib.suppress(OSError):
                with os.scandir(self._host_root / folder) as it:
                    entries = list(it)
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            remove_tree(entry.path)
                        else:
                            os.unlink(entry.path)

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
