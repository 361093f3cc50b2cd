"""The installable package: build the wheel, install it into a fresh venv, run it outside the repo.

The venv is created without pip and reaches the shared venv's packages through a `.pth` line (one
directory, so the checkout's editable finder is never loaded), which keeps the test offline and fast:
only the wheel itself is installed, with --no-deps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _source_files() -> list[str]:
    """Tracked files plus untracked ones git does not ignore (what a commit of this tree would hold)."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(venv bin folder, env) with the freshly built wheel installed."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the source files")
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    for f in _source_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"),
          str(src)], root, env)
    [wheel] = (root / "dist").glob("agent_harness-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("agent_harness/_data/models.yaml", "agent_harness/_data/scenarios/humanevalfix/python.jsonl",
                    "agent_harness/_data/scenarios/repo_bugfix/scenario.yaml",
                    "agent_harness/analysis/report.py", "agent_harness/analysis/_report_assets/page.html",
                    "agent_harness/traces/trace_schema.json", "agent_harness/traces/formats/atif_schema.json"):
        assert shipped in names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)

    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, env)
    vpy = venv / "bin" / "python"
    purelib = Path(_run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        root, env).stdout.strip())
    (purelib / "shared-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "-q", "--no-deps", str(wheel)], root, env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv / "bin", env


def test_wheel_runs_outside_the_repo(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    where = _run([str(bin_dir / "python"), "-c",
                  "import agent_harness.registry as r; print(r.__file__); print(r.PROJECT_ROOT); print(r.INSTALLED)"],
                 tmp_path, env).stdout.split()
    assert where[0].startswith(str(bin_dir.parent)) and where[2] == "True"  # the wheel, not the checkout
    assert Path(where[1]).name == "_data"

    _run([str(bin_dir / "agent-harness"), "run", "--models", "oracle,null", "--n", "2", "--no-embed",
          "--no-progress"], tmp_path, env)
    summary = json.loads((tmp_path / "traces" / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-branch_search"]["pass@1"] == 1.0  # the scenario's default strategy
    assert summary["null"]["humanevalfix-branch_search"]["pass@1"] == 0.0
    traces = sorted((tmp_path / "traces").rglob("*.json"))
    assert len([t for t in traces if t.name != "summary.json"]) == 4  # 2 models x 2 tasks

    _run([str(bin_dir / "agent-harness"), "analyze", "report", "traces", "--skip", "similarity,spectral"],
         tmp_path, env)
    html = (tmp_path / "traces" / "analysis" / "report.html").read_text()
    assert "oracle" in html and "null" in html

    listing = _run([str(bin_dir / "agent-harness"), "scenarios"], tmp_path, env).stdout
    assert "humanevalfix" in listing and "164 tasks" in listing and "repo_bugfix" in listing


def test_user_registry_overrides_the_builtin(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    (tmp_path / "models.yaml").write_text(
        "default: mine\nmodels:\n  - name: mine\n    backend: scripted\n    script: oracle\n")
    (tmp_path / "other.yaml").write_text("models:\n  - name: theirs\n    backend: scripted\n    script: \"null\"\n")
    out = _run([str(bin_dir / "agent-harness"), "models"], tmp_path, env).stdout
    assert "mine" in out and "qwen2.5-coder-0.5b" not in out
    out = _run([str(bin_dir / "agent-harness"), "models", "--registry", "other.yaml"], tmp_path, env).stdout
    assert "theirs" in out and "mine" not in out
    _run([str(bin_dir / "agent-harness"), "run", "--n", "1", "--no-embed", "--no-progress", "--out", "t"],
         tmp_path, env)
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["mine"]["humanevalfix-branch_search"]["pass@1"] == 1.0


def test_installed_cache_is_the_user_cache(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    probe = [str(bin_dir / "python"), "-c",
             "from agent_harness.backends.weights import cache_root; print(cache_root())"]
    env = {k: v for k, v in env.items() if k != "AGENT_HARNESS_CACHE"}
    got = _run(probe, tmp_path, {**env, "XDG_CACHE_HOME": str(tmp_path / "xdg")}).stdout.strip()
    assert got == str(tmp_path / "xdg" / "agent-harness")
    got = _run(probe, tmp_path, {**env, "AGENT_HARNESS_CACHE": str(tmp_path / "c")}).stdout.strip()
    assert got == str((tmp_path / "c").resolve())


def test_checkout_keeps_its_repo_paths() -> None:
    from agent_harness import registry
    from agent_harness.backends import weights

    assert not registry.INSTALLED
    assert registry.PROJECT_ROOT == REPO
    if "AGENT_HARNESS_CACHE" not in os.environ:
        assert weights.cache_root() == REPO / ".cache"
