"""Escape suite: every attempt is refused or contained, and the harness keeps working after it.

Real workspaces, real subprocesses, every sandbox: bubblewrap, Docker (the workspace's commands in
its episode container, `run_sandboxed` in a container of its own) and the rlimit fallback; the
bwrap and docker cases skip, naming what is missing, where that sandbox cannot run here. What the
rlimit fallback cannot contain is skipped with the reason, never faked.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent_harness.errors import HarnessError, ToolError
from agent_harness.sandbox import (
    SANDBOX_UID,
    Limits,
    bwrap_problem,
    detect_sandbox,
    run_sandboxed,
    switches_uid,
)
from agent_harness.sandbox.docker_image import docker_problem
from agent_harness.sandbox.workspace import Workspace
from agent_harness.tools import ToolOptions, execute

REPO = Path(__file__).resolve().parent.parent
FILES = {"a.py": "print('hello')\n", "pkg/b.txt": "b\n"}
FAST = Limits(cpu_s=3, wall_s=5.0, mem_bytes=512 << 20, nproc=32, fsize_bytes=1 << 20, output_bytes=64 << 10,
              tmp_bytes=16 << 20)
OPTS = ToolOptions()
MODES = ["bwrap", "docker", "rlimit"]
ISOLATED = ("bwrap", "docker")  # hide the host and block the network


def problem(mode: str) -> str | None:
    """Why sandbox `mode` cannot run here, naming what is missing (None: it can)."""
    if mode == "bwrap":
        return f"bubblewrap does not work here: {bwrap_problem()}" if bwrap_problem() else None
    if mode == "docker":
        return f"Docker cannot be used here: {docker_problem()}" if docker_problem() else None
    return None


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    why = problem(request.param)
    if why:
        pytest.skip(why)
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", request.param)
    return request.param


@pytest.fixture
def ws(mode: str) -> Iterator[Workspace]:
    w = Workspace.create(FILES, test_cmd=["python3", "a.py"], limits=FAST)
    assert w.sandbox == mode
    yield w
    w.cleanup()


def run(ws: Workspace, cmd: str | list[str]) -> str:
    return execute(ws, "run_cmd", {"cmd": cmd}, OPTS)


def alive(ws: Workspace) -> None:
    """The harness still runs commands, reads files and diffs after the attempt."""
    assert run(ws, "echo alive") == "exit code: 0\nstdout:\nalive"
    assert execute(ws, "read_file", {"path": "a.py"}, OPTS).startswith("print('hello')\n")
    assert isinstance(ws.diff(), str)


def marker() -> str:
    """A number no other process on the machine has in its command line."""
    return str(100000 + secrets.randbelow(800000))


def procs_with(text: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline.split(b"\0"):
                found.append(int(entry.name))
    return found


# ----------------------------------------------------------------------------------------
# Detection


def test_detection_and_forcing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "rlimit")
    assert detect_sandbox() == "rlimit"
    monkeypatch.delenv("AGENT_HARNESS_SANDBOX")
    assert detect_sandbox() == ("bwrap" if bwrap_problem() is None else "rlimit")
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "lxc")
    with pytest.raises(HarnessError, match="bwrap, docker, rlimit or auto"):
        detect_sandbox()
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "docker")
    if docker_problem() is None:
        assert detect_sandbox() == "docker"
    else:
        with pytest.raises(HarnessError, match="Docker cannot be used here"):
            detect_sandbox()


# ----------------------------------------------------------------------------------------
# File tools: paths


OUTSIDE = ["../outside.txt", "../../etc/passwd", "pkg/../../x", "/etc/passwd", "/root", "/tmp/x",
           str(REPO / "pyproject.toml"), "/workspace/../etc/passwd", "/work"]


@pytest.mark.parametrize("tool", ["read_file", "write_file", "list_dir", "grep"])
def test_paths_outside_are_refused(ws: Workspace, tool: str) -> None:
    for path in OUTSIDE:
        args = {"read_file": {"path": path}, "write_file": {"path": path, "content": "pwned"},
                "list_dir": {"path": path}, "grep": {"pattern": "root", "path": path}}[tool]
        with pytest.raises(ToolError, match="outside the workspace|absolute path"):
            execute(ws, tool, args, OPTS)
    assert not Path(ws.root.parent, "outside.txt").exists() and not Path("/tmp/x").exists()
    alive(ws)


def test_workspace_prefix_is_inside(ws: Workspace) -> None:
    """Tracebacks show /workspace/...; the model may copy that path, and it means the workspace."""
    assert execute(ws, "read_file", {"path": "/workspace/a.py"}, OPTS) == "print('hello')\n"


@pytest.mark.parametrize("target", ["/etc", "/", "/root", "/work"])
def test_symlink_out_then_file_tools(ws: Workspace, target: str) -> None:
    out = run(ws, f"ln -s {target} link && ln -s {target}/passwd flink && echo made")
    assert "made" in out
    attempts = [("read_file", {"path": "flink"}), ("read_file", {"path": "link/passwd"}),
                ("write_file", {"path": "link/pwned", "content": "x"}),
                ("write_file", {"path": "flink", "content": "x"}),
                ("list_dir", {"path": "link"}), ("grep", {"pattern": "root", "path": "link"})]
    for tool, args in attempts:
        with pytest.raises(ToolError, match="outside the workspace"):
            execute(ws, tool, args, OPTS)
    assert not Path(target, "pwned").exists()
    listing = execute(ws, "list_dir", {}, OPTS)
    assert f"link -> {target}" in listing  # shown, never followed
    assert execute(ws, "grep", {"pattern": "root:"}, OPTS) == "No matches for 'root:'."
    alive(ws)


def test_git_internals_are_off_limits(ws: Workspace) -> None:
    hook = "#!/bin/sh\ntouch /tmp/x\n"
    for tool, args in [("write_file", {"path": ".git/hooks/pre-commit", "content": hook}),
                       ("write_file", {"path": ".git/config", "content": "[core]\n"}),
                       ("read_file", {"path": ".git/config"}), ("list_dir", {"path": ".git"}),
                       ("grep", {"pattern": "core", "path": ".git"}),
                       ("write_file", {"path": "./pkg/../.git/hooks/post-checkout", "content": "x"})]:
        with pytest.raises(ToolError, match=r"\.git"):
            execute(ws, tool, args, OPTS)
    run(ws, "ln -s .git g && ln -s .git/hooks h")
    for path in ("g/config", "h/pre-commit"):
        with pytest.raises(ToolError, match=r"\.git"):
            execute(ws, "write_file", {"path": path, "content": "x"}, OPTS)
    assert not (ws.root / ".git" / "hooks" / "pre-commit").exists()
    assert not [line for line in execute(ws, "list_dir", {}, OPTS).splitlines() if line.startswith(".git")]
    alive(ws)


def test_hard_link_is_not_written_through(ws: Workspace) -> None:
    run(ws, "ln a.py twin.py")
    execute(ws, "write_file", {"path": "twin.py", "content": "changed\n"}, OPTS)
    assert (ws.root / "a.py").read_text() == "print('hello')\n"
    assert (ws.root / "twin.py").read_text() == "changed\n"
    alive(ws)


def test_fifo_does_not_hang_the_harness(ws: Workspace) -> None:
    run(ws, "mkfifo pipe")
    start = time.monotonic()
    with pytest.raises(ToolError, match="not a regular file"):
        execute(ws, "read_file", {"path": "pipe"}, OPTS)
    execute(ws, "write_file", {"path": "pipe", "content": "x\n"}, OPTS)  # replaces the fifo
    assert "pipe" in ws.changed_files()
    assert time.monotonic() - start < 5
    alive(ws)


# ----------------------------------------------------------------------------------------
# Commands: what the sandbox hides


def test_writing_outside_via_commands_fails(ws: Workspace, mode: str) -> None:
    outside = Path(tempfile.mkdtemp(prefix="agent-harness-outside-"))
    try:
        target = outside / "pwned"
        run(ws, f"echo x > {target}; echo x > {REPO / 'PWNED'}; echo x > /usr/PWNED; echo x > /etc/PWNED")
        assert not target.exists() and not (REPO / "PWNED").exists()
        assert not Path("/usr/PWNED").exists() and not Path("/etc/PWNED").exists()
    finally:
        for p in outside.iterdir():
            p.unlink()
        outside.rmdir()
    alive(ws)


def test_world_writable_host_folders_are_out_of_reach(ws: Workspace, mode: str) -> None:
    if mode == "rlimit":
        pytest.skip("the rlimit fallback cannot stop writes to world-writable host folders such as /tmp")
    name = f"pwned-{secrets.token_hex(6)}"
    run(ws, f"cp a.py ../{name}; cp a.py /tmp/{name}; cp a.py /dev/shm/{name}; cp a.py /var/tmp/{name}")
    for folder in (ws.root.parent, Path(tempfile.gettempdir()), Path("/dev/shm"), Path("/var/tmp")):
        assert not (folder / name).exists(), folder
    alive(ws)


def test_root_home_is_unreadable(ws: Workspace) -> None:
    out = run(ws, "ls -a /root; cat /root/.bashrc /root/.profile")
    assert "exit code: 0" not in out
    assert ".bashrc" not in out.split("stderr:")[0]
    alive(ws)


def test_harness_files_are_invisible(ws: Workspace, mode: str) -> None:
    if mode == "rlimit":
        pytest.skip("the rlimit fallback cannot hide world-readable host files such as the repo")
    out = run(ws, f"cat {REPO / 'pyproject.toml'}; ls /work {REPO}; ls /; ls /usr/local")
    # the error lines name the paths asked for; a checkout whose path says "agent-harness" is no leak
    assert f"{REPO}: No such file or directory" in out.replace("'", "")
    assert "agent-harness" not in out.replace(str(REPO), "<repo>") and "[project]" not in out
    shown = out.split("stdout:")[1].split("stderr:")[0].split()
    assert "work" not in shown and "root" not in shown and "home" not in shown
    alive(ws)


def test_environment_secrets_do_not_leak(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cr3t-{secrets.token_hex(8)}"
    monkeypatch.setenv("AGENT_HARNESS_TEST_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    out = run(ws, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/1/environ")
    assert secret not in out
    env_names = {line.split("=", 1)[0] for line in out.split("stdout:")[1].splitlines() if "=" in line}
    assert "OPENAI_API_KEY" not in env_names and "VIRTUAL_ENV" not in env_names
    assert "PATH=/usr/bin:/bin" in out
    alive(ws)


def test_no_root_and_no_new_privileges(ws: Workspace) -> None:
    res = ws.run(["sh", "-c", "id -u; grep NoNewPrivs /proc/self/status"])
    uid, nnp = res.stdout.splitlines()
    if switches_uid():
        assert uid != "0"
    assert nnp.split() == ["NoNewPrivs:", "1"]
    alive(ws)


def test_network_is_unreachable(ws: Workspace, mode: str) -> None:
    if mode == "rlimit":
        pytest.skip("the rlimit fallback cannot block the network (no network namespace)")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        code = ("import socket\n"
                f"for host, port in [('127.0.0.1', {port}), ('1.1.1.1', 53)]:\n"
                "    try:\n"
                "        socket.create_connection((host, port), timeout=2).close()\n"
                "        print('CONNECTED', host)\n"
                "    except OSError as e:\n"
                "        print('refused', host, e)\n")
        out = run(ws, ["python3", "-c", code])
        assert "CONNECTED" not in out
        refused = [line.split()[1] for line in out.splitlines() if line.startswith("refused ")]
        assert refused == ["127.0.0.1", "1.1.1.1"]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    alive(ws)


# ----------------------------------------------------------------------------------------
# Commands: resource limits


def test_process_limit_is_enforced_bounded(ws: Workspace, mode: str) -> None:
    """Before any fork bomb: a bounded spawn of 200 sleepers stops at the process limit."""
    if mode == "rlimit" and not switches_uid():
        pytest.skip("without root the fallback's RLIMIT_NPROC counts all of this user's processes")
    tag = marker()
    code = ("import subprocess\nok = 0\n"
            "for _ in range(200):\n"
            "    try:\n"
            f"        subprocess.Popen(['sleep', '{tag}']); ok += 1\n"
            "    except OSError:\n"
            "        break\n"
            "print('spawned', ok)\n")
    out = run(ws, ["python3", "-c", code])
    spawned = int(out.split("spawned ")[1].split()[0])
    assert 0 < spawned < FAST.nproc
    assert procs_with(tag) == []  # and they all died with the command
    alive(ws)


def test_fork_bomb_is_contained(ws: Workspace, mode: str) -> None:
    if mode == "rlimit" and not switches_uid():
        pytest.skip("without root the fallback's RLIMIT_NPROC counts all of this user's processes")
    script = f"bomb_{marker()}.sh"  # every copy of the bomb has it in its command line
    execute(ws, "write_file", {"path": script, "content": "b(){ b|b& }; b; sleep 30\n"}, OPTS)
    res = ws.run(["sh", script], timeout=1.0)
    # Killed at the time limit, or for flooding the output with errors, or its own `sleep` could
    # not fork: every way ends with all copies killed.
    assert res.killed_reason in ("timeout", "output") or res.returncode != 0
    assert "Cannot fork" in res.stderr  # it did hit the process limit
    assert res.duration_s < 10
    time.sleep(0.2)
    assert procs_with(script) == []
    alive(ws)


def test_memory_hog_fails(ws: Workspace) -> None:
    out = run(ws, ["python3", "-c", "x = bytearray(2 << 30); print('GOT', len(x))"])
    assert "GOT" not in out and "MemoryError" in out
    alive(ws)


def test_infinite_loop_hits_cpu_limit(ws: Workspace, mode: str) -> None:
    res = run_sandboxed(["python3", "-c", "while True: pass"], ws.root, replace(FAST, cpu_s=1, wall_s=20),
                        sandbox=mode)
    assert res.timed_out and res.killed_reason == "cpu" and res.returncode == 152
    assert res.duration_s < 15
    alive(ws)


def test_sleep_hits_wall_timeout(ws: Workspace) -> None:
    with Workspace.create(FILES, limits=replace(FAST, wall_s=1.0)) as short:
        start = time.monotonic()
        res = short.run(["sleep", "1000"])
        assert res.timed_out and res.killed_reason == "timeout" and res.returncode == 137
        assert time.monotonic() - start < 4
        obs = run(short, "sleep 1000")  # the shell may report the kill of its child before its own
        assert obs in ("exit code: 137 (killed: it ran longer than 1 seconds)\n(no output)",
                       "exit code: 137 (killed: it ran longer than 1 seconds)\nstderr:\nKilled")
    alive(ws)


def test_flood_of_output_is_cut(ws: Workspace) -> None:
    start = time.monotonic()
    res = ws.run(["sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' x"])
    assert res.killed_reason == "output" and not res.ok
    assert len(res.stdout) + len(res.stderr) <= FAST.output_bytes
    assert time.monotonic() - start < 5
    obs = run(ws, "yes")
    assert "killed: it printed more than" in obs and "characters" in obs and "cut ..." in obs
    assert len(obs) < OPTS.max_output_chars + 500
    alive(ws)


def test_huge_file_hits_size_limit(ws: Workspace) -> None:
    res = ws.run(["sh", "-c", "head -c 10000000 /dev/zero > big"])
    assert res.killed_reason == "fsize" and not res.ok
    assert (ws.root / "big").stat().st_size <= FAST.fsize_bytes
    out = run(ws, ["python3", "-c", "open('big2', 'wb').write(b'x' * 5_000_000)"])
    assert "File too large" in out
    alive(ws)


def test_killing_everything_spares_the_harness(ws: Workspace, mode: str) -> None:
    if mode == "rlimit" and not switches_uid():
        pytest.skip("without root the fallback runs as this user: kill -9 -1 would hit the harness")
    out = run(ws, "kill -9 -1; kill -9 $PPID; kill -9 1; echo survived")
    assert "survived" in out
    alive(ws)


def test_killing_the_parent_fails(ws: Workspace) -> None:
    out = run(ws, f"kill -9 $PPID {os.getpid()} 2>&1; echo still here")
    assert "still here" in out
    alive(ws)


@pytest.mark.parametrize("how", ["sleep {tag} &", "setsid sleep {tag} &",
                                 "nohup sleep {tag} >/dev/null 2>&1 &", "(sleep {tag} &) ; sleep 0.1"])
def test_background_processes_die_with_the_command(ws: Workspace, mode: str, how: str) -> None:
    if mode == "rlimit" and not switches_uid():
        pytest.skip("without root the fallback has no per-command uid to find setsid'd leftovers by")
    tag = marker()
    out = run(ws, how.format(tag=tag) + " echo started")
    assert "started" in out
    assert procs_with(tag) == []
    alive(ws)


# ----------------------------------------------------------------------------------------
# git: attacker-controlled .git never runs on the host


def _poison_git(ws: Workspace, pwned: Path) -> None:
    config = (
        "[core]\n"
        f"\tfsmonitor = touch {pwned}-fsmonitor\n"
        f"\thooksPath = /tmp\n"
        f"\tpager = touch {pwned}-pager\n"
        "[diff]\n"
        f"\texternal = touch {pwned}-external\n"
        '[diff "evil"]\n'
        f"\ttextconv = touch {pwned}-textconv\n"
        '[filter "evil"]\n'
        f"\tclean = touch {pwned}-clean\n"
        f"\tsmudge = touch {pwned}-smudge\n"
        "[include]\n"
        "\tpath = /root/.gitconfig\n"
    )
    script = (f"cat >> .git/config <<'EOF'\n{config}EOF\n"
              "printf '* diff=evil filter=evil\\n' > .gitattributes\n"
              "echo changed >> a.py\n"
              f"printf '#!/bin/sh\\ntouch {pwned}-hook\\n' > .git/hooks/pre-commit\n"
              "chmod +x .git/hooks/pre-commit\n")
    run(ws, script)


def test_git_config_injection_never_runs_on_host(ws: Workspace, mode: str) -> None:
    pwned = Path(tempfile.gettempdir()) / f"PWNED-{secrets.token_hex(6)}"
    _poison_git(ws, pwned)
    diff = ws.diff()
    assert "+changed" in diff and ".gitattributes" in diff
    assert set(ws.changed_files()) == {".gitattributes", "a.py"}
    assert "+changed" in execute(ws, "git_diff", {}, OPTS)
    leftovers = list(pwned.parent.glob(pwned.name + "*"))
    assert leftovers == [], leftovers
    if mode in ISOLATED:  # git itself, run by the agent or a scorer, only touches the sandbox's /tmp
        ws.run(["git", "status"])
        ws.run(["git", "diff"])
        ws.run(["git", "commit", "-qam", "x"])
        assert list(pwned.parent.glob(pwned.name + "*")) == []
    alive(ws)


def test_deleted_git_still_diffs(ws: Workspace) -> None:
    run(ws, "rm -rf .git && echo new > new.txt && rm pkg/b.txt")
    assert not (ws.root / ".git").exists()
    assert ws.changed_files() == ["new.txt", "pkg/b.txt"]
    diff = ws.diff()
    assert "new file mode 100644" in diff and "deleted file mode 100644" in diff
    assert "+new" in execute(ws, "git_diff", {}, OPTS)
    alive(ws)


def test_git_works_inside(ws: Workspace) -> None:
    head = ws.run(["git", "rev-list", "--max-parents=0", "HEAD"])
    assert head.ok, head.stderr
    again = Workspace.create(FILES, limits=FAST)
    try:
        assert again.run(["git", "rev-parse", "HEAD"]).stdout == ws.run(["git", "rev-parse", "HEAD"]).stdout
    finally:
        again.cleanup()
    out = run(ws, "echo x >> a.py && git commit -qam edit && git log --oneline | wc -l")
    assert "exit code: 0" in out and "2" in out


# ----------------------------------------------------------------------------------------
# run_sandboxed directly


def test_run_sandboxed_reports_instead_of_raising(mode: str) -> None:
    d = Path(tempfile.mkdtemp(prefix="agent-harness-t-"))
    try:
        missing = run_sandboxed(["no-such-program-xyz"], d, FAST)
        assert missing.returncode == 127 and "no-such-program-xyz" in missing.stderr
        assert missing.sandbox == mode
        res = run_sandboxed(["sh", "-c", "pwd; echo $HOME $TMPDIR; echo x > f; exit 3"], d, FAST)
        assert res.returncode == 3 and res.stdout.split() == ["/workspace", "/tmp", "/tmp"]
        assert (d / "f").read_text() == "x\n"
        if switches_uid():  # written as the unprivileged sandbox uid, not as root
            assert (d / "f").stat().st_uid == (SANDBOX_UID if mode in ISOLATED else d.stat().st_uid) != 0
        with pytest.raises(ValueError):
            run_sandboxed([], d, FAST)
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_unreachable_folder_is_a_harness_fault(tmp_path: Path) -> None:
    """pytest's tmp_path sits under a 0700 folder the sandbox uid cannot pass: a clear error, not a result."""
    if bwrap_problem() is not None or not switches_uid():
        pytest.skip("only bwrap run as root binds the folder as the sandbox uid")
    if (tmp_path.parent.parent.stat().st_mode & 0o001) != 0:
        pytest.skip("tmp_path is reachable here")
    with pytest.raises(HarnessError, match="not reachable"):
        run_sandboxed(["true"], tmp_path, FAST, sandbox="bwrap")
