"""Docker for the sandbox: the client, whether a daemon answers, image names, and the default image.

No image is ever pulled. A task, a scenario or `--sandbox-image` names an image that is already on
this machine (built or loaded by its user); it is resolved to its id once, and every container of
the run starts from that id, so the agent's container and the verifier's are the same image even
if the name moves. An image that declares volumes is refused: Docker would mount a writable
volume there, and the workspace must stay the only writable host-backed folder.

The default image (`python -m agent_harness.sandbox.docker_image build`, run by `make setup`) is built
from nothing the network holds: a skeleton root (the synthetic /etc of the bubblewrap sandbox,
empty /tmp and /workspace, and the host's /bin, /lib... links) imported with `docker import`.
It carries the label ``agent-harness.host-usr``: containers of such an image get the host's /usr
bound read-only (and /usr/local hidden), as bubblewrap does, so they run the host's python3 and
git. Its tag is a digest of the skeleton, so a change to it makes a new image.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from dataclasses import dataclass

from ..errors import ConfigError, HarnessError

DEFAULT_REPO = "agent-harness-sandbox"
HOST_USR = "agent-harness.host-usr"  # image label: bind the host's /usr read-only, as bubblewrap does
DOCKER_TIMEOUT_S = 120.0
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# A docker image reference (registry host, path, tag, digest) or an image id; never starts with '-'.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?/)?"
_REFERENCE = re.compile(_HOST + _COMPONENT + rf"(?:/{_COMPONENT})*" + r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                        r"(?:@sha256:[0-9a-f]{64})?")
_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")


@dataclass(frozen=True)
class Image:
    """An image on this machine: the name it was asked by, its id, and whether it runs on the host's /usr."""

    name: str
    id: str
    host_usr: bool


_lock = threading.Lock()
_problem: list[str | None] = []  # the probe's answer, once made
_images: dict[str, Image] = {}


def docker_cli() -> str | None:
    return shutil.which("docker")


def docker(args: list[str], *, stdin: bytes | None = None, timeout: float = DOCKER_TIMEOUT_S,
           check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run the docker client; HarnessError (one line: docker's own message) when it fails and `check`."""
    cli = docker_cli()
    if cli is None:
        raise HarnessError("docker is not installed (apt-get install docker.io)")
    try:
        r = subprocess.run([cli, *args], input=stdin, capture_output=True, timeout=timeout,
                           stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"docker {args[0]} did not answer within {timeout:g}s") from None
    if check and r.returncode != 0:
        raise HarnessError(f"docker {args[0]} failed: {last_line(r.stderr) or f'exit code {r.returncode}'}")
    return r


def last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _probe() -> str | None:
    if docker_cli() is None:
        return "docker is not installed (apt-get install docker.io)"
    try:
        r = docker(["version", "--format", "{{.Server.Version}}"], timeout=30, check=False)
    except HarnessError as e:
        return str(e)
    if r.returncode == 0:
        return None
    why = last_line(r.stderr)
    if "permission denied" in why.lower():
        return f"no permission to use the Docker daemon (run as root or join the docker group): {why}"
    if "cannot connect" in why.lower() or "is the docker daemon running" in why.lower():
        return f"the Docker daemon is not running (start dockerd; `make setup` does as root): {why}"
    return f"the Docker daemon does not answer: {why or f'exit code {r.returncode}'}"


def docker_problem() -> str | None:
    """Why Docker cannot run containers here (None when it can); probed once per process."""
    with _lock:
        if _problem:
            return _problem[0]
    found = _probe()
    with _lock:
        if not _problem:
            _problem.append(found)
        return _problem[0]


def check_image_name(name: str, where: str = "image") -> str:
    """`name` when it is a plain image reference or id; else ConfigError (it goes on docker's command line)."""
    if not isinstance(name, str) or len(name) > 255 or not (_REFERENCE.fullmatch(name) or _IMAGE_ID.fullmatch(name)):
        raise ConfigError(f"{where}: {str(name)[:80]!r} is not an image name (like python:3.11-slim) or image id")
    return name


# --------------------------------------------------------------------------------------------
# The default image


def _skeleton() -> list[tuple[str, str, str | bytes, int]]:
    """(path, kind, link target or content, mode) of the default image's root file system."""
    from .bwrap import ETC_FILES

    entries: list[tuple[str, str, str | bytes, int]] = [
        ("etc", "dir", "", 0o755), ("tmp", "dir", "", 0o1777), ("workspace", "dir", "", 0o755),
        ("usr", "dir", "", 0o755), ("proc", "dir", "", 0o555), ("sys", "dir", "", 0o555), ("dev", "dir", "", 0o755)]
    for name in ROOT_LINKS:  # as the host has them: links into /usr, or folders bound at run time
        host = f"/{name}"
        if os.path.islink(host):
            entries.append((name, "link", os.readlink(host), 0o777))
        elif os.path.isdir(host):
            entries.append((name, "dir", "", 0o755))
    for name, text in sorted(ETC_FILES.items()):
        entries.append((f"etc/{name}", "file", text.encode("utf-8"), 0o644))
    return entries


def _skeleton_tar(entries: list[tuple[str, str, str | bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, kind, data, mode in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid, info.gid = mode, 946684800, 0, 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
                tar.addfile(info)
            else:
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def default_image_name() -> str:
    digest = hashlib.sha256(json.dumps(_skeleton(), default=lambda b: b.decode()).encode()).hexdigest()
    return f"{DEFAULT_REPO}:host-usr-{digest[:12]}"


def build_default_image() -> Image:
    """Build the default image from the skeleton (no network); a no-op when it exists."""
    name = default_image_name()
    if docker(["image", "inspect", "--format", "{{.Id}}", name], check=False).returncode != 0:
        docker(["import", "--change", f"LABEL {HOST_USR}=1", "--change", "ENV PATH=/usr/bin:/bin",
                "--change", "WORKDIR /workspace", "-", name], stdin=_skeleton_tar(_skeleton()))
    return _inspect(name)


# --------------------------------------------------------------------------------------------
# Images by name


def _inspect(name: str) -> Image:
    r = docker(["image", "inspect", "--format", "{{json .}}", name], check=False)
    if r.returncode != 0:
        raise ConfigError(f"image {name!r} is not on this machine (images are never pulled: build or load it, "
                          f"e.g. `docker load` or `docker build`): {last_line(r.stderr)}")
    try:
        info = json.loads(r.stdout)
        config = info.get("Config") or {}
        image_id = str(info["Id"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise HarnessError(f"docker image inspect {name!r}: unreadable answer") from None
    if config.get("Volumes"):
        shown = ", ".join(sorted(config["Volumes"]))[:200]
        raise ConfigError(f"image {name!r} declares volumes ({shown}): Docker would mount writable folders there; "
                          "the sandbox allows only the workspace")
    labels = config.get("Labels") or {}
    return Image(name=name, id=image_id, host_usr=labels.get(HOST_USR) == "1")


def resolve_image(name: str | None = None) -> Image:
    """The image `name` (default: the default image, built when missing), checked and cached per process."""
    key = check_image_name(name) if name else ""
    with _lock:
        if key in _images:
            return _images[key]
    image = _inspect(name) if name else build_default_image()
    with _lock:
        return _images.setdefault(key, image)


def main(argv: list[str]) -> int:
    """``python -m agent_harness.sandbox.docker_image build|name``: build the default image, or print its name."""
    if argv[:1] == ["name"]:
        print(default_image_name())
        return 0
    if argv[:1] != ["build"]:
        print("usage: python -m agent_harness.sandbox.docker_image build|name", file=sys.stderr)
        return 2
    problem = docker_problem()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    image = build_default_image()
    print(f"{image.name} {image.id}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
