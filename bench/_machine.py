"""What every benchmark names: the CPU (results are compared on one machine, never across machines)."""

from __future__ import annotations

from pathlib import Path


def cpu_name(default: str = "unknown CPU") -> str:
    """The `model name` line of /proc/cpuinfo, or `default` where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default
