#!/usr/bin/env python3
"""Sandbox start latency: median and p95 wall time of one command, per sandbox, side by side.

    .venv/bin/python bench/sandbox_latency.py [--n 200] [--no-write]

Measures `true` and `python3 -c pass` in bubblewrap, in Docker both ways (`docker`: a container per
command, `run_sandboxed`; `docker-exec`: a command in an episode's container, `docker exec`, the way
a workspace runs them), in the rlimit fallback and, for reference, a bare `subprocess.run` with no
sandbox, each N times after one warm-up run, in a workspace-like temp folder. Docker's episode
container also costs its start and removal once per episode (the `docker-episode` row). Prints a
markdown table and appends it as a dated section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _machine import cpu_name  # bench/ is on sys.path when a benchmark runs as a script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
sys.path.insert(0, str(ROOT))

from agent_harness.sandbox import (  # noqa: E402
    Limits,
    SandboxSpec,
    bwrap_problem,
    hand_over,
    open_sandbox,
    run_sandboxed,
)
from agent_harness.sandbox.docker_image import docker, docker_problem, resolve_image  # noqa: E402

COMMANDS = {"true": ["true"], "python3 -c pass": ["python3", "-c", "pass"]}
BARE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}  # as in the sandbox


def timed(fn: Callable[[], bool], n: int) -> list[float]:
    if not fn():
        raise SystemExit("warm-up run failed")
    times = []
    for _ in range(n):
        start = time.perf_counter()
        ok = fn()
        times.append(time.perf_counter() - start)
        if not ok:
            raise SystemExit("a measured run failed")
    return times


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(math.ceil(0.95 * len(s)) - 1, 0)]


def measure(n: int) -> list[dict[str, object]]:
    cwd = Path(tempfile.mkdtemp(prefix="agent-harness-bench-"))
    rows: list[dict[str, object]] = []
    try:
        (cwd / "main.py").write_text("print('hi')\n")
        hand_over(cwd)
        modes = ["bwrap"] if bwrap_problem() is None else []
        spec = SandboxSpec("docker", resolve_image()) if docker_problem() is None else None
        modes += ["docker", "docker-exec"] if spec else []
        session = open_sandbox(spec, cwd, Limits()) if spec else None
        for mode in [*modes, "rlimit", "none"]:
            for name, cmd in COMMANDS.items():
                def fn(cmd: list[str] = cmd, mode: str = mode) -> bool:
                    if mode == "none":
                        return subprocess.run(cmd, cwd=cwd, env=BARE_ENV, capture_output=True,
                                              stdin=subprocess.DEVNULL).returncode == 0
                    if mode == "docker-exec":
                        assert session is not None
                        return session.run(cmd, Limits(), {}).ok
                    return run_sandboxed(cmd, cwd, Limits(), sandbox=spec if mode == "docker" else mode).ok
                add(rows, mode, name, n, timed(fn, n))
        if spec is not None:
            k = max(n // 10, 5)
            add(rows, "docker-episode", "start + remove", k, timed(lambda: episode(spec, cwd), k))
        if session is not None:
            session.close()
        if "bwrap" not in modes:
            rows.append({"sandbox": "bwrap", "command": "-", "n": 0, "error": bwrap_problem()})
        if spec is None:
            rows.append({"sandbox": "docker", "command": "-", "n": 0, "error": docker_problem()})
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return rows


def add(rows: list[dict[str, object]], mode: str, name: str, n: int, times: list[float]) -> None:
    median = statistics.median(times)
    rows.append({"sandbox": mode, "command": name, "n": n, "median": median, "p95": p95(times), "min": min(times)})
    print(f"{mode:14} {name:16} median {median * 1e3:6.1f} ms", file=sys.stderr)


def episode(spec: SandboxSpec, cwd: Path) -> bool:
    """An episode container's fixed cost: started by its first command (`true`), then removed."""
    box = open_sandbox(spec, cwd, Limits())
    try:
        return box.run(["true"], Limits(), {}).ok
    finally:
        box.close()


def machine() -> str:
    cpu = cpu_name(platform.processor() or "?")
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("bwrap") else "bwrap missing"
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    dockerd = docker(["version", "--format", "Docker {{.Server.Version}}"], check=False).stdout.decode().strip() \
        if docker_problem() is None else "no Docker"
    return (f"Machine: {cpu}, {os.cpu_count()} cores, load average {load} at the start. Linux "
            f"{platform.release()}, {bwrap}, {dockerd or 'Docker ?'}, Python {platform.python_version()}, running as "
            f"{'root' if os.geteuid() == 0 else 'non-root'}; git {rev.stdout.strip() or '?'}.")


def render(rows: list[dict[str, object]], n: int) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Sandbox start latency ({now})", "",
        machine() + f" `bench/sandbox_latency.py`: wall time of one `run_sandboxed` call (spawn, run, "
        f"collect, clean up), {n} runs per row after a warm-up; `docker` starts a container per command, "
        "`docker-exec` runs it in an episode's container (`docker exec`; the container's start and removal, "
        "once per episode, is `docker-episode`); `none` is a bare `subprocess.run` of the same system "
        "binaries, for reference.", "",
        "| sandbox | command | runs | median ms | p95 ms | min ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['sandbox']} | - | 0 | not measured: {r['error']} | | |")
            continue
        ms = [f"{float(r[k]) * 1e3:.1f}" for k in ("median", "p95", "min")]  # type: ignore[arg-type]
        lines.append(f"| {r['sandbox']} | `{r['command']}` | {r['n']} | " + " | ".join(ms) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="runs per row (default 200)")
    ap.add_argument("--no-write", action="store_true", help="print only; do not append to bench/RESULTS.md")
    a = ap.parse_args()
    section = render(measure(a.n), a.n)
    print(section)
    if not a.no_write:
        head = "" if RESULTS.exists() else "# Benchmark results\n\nNewest sections last.\n"
        with RESULTS.open("a", encoding="utf-8") as f:  # append only: others add sections too
            f.write(head + "\n" + section)
        print(f"appended to {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
