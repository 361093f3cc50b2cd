"""The Docker sandbox (issue 48): the bounds and promises of bubblewrap (the escape suite,
tests/test_sandbox.py, runs under it too), no container left on any exit path, the verifier in a
container of its own that the code under test cannot reach, per-task images, and oracle 1.0 / null
0.0 through the CLI. Every test here skips, naming what is missing, where Docker cannot run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_harness.errors import ConfigError, HarnessError
from agent_harness.sandbox import Limits, SandboxSpec, choose_sandbox, hand_over, run_sandboxed
from agent_harness.sandbox.docker_image import (
    _skeleton,
    _skeleton_tar,
    check_image_name,
    docker,
    docker_problem,
    resolve_image,
)
from agent_harness.sandbox.tempdirs import owner_tag
from agent_harness.sandbox.workspace import Workspace

psutil = pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parent.parent
FAST = Limits(cpu_s=3, wall_s=10.0, mem_bytes=512 << 20, nproc=32, fsize_bytes=1 << 20, output_bytes=64 << 10,
              tmp_bytes=16 << 20)
TEST_IMAGE = "agent-harness-test-image:issue48"


def containers(pid: int | None = None) -> list[str]:
    """Names of the harness's containers whose owner is process `pid` (default: this one)."""
    r = docker(["ps", "-a", "--filter", "label=agent-harness.owner", "--format",
                '{{.Names}}\t{{.Label "agent-harness.owner"}}'])
    mine = owner_tag() if pid is None else None
    found = []
    for line in r.stdout.decode().splitlines():
        name, _, owner = line.partition("\t")
        if owner == mine or (pid is not None and owner.split(".")[1:2] == [str(pid)]):
            found.append(name)
    return found


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Every test leaves no container of this process behind."""
    yield
    if docker_problem() is None:
        assert containers() == []


@pytest.fixture
def docker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    if docker_problem() is not None:
        pytest.skip(f"Docker cannot be used here: {docker_problem()}")
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "docker")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def traces(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.rglob("run_*.json"))]


def scripted(tmp_path: Path, replies: list[str], name: str = "scripted") -> Path:
    script = tmp_path / f"{name}.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump({"default": name, "models": [{"name": name, "backend": "scripted",
                                                                 "script": str(script)}]}))
    return reg


def run_cmd(cmd: str) -> str:
    return "THOUGHT: run\nTOOL_CALL: " + json.dumps({"tool": "run_cmd", "args": {"cmd": cmd}})


# ----------------------------------------------------------------------------------------
# An episode's container


def test_one_container_per_episode_that_each_command_finds_as_bubblewrap_leaves_it(docker_env: None) -> None:
    """Commands share one container; each finds /tmp empty and no process of the one before; killing
    everything it can (the init included) ends only the command; closing removes the container."""
    with Workspace.create({"a.py": "print('hi')\n"}, limits=FAST) as ws:
        assert ws.sandbox == "docker" and ws.spec.image is not None
        first = ws.run(["sh", "-c", "echo x > /tmp/f; echo y > /dev/shm/g; sleep 1000 & echo started"])
        assert first.ok and first.stdout == "started\n", first
        [name] = containers()
        again = ws.run(["sh", "-c", "ls -A /tmp /dev/shm; ps -e -o args="])
        assert again.ok and "f" not in again.stdout.split() and "g" not in again.stdout.split(), again
        assert "sleep 1000" not in again.stdout and "sleep 86400" in again.stdout, again  # only the init's
        assert ws.run(["sh", "-c", "kill -9 -1; kill -9 1; echo survived"]).stdout == "survived\n"
        assert ws.run(["id", "-u"]).stdout.strip() not in ("0", "")
        assert containers() == [name]  # still the episode's one container
    assert containers() == []


def test_show_values_runs_its_script_in_the_container(docker_env: None) -> None:
    """--show-values' script runs with the image's Python: the failing assert's values come back."""
    from agent_harness.tools import ToolOptions, run_tool

    files = {"m.py": "def f(x):\n    return x + 1\n", "test_m.py": "from m import f\nassert f(1) == 3\n"}
    with Workspace.create(files, test_cmd=["python3", "test_m.py"], limits=FAST) as ws:
        assert ws.sandbox == "docker"
        result = run_tool(ws, "run_tests", {}, ToolOptions(show_values=True))
    assert result.tests_passed is False and result.values == ("f(1) = 2",), result.text


def test_a_container_removed_from_outside_is_replaced(docker_env: None) -> None:
    with Workspace.create({"a.py": ""}, limits=FAST) as ws:
        assert ws.run(["true"]).ok
        [name] = containers()
        docker(["rm", "-f", name])
        res = ws.run(["sh", "-c", "echo back"])
        assert res.stdout == "back\n", res
        assert containers() not in ([], [name])


MEMORY = ("import os\n"
          "pids = []\n"
          "for i in range(4):\n"
          "    pid = os.fork()\n"
          "    if pid == 0:\n"
          "        b = bytearray(100 << 20)\n"
          "        b[::4096] = b'x' * len(b[::4096])\n"
          "        __import__('time').sleep(1)\n"
          "        os._exit(0)\n"
          "    pids.append(pid)\n"
          "print('killed', sum(1 for p in pids if os.waitpid(p, 0)[1] != 0))\n")


@pytest.mark.parametrize("how", ["episode", "once"])
def test_memory_of_all_processes_together_is_bounded(docker_env: None, how: str) -> None:
    """Four processes of 100 MiB do not fit in a container of 256 MiB; one does."""
    limits = Limits(mem_total_bytes=256 << 20)
    with Workspace.create({"m.py": MEMORY}, limits=limits) as ws:
        def run(code: str) -> Any:
            cmd = ["python3", "-c", code]
            return ws.run(cmd) if how == "episode" else run_sandboxed(cmd, ws.root, limits, sandbox=ws.spec)
        alone = run(MEMORY.replace("range(4)", "range(1)"))
        assert alone.stdout.split() == ["killed", "0"], alone
        res = run(MEMORY)
        assert res.killed_reason == "memory" and int(res.stdout.split()[-1]) >= 1, res


# ----------------------------------------------------------------------------------------
# The verifier's container, and descriptors carried into a container


def fd_target(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_descriptors_reach_the_command_only(docker_env: None) -> None:
    """A file to read comes in on the container's stdin and a report pipe goes out on its stdout, at the
    numbers the command was given; its own stdout goes to stderr; neither its child nor the container's
    pid 1 holds a copy of either stream."""
    spec_fd = os.memfd_create("spec")
    os.write(spec_fd, b"the secret spec")
    os.lseek(spec_fd, 0, os.SEEK_SET)
    r, w = os.pipe()
    d = Path(tempfile.mkdtemp(prefix="agent-harness-t-"))
    code = f"""import os, subprocess, sys
spec = os.read({spec_fd}, 100)
streams = {{os.readlink('/proc/self/fd/{spec_fd}'), os.readlink('/proc/self/fd/{w}')}}
os.close({spec_fd})
child = subprocess.run(['sh', '-c', 'for f in /proc/self/fd/* /proc/1/fd/*; do readlink $f; done'],
                       capture_output=True, text=True).stdout.split()
print('LEAKED', sorted(streams & set(child)), file=sys.stderr)
print('printed on stdout')
os.write({w}, b'REPORT ' + spec)
"""
    try:
        os.chmod(d, 0o755)
        res = run_sandboxed(["python3", "-c", code], d, FAST, pass_fds=(w, spec_fd))
    finally:
        os.close(w)
        os.close(spec_fd)
        d.rmdir()
    got = os.read(r, 4096)
    os.close(r)
    assert res.ok and got == b"REPORT the secret spec", (res, got)
    assert res.stdout == "" and "printed on stdout" in res.stderr and "LEAKED []" in res.stderr, res


def test_the_agents_container_is_gone_before_the_tests_run_in_their_own(docker_env: None) -> None:
    with Workspace.create({"a.py": "x = 1\n"}, limits=FAST) as ws:
        assert ws.run(["sh", "-c", "echo planted > planted.txt"]).ok
        [agent] = containers()
        res = ws.run_on_copy(["sh", "-c", "ls -A; tr '\\0' ' ' < /proc/1/cmdline"], {"hidden_test.py": "t = 1\n"})
        assert res.ok, res
        shown = res.stdout.split()
        assert {"a.py", "planted.txt", "hidden_test.py"} <= set(shown) and ".git" not in shown
        assert "/.agent-harness-init" not in res.stdout  # pid 1 is the fresh container's, not the agent's init
        assert agent not in containers()


# The forgery and scan tests of the hidden-test scorer and the unittest runner, under Docker.
import test_forgery as forgery  # noqa: E402
import test_scoring_values as values  # noqa: E402


def test_the_checkers_material_is_out_of_reach_under_docker(docker_env: None) -> None:
    values.test_the_checkers_material_is_out_of_reach()


def test_the_checker_is_out_of_reach_of_the_module_under_docker(docker_env: None) -> None:
    forgery.test_checker_is_out_of_reach_of_the_module()


@pytest.mark.parametrize("name", ["exit-early", "forged-reply", "always-equal", "skip-test"])
def test_forgeries_fail_as_suspicious_under_docker(docker_env: None, name: str) -> None:
    tasks = values.value_tasks()[:6]
    for t in tasks:
        r = values.score(t, values.forged(t, name))
        assert not r.passed and values.REASONS[name] in (r.details.get("suspicious") or ""), (t.id, r.output)


@pytest.mark.slow
def test_humanevalfix_forgeries_through_the_cli_under_docker(docker_env: None, tmp_path: Path) -> None:
    forgery.test_humanevalfix_forgeries_fail_as_suspicious(tmp_path, "react")


def test_repo_bugfix_forgeries_through_the_cli_under_docker(docker_env: None, tmp_path: Path) -> None:
    forgery.test_repo_bugfix_forgeries_fail_as_suspicious(tmp_path)


@pytest.mark.parametrize("name", list(forgery.RUNS))
def test_unittest_runs_under_docker(docker_env: None, tmp_path: Path, name: str) -> None:
    forgery.test_unittest_runs_pass_only_when_every_test_ran_and_passed(tmp_path, name)


# ----------------------------------------------------------------------------------------
# Through the CLI: oracle and null, a scenario's own image, and no container left on any exit path


def test_oracle_and_null_under_docker(docker_env: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle,null", "--sandbox",
                             "docker", "--n", "3", "--agent", "react", "--out", str(out), "--no-embed",
                             "--no-progress"], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                              "AGENT_HARNESS_SANDBOX": ""},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix"]["pass@1"] == 0.0
    default = resolve_image()
    for t in traces(out):
        assert t["sandbox"] == "docker" and t["sandbox_bounds"]["image_id"] == default.id
        assert t["outcome"]["score_details"]["sandbox"] == "docker"
        assert t["outcome"]["score_details"]["checker_private"] is True
    assert containers(proc.pid) == []  # the normal end


@pytest.fixture
def test_image(docker_env: None) -> str:
    """An image of the default kind with a file only it holds (/opt/task-data/expected.txt)."""
    entries = [*_skeleton(), ("opt", "dir", "", 0o755), ("opt/task-data", "dir", "", 0o755),
               ("opt/task-data/expected.txt", "file", b"42\n", 0o644)]
    docker(["import", "--change", "LABEL agent-harness.host-usr=1", "--change", "ENV PATH=/usr/bin:/bin", "-",
            TEST_IMAGE], stdin=_skeleton_tar(entries))
    return TEST_IMAGE


HIDDEN = ("import unittest\nimport answer\n\n\nclass T(unittest.TestCase):\n    def test(self):\n"
          "        with open('/opt/task-data/expected.txt') as f:\n"
          "            self.assertEqual(answer.value(), int(f.read()))\n")
FIXED = "def value():\n    return int(open('/opt/task-data/expected.txt').read())\n"


def scenario(image: str) -> dict[str, Any]:
    """A YAML scenario whose tests need a file of its image."""
    return {
        "description": "a task whose tests need a file of its image", "image": image, "labels": {"gold": {}},
        "defaults": {"test_cmd": ["python3", "-m", "unittest", "discover", "-s", "tests"]},
        "score": {"pass": [{"kind": "tests_pass", "hidden_files": {"tests/test_hidden.py": HIDDEN}}]},
        "tasks": [{"id": "imaged", "statement": "answer.value() must return what /opt/task-data/expected.txt says.",
                   "files": {"answer.py": "def value():\n    return 41\n",
                             "tests/test_visible.py": "import unittest\n"},
                   "oracle": [{"tool": "write_file", "args": {"path": "answer.py", "content": FIXED}}]}],
    }


def test_a_scenario_runs_in_its_own_image(test_image: str, tmp_path: Path) -> None:
    """auto picks Docker for a scenario that names an image; the oracle passes only in that image (its
    file is nowhere else) and the null model fails; the traces name the image."""
    folder = tmp_path / "scenarios" / "imaged"
    folder.mkdir(parents=True)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario(test_image)))
    out = tmp_path / "out"
    r = cli("--models", "oracle,null", "--scenario", "imaged", "--agent", "react", "--out", str(out),
            env={"AGENT_HARNESS_SCENARIOS": str(tmp_path / "scenarios"), "AGENT_HARNESS_SANDBOX": "auto"})
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["imaged"]["pass@1"] == 1.0 and summary["null"]["imaged"]["pass@1"] == 0.0, r.stdout
    image_id = resolve_image(test_image).id
    for t in traces(out):
        assert t["sandbox"] == "docker" and t["sandbox_bounds"]["image"] == test_image
        assert t["sandbox_bounds"]["image_id"] == image_id


def test_an_episode_fault_leaves_no_container(docker_env: None, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault in the agent step (its second request to the model) after a command ran in the episode's
    container: the episode ends as an error and its container goes with it."""
    from agent_harness.registry import ModelSpec
    from agent_harness.run import scheduler
    from agent_harness.run.runner import RunConfig, run

    seen: list[list[str]] = []
    asked: dict[int, int] = {}
    real = scheduler.ModelRun._ask

    def ask(self: Any, live: Any, *args: Any) -> Any:
        asked[id(live)] = asked.get(id(live), 0) + 1
        if asked[id(live)] > 1:
            seen.append(containers())
            raise RuntimeError("injected fault")
        return real(self, live, *args)

    monkeypatch.setattr(scheduler.ModelRun, "_ask", ask)
    reg = scripted(tmp_path, [run_cmd("echo hi")] * 2)
    spec = ModelSpec(name="scripted", backend="scripted", script=str(reg.parent / "scripted.jsonl"))
    run(RunConfig(models=[spec], out=tmp_path / "out", n=2, concurrency=2, embed=False, strategy="react"))
    assert len(seen) == 2 and all(seen), seen  # the episodes' containers ran when the faults came
    for t in traces(tmp_path / "out"):
        assert t["outcome"]["exit_reason"] == "error" and "injected fault" in t["outcome"]["error"]


def hold(tmp_path: Path, n: int = 3) -> tuple[subprocess.Popen[str], Path]:
    """A run whose episodes each wait in a command (`sleep 7`), once all of them run in their containers."""
    reg = scripted(tmp_path, [run_cmd("sleep 7 && echo held")] * 3)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--agent", "react",
                             "--n", str(n), "--concurrency", str(n), "--out", str(out), "--no-embed", "--no-progress",
                             "--sandbox", "docker"], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(execs(proc)) < n:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    assert len(containers(proc.pid)) == n
    return proc, out


def execs(proc: subprocess.Popen[str]) -> list[Any]:
    """The run's `docker exec` clients of `sleep 7`."""
    found = []
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                line = child.cmdline()
            except psutil.Error:
                continue
            if "exec" in line and "sleep 7 && echo held" in line:
                found.append(child)
    except psutil.Error:
        pass
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_leave_no_container(docker_env: None, tmp_path: Path, signum: int) -> None:
    proc, _ = hold(tmp_path)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert containers(proc.pid) == []


def test_containers_of_a_killed_run_are_removed_by_the_next(docker_env: None, tmp_path: Path) -> None:
    proc, out = hold(tmp_path)
    clients = execs(proc)
    os.kill(proc.pid, signal.SIGKILL)  # the harness alone, as the OOM killer would
    proc.communicate(timeout=60)
    try:
        assert len(containers(proc.pid)) == 3  # what the kill leaves
    finally:
        for c in clients:
            with contextlib.suppress(psutil.Error):
                c.kill()
    r = cli("--models", "null", "--n", "1", "--agent", "react", "--out", str(tmp_path / "next"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert containers(proc.pid) == []


def test_containers_left_at_exit_are_removed(docker_env: None, tmp_path: Path) -> None:
    """A process that ends without closing its workspace (an uncaught fault) removes its container at exit."""
    code = ("import os, sys\nfrom agent_harness.sandbox.workspace import Workspace\n"
            "ws = Workspace.create({'a.py': ''})\nassert ws.run(['true']).ok\nprint(os.getpid(), flush=True)\n"
            "raise SystemExit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "AGENT_HARNESS_SANDBOX": "docker"})
    assert r.returncode == 3, r.stderr[-2000:]
    assert containers(int(r.stdout.split()[0])) == []


# ----------------------------------------------------------------------------------------
# Choosing the sandbox; images are hostile input


@pytest.mark.parametrize("name", ["--privileged", "-v/:/host", "a b", "Upper", "img:", "x" * 300, "img;rm -rf /", ""])
def test_bad_image_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="is not an image name"):
        check_image_name(name)


def test_bad_image_name_on_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    r = cli("--models", "null", "--n", "1", "--sandbox-image=--privileged", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "is not an image name" in line, line


def test_a_dataset_row_with_a_bad_image_is_refused(tmp_path: Path) -> None:
    from agent_harness.scenarios.humanevalfix_rows import load_rows

    row = {**load_rows()[0], "image": "-v/:/host"}
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(row) + "\n")
    r = cli("--models", "null", "--n", "1", "--dataset-path", str(data), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "row 1: image: '-v/:/host' is not an image name" in r.stderr, r.stderr


def test_images_that_are_missing_or_declare_volumes_are_refused(docker_env: None) -> None:
    with pytest.raises(ConfigError, match="is not on this machine"):
        resolve_image("agent-harness-no-such-image:never")
    name = "agent-harness-test-volume:issue48"
    docker(["import", "--change", "VOLUME /data", "-", name], stdin=_skeleton_tar(_skeleton()))
    try:
        with pytest.raises(ConfigError, match="declares volumes"):
            resolve_image(name)
    finally:
        docker(["rmi", "-f", name], check=False)


def test_auto_takes_docker_only_for_a_named_image(docker_env: None, monkeypatch: pytest.MonkeyPatch,
                                                   test_image: str) -> None:
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "auto")
    assert choose_sandbox().kind in ("bwrap", "rlimit")
    spec = choose_sandbox(test_image)
    assert spec.kind == "docker" and spec.image is not None and spec.image.name == test_image
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX_IMAGE", test_image)
    assert choose_sandbox().kind == "docker"
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", "rlimit")
    assert choose_sandbox(test_image) == SandboxSpec("rlimit")  # forced: the image is ignored, with a warning


def test_without_docker_auto_stays_on_bubblewrap_and_docker_is_refused(tmp_path: Path) -> None:
    """No docker client on PATH: --sandbox docker stops with one line naming it; auto with an image warns
    and runs the episode in bubblewrap (or the fallback)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "bwrap"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found:
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir)}
    r = cli("--models", "null", "--n", "1", "--sandbox", "docker", "--out", str(tmp_path / "a"), env=env)
    assert r.returncode == 1 and "docker is not installed" in r.stderr, r.stderr[-2000:]
    r = cli("--models", "null", "--n", "1", "--agent", "react", "--sandbox-image", "python:3.11-slim",
            "--out", str(tmp_path / "b"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Docker cannot be used here" in r.stderr
    [t] = traces(tmp_path / "b")
    assert t["sandbox"] in ("bwrap", "rlimit") and "image" not in t["sandbox_bounds"]


def test_an_unreadable_descriptor_kind_is_a_harness_fault(docker_env: None) -> None:
    d = Path(tempfile.mkdtemp(prefix="agent-harness-t-"))
    s1, s2 = os.pipe(), os.pipe()
    try:
        hand_over(d)
        with pytest.raises(HarnessError, match="at most one descriptor to read and one pipe to write"):
            run_sandboxed(["true"], d, FAST, pass_fds=(s1[1], s2[1]))
    finally:
        for fd in (*s1, *s2):
            os.close(fd)
        d.rmdir()
