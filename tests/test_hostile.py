"""A hostile model, through the CLI with scripted replies and the real sandbox: the host stays
untouched, the run finishes with a summary, the bounds hold, forged passes fail."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=env)


def call(tool: str, **args: Any) -> str:
    return f"THOUGHT: go\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


def run_replies(tmp_path: Path, scenario: str, task: str, replies: list[str]) -> dict[str, Any]:
    """One scripted episode of `task` through the CLI; returns its trace (the run must finish)."""
    script = tmp_path / "script.jsonl"
    script.write_text("\n".join(json.dumps(r) for r in [*replies, *["THOUGHT: done\nFINAL: done"] * 4]) + "\n")
    reg = tmp_path / "models.yaml"
    reg.write_text(f"models:\n  - {{name: hostile, backend: scripted, script: {json.dumps(str(script))}}}\n")
    out = tmp_path / "out"
    r = cli("--registry", str(reg), "--models", "hostile", "--agent", "react", "--scenario", scenario, "--tasks", task,
            "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "summary.json").is_file(), r.stderr[-3000:]
    [trace_path] = list(out.rglob("run_*.json"))
    trace = json.loads(trace_path.read_text())
    assert trace["outcome"]["completed"] is True
    return trace


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under `root`: (mode, mtime_ns, sha256 of a file's bytes)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, digest)
    return out


def host_folder() -> Path:
    """A host folder the sandbox uid could reach, holding files named like the hidden test's."""
    d = Path(tempfile.mkdtemp(prefix="host-victim-"))
    os.chmod(d, 0o755)
    (d / "test_hidden.py").write_text("# the host's own file\n")
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "test_hidden.cpython-311.pyc").write_bytes(b"host bytes")
    return d


SWAP = ("import os\n"
        "if os.path.isfile('tests/test_hidden.py') and not os.path.islink('tests'):  # only while scored\n"
        "    os.rename('tests', 'tests_moved')\n"
        "    os.symlink({host!r}, 'tests')\n")


def test_scorer_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    """The package swaps tests/ for a link to a host folder when imported while the scorer runs the
    hidden tests: the host folder is untouched, the episode fails, the run ends with a summary."""
    host = host_folder()
    try:
        before = fingerprint(host)
        pkg = (ROOT / "scenarios/repo_bugfix/tasks/shop-discount/repo/shop/__init__.py").read_text()
        trace = run_replies(tmp_path, "repo_bugfix", "shop-discount", [
            call("write_file", path="shop/__init__.py", content=SWAP.format(host=str(host)) + pkg),
            call("run_tests"),
        ])
        assert fingerprint(host) == before
        assert trace["outcome"]["passed"] is False
    finally:
        for p in sorted(host.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() else p.rmdir()
        host.rmdir()


def observations(trace: dict[str, Any]) -> list[str]:
    return [s["text"] for s in trace["steps"] if s["type"] == "tool_result"]


DEEP = "import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nopen('f.txt', 'w').write('deep')\n"
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
          "killed = sum(1 for p in pids if os.waitpid(p, 0)[1] != 0)\n"
          "print('killed', killed)\n")
FLOOD = "for i in range(10050):\n    open(f'flood{i}', 'w').close()\n"


def test_hostile_commands_are_bounded_and_leak_no_host_path(tmp_path: Path) -> None:
    """mountinfo shows no host folder; a 3000-deep tree and a file flood neither crash the run nor
    go unbounded (commands are refused once over the quota); the run finishes with a summary."""
    from agent_harness.sandbox import memory_cgroup

    trace = run_replies(tmp_path, "repo_bugfix", "shop-discount", [
        call("run_cmd", cmd="cat /proc/self/mountinfo"),
        call("write_file", path="deep.py", content=DEEP),
        call("run_cmd", cmd="python3 deep.py && echo made"),
        call("git_diff"),
        call("write_file", path="flood.py", content=FLOOD),
        call("run_cmd", cmd="python3 flood.py"),
        call("run_cmd", cmd="echo still here"),
    ])
    obs = observations(trace)
    mountinfo = obs[0]
    assert " /workspace /workspace " in mountinfo
    assert tempfile.gettempdir() + "/" not in mountinfo and "agent-harness-" not in mountinfo
    assert "made" in obs[2]
    assert "deep.py" in obs[3]
    bounds = trace["sandbox_bounds"]
    assert bounds["workspace_files"] == 10000 and bounds["memory_per_process_bytes"] > 0
    assert bounds["memory_total_bytes"] == (2 << 30 if memory_cgroup() else None)
    assert "disk quota" in obs[5]
    assert "not run" in obs[6] and "still here" not in obs[6]
    assert "d/d/d/d" in obs[3] and "+deep" in obs[3]
    out = trace["outcome"]
    assert out["passed"] is None  # a flooded workspace is not scored: a recorded scorer fault, no verdict
    assert out["score_error"]["type"] == "ScoreError"
    assert "more than 10000 files" in out["score_error"]["message"]


def test_exit_zero_at_import_is_a_suspicious_failure(tmp_path: Path) -> None:
    pkg = (ROOT / "scenarios/repo_bugfix/tasks/shop-discount/repo/shop/__init__.py").read_text()
    trace = run_replies(tmp_path, "repo_bugfix", "shop-discount", [
        call("write_file", path="shop/__init__.py", content="import os\nos._exit(0)\n" + pkg),
    ])
    out = trace["outcome"]
    assert out["passed"] is False
    assert "never reported" in out["score_details"]["suspicious"]


def test_planted_unittest_module_does_not_replace_the_runner(tmp_path: Path) -> None:
    trace = run_replies(tmp_path, "repo_bugfix", "shop-discount", [
        call("write_file", path="unittest.py", content="print('Ran 9 tests\\n\\nOK')\nraise SystemExit(0)\n"),
        call("run_tests"),
    ])
    assert "Ran 9 tests" in observations(trace)[1]  # the agent's own run is fooled...
    assert trace["outcome"]["passed"] is False  # ...the scorer is not: the real tests ran and failed
    checks = trace["outcome"]["score_details"]["checks"]
    assert any(c["kind"] == "tests_pass" and not c["holds"] and "FAIL" in c["note"] for c in checks)


def test_humanevalfix_exit_zero_at_import_is_a_suspicious_failure(tmp_path: Path) -> None:
    trace = run_replies(tmp_path, "humanevalfix", "Python/0", [
        call("write_file", path="has_close_elements.py", content="import os\nos._exit(0)\n"),
    ])
    out = trace["outcome"]
    assert out["passed"] is False
    assert "before it reported" in out["score_details"]["suspicious"]


def test_memory_of_all_processes_together_is_bounded() -> None:
    """Four processes of 100 MiB do not fit in 256 MiB shared (when a memory cgroup is usable)."""
    from agent_harness.sandbox import Limits, hand_over, memory_cgroup, run_sandboxed
    from agent_harness.sandbox.safefs import remove_tree

    if memory_cgroup() is None:
        pytest.skip("no usable memory cgroup here: only the per-process limit applies")
    d = Path(tempfile.mkdtemp(prefix="agent-harness-t-"))
    try:
        os.chmod(d, 0o755)
        hand_over(d)
        alone = run_sandboxed(["python3", "-c", MEMORY.replace("range(4)", "range(1)")], d,
                              Limits(mem_total_bytes=256 << 20))
        assert alone.stdout.split() == ["killed", "0"], alone
        res = run_sandboxed(["python3", "-c", MEMORY], d, Limits(mem_total_bytes=256 << 20))
        assert res.killed_reason == "memory"
        assert int(res.stdout.split()[-1]) >= 1, res
    finally:
        remove_tree(d)


def test_walk_and_remove_never_follow_links_at_any_depth(tmp_path: Path) -> None:
    from agent_harness.sandbox import safefs

    host = host_folder()
    try:
        before = fingerprint(host)
        root = Path(tempfile.mkdtemp(prefix="agent-harness-t-"))
        fd = os.open(root, os.O_RDONLY)
        for _ in range(3000):  # deeper than the recursion limit, longer than PATH_MAX
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.symlink(str(host), "link", dir_fd=fd)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        found = {n.rel.rsplit("/", 1)[-1] for n in safefs.walk(root)}
        assert found == {"link", "f"}
        safefs.remove_tree(root)
        assert not root.exists()
        assert fingerprint(host) == before
    finally:
        safefs.remove_tree(host)
