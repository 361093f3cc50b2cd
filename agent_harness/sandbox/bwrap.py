"""The host sandboxes: one command with limits in bubblewrap, or under rlimits in a process group.

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

The bounds themselves (`Limits`, the uid, the memory cgroup) live in bounds.py; reading a command's
output and killing what it leaves behind in reaper.py; choosing a sandbox, and Docker's, in sandbox.py
and docker_sandbox.py.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from ..types import CmdResult
from .bounds import (
    JOIN_CGROUP,
    Limits,
    hand_over,
    memory_cgroup,
    new_cgroup,
    oom_killed,
    remove_cgroup,
    sandbox_uid,
    switches_uid,
)
from .reaper import Proc, finish
from .tempdirs import owned_tempdir

ENV_SANDBOX = "AGENT_HARNESS_SANDBOX"  # "rlimit" forces the fallback, "bwrap" requires bubblewrap
WORKDIR = "/workspace"  # where the working dir appears inside the sandbox (and in its output)
INSIDE_ID = 1000  # uid/gid the command sees inside bwrap
SANDBOX_PATH = "/usr/bin:/bin"
FIXED_ENV = {
    "PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
    "GIT_CONFIG_NOSYSTEM": "1", "USER": "sandbox", "LOGNAME": "sandbox",
}
ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
              f"sandbox:x:{INSIDE_ID}:{INSIDE_ID}:sandbox:/tmp:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{INSIDE_ID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}
HOST_ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")
_FALLBACK_UIDS = 2**30  # fallback commands get a random uid in [2**30, 2**31)
# "not found" as prlimit and setpriv (bwrap, rlimit) and a container's /bin/sh (docker) say it
_NOT_FOUND = re.compile(r"(?:(?:prlimit|setpriv): failed to execute (.+): No such file or directory"
                        r"|sh: [0-9]+: (.+): not found)\n?")


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
            d = str(owned_tempdir("etc"))
            os.chmod(d, 0o755)
            for name, text in ETC_FILES.items():
                Path(d, name).write_text(text, encoding="utf-8")
                os.chmod(Path(d, name), 0o644)
            atexit.register(shutil.rmtree, d, True)
            _probed["etc"] = d
        return _probed["etc"] or ""


def _probe_bwrap() -> str | None:
    """None when bwrap runs a command here with our full set of options, else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    tmp = owned_tempdir("probe")
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


def host_sandbox(forced: str = "auto") -> str:
    """"bwrap" when bubblewrap works here, else "rlimit"; `forced` "rlimit" forces the fallback, "bwrap"
    requires bubblewrap (HarnessError when it does not work)."""
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
    for path in HOST_ETC:
        args += ["--ro-bind-try", path, path]
    etc = _etc_dir()
    for name in ETC_FILES:
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
# Running



def _private_home(uid: int | None) -> Path:
    home = owned_tempdir("home")
    if uid is not None:
        os.chown(home, uid, uid)
    return home


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
        full_env = {**FIXED_ENV, "HOME": "/tmp", "TMPDIR": "/tmp", **env}
        argv = _bwrap_argv(cmd, cwd, limits, full_env, info_w)
        spawn_env, spawn_cwd = {"PATH": SANDBOX_PATH}, "/"
    else:
        if switches_uid():
            uid = _FALLBACK_UIDS + secrets.randbelow(_FALLBACK_UIDS)
            hand_over(cwd, uid)
            popen_kw = {"user": uid, "group": uid, "extra_groups": []}
        home = _private_home(uid)
        full_env = {**FIXED_ENV, "HOME": str(home), "TMPDIR": str(home), **env}
        argv = [*_prlimit(limits), _tool("setpriv"), "--no-new-privs", "--pdeathsig", "KILL", "--", *cmd]
        spawn_env, spawn_cwd = full_env, str(cwd)
        popen_kw["pass_fds"] = pass_fds
    cgroup = memory_cgroup()
    cg_dir: Path | None = None
    if cgroup is not None:
        cg_dir = new_cgroup(cgroup[0], cgroup[1], limits.mem_total_bytes)
        if "user" in popen_kw:  # join as root, then drop to the command's uid
            who = str(popen_kw.pop("user"))
            popen_kw.pop("group", None)
            popen_kw.pop("extra_groups", None)
            argv = [_tool("setpriv"), f"--reuid={who}", f"--regid={who}", "--clear-groups", "--", *argv]
        argv = ["/bin/sh", "-c", JOIN_CGROUP, str(cg_dir / "cgroup.procs"), *argv]
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
            remove_cgroup(cg_dir)
        raise
    if info_w is not None:
        os.close(info_w)
    proc = Proc(popen, uid, info_r)
    try:
        out, err, reason, code = finish(popen, proc, limits, start)
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        oom = cgroup is not None and cg_dir is not None and oom_killed(cgroup[0], cg_dir)
        if cg_dir is not None:
            remove_cgroup(cg_dir)
    if reason is None and oom:
        reason = "memory"
    # No host path in what the model sees: bwrap's /proc/self/mountinfo names the host folders it
    # binds; the fallback runs in the host folder itself. Both show what a bwrap run shows.
    shown = {str(cwd): WORKDIR, os.path.realpath(cwd): WORKDIR}
    if mode == "bwrap" and _probed.get("etc"):
        shown[str(_probed["etc"])] = "/etc"
    if home is not None:
        shown[str(home)] = "/tmp"
    if uid is not None:
        shown[str(uid)] = str(INSIDE_ID)
    return make_result(code, out, err, reason, time.monotonic() - start, shown, mode)


def make_result(code: int, out: bytes, err: bytes, reason: str | None, duration: float, shown: dict[str, str],
                mode: str) -> CmdResult:
    """The CmdResult of a finished command: why it was killed, read from its exit code when the harness did
    not kill it, "not found" said as a shell says it, and each host path of `shown` as the sandbox shows it."""
    if reason is None and code == 128 + signal.SIGXCPU:
        reason = "cpu"
    elif reason is None and code == 128 + signal.SIGXFSZ:
        reason = "fsize"
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if code == 127:
        m = _NOT_FOUND.fullmatch(stderr)
        stderr = f"{m[1] or m[2]}: command not found\n" if m else stderr
    for real in sorted(shown, key=len, reverse=True):
        stdout, stderr = stdout.replace(real, shown[real]), stderr.replace(real, shown[real])
    return CmdResult(returncode=code, stdout=stdout, stderr=stderr, duration_s=duration,
                     timed_out=reason in ("timeout", "cpu"), killed_reason=reason, sandbox=mode)


def run_host(cmd: list[str], cwd: Path, limits: Limits, env: dict[str, str], mode: str,
             pass_fds: tuple[int, ...] = ()) -> CmdResult:
    """`run_sandboxed` in bubblewrap or under the rlimit fallback (`mode`); `cwd` is absolute and exists."""
    if mode == "bwrap":
        if switches_uid() and cwd.stat().st_uid != sandbox_uid():
            hand_over(cwd)
        _reachable(cwd)
    return _run(cmd, cwd, limits, env, mode, pass_fds)
