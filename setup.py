"""Build hook (the rest of the metadata is in pyproject.toml).

A wheel carries the default registry (`models.yaml`), the scenarios (YAML scenarios and the vendored
HumanEvalFix rows) as package data under `agent_harness/_data`, where
`agent_harness.registry` finds them when the package is installed. A checkout reads them in place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = ("models.yaml", "scenarios")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".pytest_cache")


class BuildPyWithData(build_py):
    """build_py, then copy DATA into build_lib/agent_harness/_data (not for editable installs)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "agent_harness" / "_data"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in DATA:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=SKIP)
            else:
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithData})
