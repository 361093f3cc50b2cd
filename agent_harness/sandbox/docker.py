"""The Docker sandbox: commands in containers, with the bounds and promises of the bubblewrap sandbox.

Every container: no network (``--network none``), the sandbox uid, all capabilities dropped,
no-new-privileges, a read-only root, a private bounded /tmp and /dev/shm (tmpfs), the working folder
at /workspace as the only writable bind, memory of all its processes together (``--memory``, no
swap), a process limit (``--pids-limit``), file size and core ulimits, no logging of its output.
Inside, a ``/bin/sh`` wrapper sets each command's CPU and address-space rlimits (``ulimit``); the
harness enforces the wall clock and the output cap (reaper.collect). Two ways to run, both used:

- `docker_session.Session` (a workspace's commands, an episode): one container, started at the first
  command; each command is a ``docker exec``, about four times faster than a container per command
  (bench/sandbox_latency.py); everything a command leaves is killed when it ends (see there).
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
import stat
import subprocess
import threading
import time
from pathlib import Path

from ..errors import HarnessError
from ..types import CmdResult
from .bounds import Limits, sandbox_uid, switches_uid
from .bwrap import FIXED_ENV, HOST_ETC, WORKDIR, make_result
from .docker_image import Image, docker, docker_cli, last_line
from .reaper import Proc, finish, has_exited
from .tempdirs import orphaned, owner_tag

log = logging.getLogger(__name__)

OWNER_LABEL = "agent-harness.owner"
RUN_LABEL = "agent-harness.run"
ROLE_LABEL = "agent-harness.role"
RUN_ID = secrets.token_hex(8)  # this process's run, on each of its containers
MAX_FORWARD = 65536  # bytes of the container's stdout passed on to a report pipe
LIMITS = 'ulimit -S -t "$1" && ulimit -H -t "$2" && ulimit -v "$3" || exit 125\n'
# pid 1 of a one-off container: the command runs as its child; with descriptors to carry, the
# standard streams go to 3 (stdin) and 4 (stdout) for the command only.
ONCE = LIMITS + """io=$4
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


def new_name(role: str) -> str:
    return f"agent-harness-{role}-{owner_tag()}-{secrets.token_hex(4)}"


def track(name: str) -> None:
    with _lock:
        _live.add(name)


def remove(*names: str) -> None:
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
        remove(*names)


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
        remove(*dead)
    return dead


def reap_at_start() -> None:
    """At a run's start: remove the containers of dead runs, where Docker is installed and answers."""
    from .docker_image import docker_problem

    if docker_cli() is not None and docker_problem() is None:
        reap_once()


def reap_once() -> None:
    global _reaped_by
    with _lock:
        if _reaped_by == os.getpid():
            return
        _reaped_by = os.getpid()
    reap_containers()


# --------------------------------------------------------------------------------------------
# Command lines


def command_uid() -> int:
    return sandbox_uid() if switches_uid() else os.getuid()


def bind(source: str, target: str, readonly: bool) -> list[str]:
    if any(c in source for c in ',"\n') or not os.path.isabs(source):
        raise HarnessError(f"docker sandbox: {source!r} cannot be bound into a container (use a plain absolute path)")
    return ["--mount", f"type=bind,source={source},target={target}" + (",readonly" if readonly else "")]


@functools.cache
def _host_usr() -> tuple[str, ...]:
    """The binds that give a container the host's system, as bubblewrap does: /usr read-only, /usr/local hidden."""
    args = bind("/usr", "/usr", True)
    if os.path.isdir("/usr/local"):
        args += ["--tmpfs", "/usr/local:ro,size=4k"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # folders, where the host's are not links
        if os.path.isdir(f"/{name}") and not os.path.islink(f"/{name}"):
            args += bind(f"/{name}", f"/{name}", True)
    for path in HOST_ETC:
        if os.path.exists(path):
            args += bind(os.path.realpath(path), path, True)
    return tuple(args)


def container_flags(image: Image, cwd: Path, limits: Limits, role: str, name: str, extra_pids: int) -> list[str]:
    flags = ["--name", name, "--label", f"{OWNER_LABEL}={owner_tag()}", "--label", f"{RUN_LABEL}={RUN_ID}",
             "--label", f"{ROLE_LABEL}={role}", "--network", "none", "--cap-drop", "ALL",
             "--security-opt", "no-new-privileges", "--read-only", "--hostname", "sandbox", "--log-driver", "none",
             "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={limits.tmp_bytes},mode=1777",
             "--shm-size", str(min(limits.tmp_bytes, 64 << 20)),
             "--memory", str(limits.mem_total_bytes), "--memory-swap", str(limits.mem_total_bytes),
             "--pids-limit", str(limits.nproc + extra_pids),
             "--ulimit", f"fsize={limits.fsize_bytes}", "--ulimit", "core=0",
             *bind(str(cwd), WORKDIR, False), "--workdir", WORKDIR]
    return flags + list(_host_usr()) if image.host_usr else flags


def env_args(env: dict[str, str]) -> list[str]:
    full = {k: v for k, v in FIXED_ENV.items() if k != "PATH"}  # the image's PATH (the default image's is bwrap's)
    full.update({"HOME": "/tmp", "TMPDIR": "/tmp", **env})
    return [arg for k, v in full.items() for arg in ("-e", f"{k}={v}")]


def rlimit_args(limits: Limits) -> list[str]:
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


def shown(cwd: Path) -> dict[str, str]:
    return {str(cwd): WORKDIR, os.path.realpath(cwd): WORKDIR}


# --------------------------------------------------------------------------------------------
# One container per command


class _Once(Proc):
    """A `docker run`: killing it kills the container too, unless its client saw the container end."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str) -> None:
        super().__init__(popen, None, None)
        self.name = name

    def kill_all(self) -> None:
        if not has_exited(self.popen.pid):
            with contextlib.suppress(HarnessError):
                docker(["kill", self.name], check=False, timeout=30)
        super().kill_all()


def state(name: str, field: str) -> str:
    try:
        return docker(["inspect", "--format", f"{{{{.State.{field}}}}}", name], check=False, timeout=30).stdout.decode(
            "utf-8", "replace").strip()
    except HarnessError:
        return ""


def run_once(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str], image: Image,
             pass_fds: tuple[int, ...] = ()) -> CmdResult:
    """Run `cmd` in a fresh container of `image` with `cwd` at /workspace; the container is removed after."""
    reap_once()
    read_fd, write_fd = _carried(pass_fds)
    inner, io = list(cmd), "-"
    if read_fd is not None or write_fd is not None:
        pairs = ([f"3:{read_fd}"] if read_fd is not None else []) + ([f"4:{write_fd}"] if write_fd is not None else [])
        python = cmd[0] if os.path.basename(cmd[0]).startswith("python") else "python3"
        inner, io = [python, "-I", "-S", "-c", HOP, ",".join(pairs), *cmd], "fds"
    name = new_name("cmd")
    cli = docker_cli()
    if cli is None:
        raise HarnessError("docker is not installed (apt-get install docker.io)")
    uid = command_uid()
    argv = [cli, "run", *(["-i"] if read_fd is not None else []), "--pull", "never",
            *container_flags(image, cwd, limits, "command", name, 1), *env_args(env), "--user", f"{uid}:{uid}",
            "--entrypoint", "/bin/sh", image.id, "-c", ONCE, "sh", *rlimit_args(limits), io, *inner]
    track(name)
    try:
        start = time.monotonic()
        popen = subprocess.Popen(argv, stdin=read_fd if read_fd is not None else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True, process_group=0)
        proc = _Once(popen, name)
        out, err, reason, code = finish(popen, proc, limits, start)
        duration = time.monotonic() - start
        oom, _, started = state(name, "OOMKilled}} {{.State.StartedAt").partition(" ")
        if code in (125, 126, 127) and started.startswith("0001-"):
            raise HarnessError(f"docker could not start the container: {last_line(err) or f'exit code {code}'}")
        if reason is None and oom == "true":  # the kernel killed one of its processes for the memory of all
            reason = "memory"
    finally:
        remove(name)
    while err.startswith(b"WARNING: Your kernel does not support"):  # the client's, before the command's output
        err = err.partition(b"\n")[2]
    if write_fd is not None:
        _forward(out, write_fd)
        out = b""
    return make_result(code, out, err, reason, duration, shown(cwd), "docker")
