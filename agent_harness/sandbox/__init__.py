"""Which sandbox runs a command, and the one way to run it: bubblewrap, Docker, or the rlimit fallback.

All three hold the same promises where they can (README "Sandbox"): an unprivileged uid, a cleared
environment, stdin closed, limits on CPU, memory, processes, file size, wall clock and output, the
working folder at ``/workspace`` as the only writable place, and everything the command started
killed when it ends. bubblewrap and Docker also hide the host and block the network; the rlimit
fallback cannot (bwrap_sandbox.py). Docker runs a task in the image it names (docker_sandbox.py).

The choice (`choose_sandbox`): ``$AGENT_HARNESS_SANDBOX`` (``--sandbox``) ``bwrap`` or ``docker``
requires that sandbox, ``rlimit`` forces the fallback, and ``auto`` (the default) takes Docker where
an image is named (a dataset row's or scenario's ``image``, ``$AGENT_HARNESS_SANDBOX_IMAGE`` /
``--sandbox-image``) and Docker works here, else bubblewrap, else the fallback.

A `Sandbox` runs the commands of one folder (a workspace) until closed: for bubblewrap and the
fallback nothing outlives a command; a Docker sandbox keeps one container for the episode.
`run_sandboxed` runs one command on its own (for Docker, in a fresh container: the scorers use it).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import HarnessError
from ..types import CmdResult
from .bounds import Limits, hand_over, memory_cgroup, sandbox_uid, switches_uid
from .bwrap import ENV_SANDBOX, WORKDIR, _etc_dir, bwrap_problem, host_sandbox, run_host

if TYPE_CHECKING:
    from .docker_image import Image

__all__ = ["ENV_SANDBOX", "WORKDIR", "Limits", "Sandbox", "SandboxSpec", "_etc_dir", "bwrap_problem",
           "choose_sandbox", "describe_bounds", "detect_sandbox", "hand_over", "memory_cgroup", "open_sandbox",
           "run_sandboxed", "sandbox_uid", "switches_uid"]

log = logging.getLogger(__name__)
KINDS = ("bwrap", "docker", "rlimit")
_DEFAULT_LIMITS = Limits()
_warned: set[str] = set()
_lock = threading.Lock()


def __getattr__(name: str) -> int:  # `SANDBOX_UID` for importers, read when asked for (not at import)
    if name == "SANDBOX_UID":
        return sandbox_uid()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class SandboxSpec:
    """A sandbox kind ("bwrap", "docker" or "rlimit") and, for Docker, the image (resolved to its id)."""

    kind: str
    image: Image | None = None


class Sandbox(Protocol):
    """Runs commands in one folder, with bounds, until closed."""

    spec: SandboxSpec

    def run(self, cmd: list[str], limits: Limits, env: dict[str, str]) -> CmdResult: ...

    def close(self) -> None: ...


class HostSandbox:
    """bubblewrap or the rlimit fallback: each command on its own, nothing to close."""

    def __init__(self, spec: SandboxSpec, root: Path) -> None:
        self.spec, self.root = spec, root

    def run(self, cmd: list[str], limits: Limits, env: dict[str, str]) -> CmdResult:
        return run_sandboxed(cmd, self.root, limits, env, self.spec)

    def close(self) -> None:
        pass


class DockerSandbox:
    """An episode's container (docker_sandbox.Session), started at the first command."""

    def __init__(self, spec: SandboxSpec, root: Path, limits: Limits) -> None:
        from .docker_session import Session

        assert spec.image is not None
        self.spec = spec
        self._session = Session(spec.image, Path(root).absolute(), limits)

    def run(self, cmd: list[str], limits: Limits, env: dict[str, str]) -> CmdResult:
        _check_cmd(cmd)
        return self._session.run(list(cmd), limits, dict(env))

    def close(self) -> None:
        self._session.close()


def open_sandbox(spec: SandboxSpec, root: Path, limits: Limits) -> Sandbox:
    """A sandbox for the commands of folder `root`; `limits` bound what a Docker container holds at once."""
    return DockerSandbox(spec, root, limits) if spec.kind == "docker" else HostSandbox(spec, root)


# --------------------------------------------------------------------------------------------
# The choice


def _warn_once(message: str) -> None:
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    log.warning("%s", message)


def choose_sandbox(image: str | None = None) -> SandboxSpec:
    """The sandbox for a task that names `image` (or none), by the settings; see the module docstring.

    HarnessError when the required sandbox does not work here; ConfigError for an image that is not
    on this machine, not an image name, or declares volumes."""
    from ..settings import get_settings
    from .docker_image import docker_problem, resolve_image

    settings = get_settings()
    wanted = image or settings.sandbox_image
    if settings.sandbox == "docker":
        problem = docker_problem()
        if problem is not None:
            raise HarnessError(f"${ENV_SANDBOX}=docker but Docker cannot be used here: {problem}")
        return SandboxSpec("docker", resolve_image(wanted))
    if wanted and settings.sandbox == "auto":
        problem = docker_problem()
        if problem is None:
            return SandboxSpec("docker", resolve_image(wanted))
        kind = host_sandbox()
        _warn_once(f"image {wanted!r} is named but Docker cannot be used here ({problem}); commands run under {kind}")
        return SandboxSpec(kind)
    kind = host_sandbox(settings.sandbox)
    if wanted:
        _warn_once(f"image {wanted!r} is named but ${ENV_SANDBOX}={settings.sandbox}: commands run under {kind}")
    return SandboxSpec(kind)


def detect_sandbox() -> str:
    """The sandbox kind of a task that names no image: see `choose_sandbox`."""
    return choose_sandbox().kind


def _spec(sandbox: str | SandboxSpec | None) -> SandboxSpec:
    if isinstance(sandbox, SandboxSpec):
        return sandbox
    if sandbox is None:
        return choose_sandbox()
    if sandbox == "docker":
        from ..settings import get_settings
        from .docker_image import resolve_image

        return SandboxSpec("docker", resolve_image(get_settings().sandbox_image))
    if sandbox not in KINDS:
        raise HarnessError(f"unknown sandbox '{sandbox}' ({', '.join(KINDS)})")
    return SandboxSpec(sandbox)


def _check_cmd(cmd: list[str]) -> None:
    if not cmd or not all(isinstance(a, str) for a in cmd):
        raise ValueError(f"cmd must be a non-empty list of strings, got {cmd!r}")


# --------------------------------------------------------------------------------------------
# One command


def run_sandboxed(cmd: list[str], cwd: Path, limits: Limits = _DEFAULT_LIMITS, env: dict[str, str] | None = None,
                  sandbox: str | SandboxSpec | None = None, pass_fds: tuple[int, ...] = ()) -> CmdResult:
    """Run `cmd` (argv) in `cwd`, the only writable folder, and return what happened.

    `pass_fds` stay open, with the same numbers, in the command (a private channel to the harness;
    under Docker at most one to read and one pipe to write, carried on the container's streams).
    A failing, timed-out or missing command is a CmdResult, never an exception; only harness
    faults raise. When the harness is root, `cwd` is handed (chown) to the sandbox's uid first.
    """
    _check_cmd(cmd)
    spec = _spec(sandbox)
    cwd = Path(cwd).absolute()
    if not cwd.is_dir():
        raise HarnessError(f"sandbox: working folder {cwd} does not exist")
    if spec.kind != "docker":
        return run_host(list(cmd), cwd, limits, dict(env or {}), spec.kind, tuple(pass_fds))
    from .docker import run_once

    assert spec.image is not None
    if switches_uid() and cwd.stat().st_uid != sandbox_uid():
        hand_over(cwd)
    return run_once(list(cmd), cwd, limits, dict(env or {}), spec.image, tuple(pass_fds))


def describe_bounds(limits: Limits | None = None, sandbox: str | SandboxSpec | None = None) -> dict[str, Any]:
    """The resource bounds a command runs under here, for the trace header and the README."""
    lim = limits or Limits()
    spec = SandboxSpec("none") if sandbox == "none" else _spec(sandbox)
    cg = ("docker", None) if spec.kind == "docker" else memory_cgroup()
    bounds: dict[str, Any] = {
        "mode": spec.kind,
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
    if spec.image is not None:
        bounds.update(image=spec.image.name, image_id=spec.image.id, host_usr=spec.image.host_usr)
    return bounds
