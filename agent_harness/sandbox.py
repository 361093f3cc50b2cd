"""Run one command with limits: in bubblewrap when it works here, else rlimits in a process group.

Both modes run the command as an unprivileged uid when the harness is root (the kernel does not
apply RLIMIT_NPROC to uid 0, so this is what bounds a fork bomb), with a cleared environment,
stdin on /dev/null, rlimits set by `prlimit` (no `preexec_fn`: the runner calls us from threads),
a wall-clock timeout and a cap on captured output.

- ``bwrap``: uid SANDBOX_UID; new user, pid, net, ipc, uts and cgroup namespaces; read-only
  /usr, a synthetic /etc, private /tmp and /dev/shm, the working dir bound at ``/workspace`` as
  the only writable host path. ``prlimit`` runs *inside* the fresh user namespace, so the process
  limit counts only this sandbox's processes. When the command ends, bwrap's pid 1 exits and the
  kernel kills whatever is left in the pid namespace.
- ``rlimit`` (fallback): a fresh random uid per command (the working dir is handed to it first),
  so the process limit counts only this command and leftovers, even ones that left the process
  group with setsid, are found by uid and killed; no-new-privs; a private HOME/TMPDIR. It cannot
  hide the host file system, stop writes to world-writable host folders (/tmp) or block the network.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import HarnessError
from .types import CmdResult

ENV_SANDBOX = "AGENT_HARNESS_SANDBOX"  # "rlimit" forces the fallback, "bwrap" requires bubblewrap
def sandbox_uid() -> int:
    """$AGENT_HARNESS_SANDBOX_UID (default 65534), validated by settings.py when first needed."""
    from .settings import get_settings

    return get_settings().sandbox_uid


def __getattr__(name: str) -> int:  # `SANDBOX_UID` for importers, read when asked for (not at import)
    if name == "SANDBOX_UID":
        return sandbox_uid()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
WORKDIR = "/workspace"  # where the working dir appears inside the sandbox (and in its output)
INSIDE_ID = 1000  # uid/gid the command sees inside bwrap
SANDBOX_PATH = "/usr/bin:/bin"
_FIXED_ENV = {
    "PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
    "GIT_CONFIG_NOSYSTEM": "1", "USER": "sandbox", "LOGNAME": "sandbox",
}
_ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
              f"sandbox:x:{INSIDE_ID}:{INSIDE_ID}:sandbox:/tmp:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{INSIDE_ID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}
_HOST_ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")
_READ_CHUNK = 65536
_DRAIN_S = 2.0  # how long to wait for the pipes to close once the command and its leftovers are killed
_FALLBACK_UIDS = 2**30  # fallback commands get a random uid in [2**30, 2**31)
_NOT_FOUND = re.compile(r"(?:prlimit|setpriv): failed to execute (.+): No such file or directory\n?")


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


def _reachable(path: Path) -> None:
    """bwrap runs as the sandbox uid, so every folder above `path` must let that uid through."""
    if not switches_uid():
        return
    for parent in path.parents:
        st = parent.stat()
        if not st.st_mode & stat.S_IXOTH and st.st_uid != sandbox_uid():
            raise HarnessError(f"sandbox: {path} is not reachable by uid {sandbox_uid()}: {parent} is "
                               f"private (mode {stat.S_IMODE(st.st_mode):o}); use a folder under "
                               f"{tempfile.gettempdir()}")


# --------------------------------------------------------------------------------------------
# Detection


_lock = threading.Lock()
_probed: dict[str, str | None] = {}


def _tool(name: str) -> str:
    found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise HarnessError(f"sandbox: '{name}' (util-linux) is not installed")
    return found


def _etc_dir() -> str:
    """A folder with the synthetic /etc files bwrap binds, written once per process."""
    with _lock:
        if "etc" not in _probed:
            d = tempfile.mkdtemp(prefix="agent-harness-etc-")
            os.chmod(d, 0o755)
            for name, text in _ETC_FILES.items():
                Path(d, name).write_text(text, encoding="utf-8")
                os.chmod(Path(d, name), 0o644)
            atexit.register(shutil.rmtree, d, True)
            _probed["etc"] = d
        return _probed["etc"] or ""


def _probe_bwrap() -> str | None:
    """None when bwrap runs a command here with our full set of options, else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    tmp = Path(tempfile.mkdtemp(prefix="agent-harness-probe-"))
    try:
        hand_over(tmp)
        _reachable(tmp)
        res = _run(["true"], tmp, Limits(wall_s=20.0), {}, "bwrap")
    except (OSError, HarnessError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if res.returncode != 0:
        return (res.stderr.strip() or f"exit code {res.returncode}").splitlines()[-1]
    return None


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot be used here (None when it can); probed once per process."""
    with _lock:
        if "bwrap" in _probed:
            return _probed["bwrap"]
    problem = _probe_bwrap()
    with _lock:
        _probed.setdefault("bwrap", problem)
        return _probed["bwrap"]


def detect_sandbox() -> str:
    """"bwrap" when bubblewrap works here, else "rlimit" ($AGENT_HARNESS_SANDBOX=rlimit forces it)."""
    from .settings import get_settings

    forced = get_settings().sandbox  # auto, bwrap or rlimit: settings.py rejects anything else
    if forced == "rlimit":
        return "rlimit"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if forced == "bwrap":
        raise HarnessError(f"${ENV_SANDBOX}=bwrap but bubblewrap does not work here: {problem}")
    return "rlimit"


# --------------------------------------------------------------------------------------------
# Command lines


def _prlimit(limits: Limits) -> list[str]:
    cpu = max(1, int(limits.cpu_s))
    return [_tool("prlimit"), f"--cpu={cpu}:{cpu + 1}", f"--as={limits.mem_bytes}", f"--nproc={limits.nproc}",
            f"--fsize={limits.fsize_bytes}", "--core=0", "--"]


@functools.cache
def _system_binds() -> tuple[str, ...]:
    args = ["--ro-bind", "/usr", "/usr"]
    if os.path.isdir("/usr/local"):  # site-wide installs are not part of the sandbox's system
        args += ["--tmpfs", "/usr/local", "--remount-ro", "/usr/local"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in _HOST_ETC:
        args += ["--ro-bind-try", path, path]
    etc = _etc_dir()
    for name in _ETC_FILES:
        args += ["--ro-bind", os.path.join(etc, name), f"/etc/{name}"]
    return tuple(args)


def _bwrap_argv(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str], info_fd: int) -> list[str]:
    argv = [
        "bwrap", "--info-fd", str(info_fd),
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
        "--uid", str(INSIDE_ID), "--gid", str(INSIDE_ID), "--hostname", "sandbox",
        *_system_binds(),
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
        "--size", str(min(limits.tmp_bytes, 64 << 20)), "--tmpfs", "/dev/shm",
        "--bind", str(cwd), WORKDIR, "--chdir", WORKDIR,
        "--remount-ro", "/",
        "--clearenv",
    ]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *_prlimit(limits), *cmd]


# --------------------------------------------------------------------------------------------
# Memory cgroup: bounds the memory of all of a command's processes together


_JOIN = 'echo $$ > "$0" && exec "$@"'  # the shell moves itself into the cgroup, then becomes the command


def _probe_cgroup() -> tuple[str, Path] | None:
    """("v2" or "v1", a folder to make per-command cgroups in), or None when none is usable here.

    Needs root: the command joins its cgroup before it drops to the sandbox uid.
    """
    from .settings import get_settings

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
            probe = _new_cgroup(version, base, 64 << 20)
            _remove_cgroup(probe)
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
        if "cgroup" not in _probed:
            found = _probe_cgroup()
            _probed["cgroup"] = None if found is None else f"{found[0]}:{found[1]}"
        value = _probed["cgroup"]
    if value is None:
        return None
    version, _, base = value.partition(":")
    return version, Path(base)


def _new_cgroup(version: str, base: Path, limit: int) -> Path:
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
        _remove_cgroup(d)
        raise
    return d


def _oom_killed(version: str, d: Path) -> bool:
    text = _read(d / ("memory.events" if version == "v2" else "memory.oom_control"))
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value) > 0
    return False


def _remove_cgroup(d: Path) -> None:
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


def describe_bounds(limits: Limits | None = None, sandbox: str | None = None) -> dict[str, Any]:
    """The resource bounds a command runs under here, for the trace header and the README."""
    lim = limits or Limits()
    cg = memory_cgroup()
    return {
        "mode": sandbox or detect_sandbox(),
        "memory_total_bytes": lim.mem_total_bytes if cg else None,
        "memory_cgroup": cg[0] if cg else None,
        "memory_per_process_bytes": lim.mem_bytes,
        "processes": lim.nproc,
        "cpu_s_per_process": lim.cpu_s,
        "wall_s": lim.wall_s,
        "file_size_bytes": lim.fsize_bytes,
        "output_bytes": lim.output_bytes,
        "tmp_bytes": lim.tmp_bytes,
        "workspace_bytes": lim.disk_bytes,
        "workspace_files": lim.disk_files,
    }


# --------------------------------------------------------------------------------------------
# Running


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


class _Proc:
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
                sel.select(_DRAIN_S)

    def close(self) -> None:
        for fd in (self.inner, self.info_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.inner = self.info_fd = None


def _exited(pid: int) -> bool:
    """Whether `pid` (our child) has exited, without reaping it: its pid stays reserved."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _collect(proc: _Proc, limits: Limits, deadline: float) -> tuple[bytes, bytes, str | None]:
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
    try:
        exit_fd: int | None = os.pidfd_open(p.pid)
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
                reason, drain_until = "timeout", now + _DRAIN_S
                proc.kill_all()
                continue
            wait = (drain_until or deadline) - now
            events = sel.select(wait if exit_fd is not None or exited else min(wait, 0.02))
            if not exited and (any(key.fd == exit_fd for key, _ in events) or
                               (exit_fd is None and _exited(p.pid))):
                exited = True  # the command is gone: so must be anything it left running
                proc.kill_all()
                drain_until = drain_until or time.monotonic() + _DRAIN_S
            for key, _ in events:
                if key.fd == exit_fd:
                    sel.unregister(key.fd)
                    continue
                data = os.read(key.fd, _READ_CHUNK)
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
                    reason, drain_until = "output", time.monotonic() + _DRAIN_S
                    proc.kill_all()
    finally:
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)
    return bytes(bufs[p.stdout.fileno()]), bytes(bufs[p.stderr.fileno()]), reason


def _private_home(uid: int | None) -> Path:
    home = Path(tempfile.mkdtemp(prefix="agent-harness-home-"))
    if uid is not None:
        os.chown(home, uid, uid)
    return home


def _returncode(raw: int) -> int:
    return 128 - raw if raw < 0 else raw  # killed by signal N: 128 + N, as bwrap and shells report it


def _run(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str], mode: str,
         pass_fds: tuple[int, ...] = ()) -> CmdResult:
    uid: int | None = None  # the uid to sweep for leftovers (fallback only)
    home: Path | None = None
    info_r: int | None = None
    info_w: int | None = None
    popen_kw: dict[str, Any] = {}
    if mode == "bwrap":
        if switches_uid():
            popen_kw = {"user": sandbox_uid(), "group": sandbox_uid(), "extra_groups": []}
        info_r, info_w = os.pipe()
        popen_kw["pass_fds"] = (info_w, *pass_fds)
        full_env = {**_FIXED_ENV, "HOME": "/tmp", "TMPDIR": "/tmp", **env}
        argv = _bwrap_argv(cmd, cwd, limits, full_env, info_w)
        spawn_env, spawn_cwd = {"PATH": SANDBOX_PATH}, "/"
    else:
        if switches_uid():
            uid = _FALLBACK_UIDS + secrets.randbelow(_FALLBACK_UIDS)
            hand_over(cwd, uid)
            popen_kw = {"user": uid, "group": uid, "extra_groups": []}
        home = _private_home(uid)
        full_env = {**_FIXED_ENV, "HOME": str(home), "TMPDIR": str(home), **env}
        argv = [*_prlimit(limits), _tool("setpriv"), "--no-new-privs", "--pdeathsig", "KILL", "--", *cmd]
        spawn_env, spawn_cwd = full_env, str(cwd)
        popen_kw["pass_fds"] = pass_fds
    cgroup = memory_cgroup()
    cg_dir: Path | None = None
    if cgroup is not None:
        cg_dir = _new_cgroup(cgroup[0], cgroup[1], limits.mem_total_bytes)
        if "user" in popen_kw:  # join as root, then drop to the command's uid
            who = str(popen_kw.pop("user"))
            popen_kw.pop("group", None)
            popen_kw.pop("extra_groups", None)
            argv = [_tool("setpriv"), f"--reuid={who}", f"--regid={who}", "--clear-groups", "--", *argv]
        argv = ["/bin/sh", "-c", _JOIN, str(cg_dir / "cgroup.procs"), *argv]
    start = time.monotonic()
    try:
        popen = subprocess.Popen(argv, cwd=spawn_cwd, env=spawn_env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                                 process_group=0, **popen_kw)
    except BaseException:
        for fd in (info_r, info_w):
            if fd is not None:
                os.close(fd)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        if cg_dir is not None:
            _remove_cgroup(cg_dir)
        raise
    if info_w is not None:
        os.close(info_w)
    proc = _Proc(popen, uid, info_r)
    try:
        out, err, reason = _collect(proc, limits, start + limits.wall_s)
        code = _returncode(popen.wait())
    finally:
        if popen.returncode is None:
            proc.kill_all()
            popen.wait()
        proc.close()
        for stream in (popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        oom = cgroup is not None and cg_dir is not None and _oom_killed(cgroup[0], cg_dir)
        if cg_dir is not None:
            _remove_cgroup(cg_dir)
    duration = time.monotonic() - start
    if reason is None and oom:
        reason = "memory"
    if reason is None and code == 128 + signal.SIGXCPU:
        reason = "cpu"
    elif reason is None and code == 128 + signal.SIGXFSZ:
        reason = "fsize"
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if code == 127:
        m = _NOT_FOUND.fullmatch(stderr)
        stderr = f"{m[1]}: command not found\n" if m else stderr
    # No host path in what the model sees: bwrap's /proc/self/mountinfo names the host folders it
    # binds; the fallback runs in the host folder itself. Both show what a bwrap run shows.
    shown = {str(cwd): WORKDIR, os.path.realpath(cwd): WORKDIR}
    if mode == "bwrap" and _probed.get("etc"):
        shown[str(_probed["etc"])] = "/etc"
    if home is not None:
        shown[str(home)] = "/tmp"
    if uid is not None:
        shown[str(uid)] = str(INSIDE_ID)
    for real in sorted(shown, key=len, reverse=True):
        stdout, stderr = stdout.replace(real, shown[real]), stderr.replace(real, shown[real])
    return CmdResult(returncode=code, stdout=stdout, stderr=stderr, duration_s=duration,
                     timed_out=reason in ("timeout", "cpu"), killed_reason=reason, sandbox=mode)


def run_sandboxed(cmd: list[str], cwd: Path, limits: Limits = Limits(), env: dict[str, str] | None = None,
                  sandbox: str | None = None, pass_fds: tuple[int, ...] = ()) -> CmdResult:
    """Run `cmd` (argv) in `cwd`, the only writable folder, and return what happened.

    `pass_fds` stay open, with the same numbers, in the command (a private channel to the harness).
    A failing, timed-out or missing command is a CmdResult, never an exception; only harness
    faults raise. When the harness is root, `cwd` is handed (chown) to the sandbox's uid first.
    """
    if not cmd or not all(isinstance(a, str) for a in cmd):
        raise ValueError(f"cmd must be a non-empty list of strings, got {cmd!r}")
    mode = sandbox or detect_sandbox()
    if mode not in ("bwrap", "rlimit"):
        raise HarnessError(f"unknown sandbox '{mode}' (bwrap or rlimit)")
    cwd = Path(cwd).absolute()
    if not cwd.is_dir():
        raise HarnessError(f"sandbox: working folder {cwd} does not exist")
    if mode == "bwrap":
        if switches_uid() and cwd.stat().st_uid != sandbox_uid():
            hand_over(cwd)
        _reachable(cwd)
    return _run(list(cmd), cwd, limits, dict(env or {}), mode, tuple(pass_fds))
