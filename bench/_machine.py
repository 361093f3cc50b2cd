"""What the benchmarks share: the CPU they name (results are compared on one machine, never across
machines) and how they run a harness run of a row."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def cpu_name(default: str = "unknown CPU") -> str:
    """The `model name` line of /proc/cpuinfo, or `default` where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def cpu_flags() -> set[str]:
    """The `flags` of /proc/cpuinfo's first core (avx2, avx512_bf16, amx_tile...); empty where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def mem_gib() -> float:
    """The machine's RAM in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def run_row(cmd: list[str], grace_s: float = 60.0, **popen: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` for a row's harness run, except that a benchmark unwinding (SIGTERM made an
    exit, Ctrl-C) asks the run to stop with SIGTERM and gives it `grace_s` to stop its engine before it
    is killed: a harness killed outright can leave an engine behind (an older tree's, in a side-by-side
    run, holding GBs of RAM)."""
    with subprocess.Popen(cmd, text=True, **popen) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
