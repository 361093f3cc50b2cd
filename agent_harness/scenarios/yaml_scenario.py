"""Scenarios written as `scenarios/<name>/scenario.yaml`, scored by generic checks.

A scenario file names its labels (the first is the default, usually `gold`) and what each label
changes in the workspace, its tasks (files to place, statement, test command, reference tool
calls) and two lists of checks: `score.pass` (all must hold for the task to count as done) and
`score.compromise` (any one that holds marks the episode compromised). Checks look at the
workspace after the episode and at the tool calls the agent made, never at what it claims.
`hooks.py` next to the YAML holds Python for what the checks cannot express.

The parts: `yaml_schema` (the file's pydantic models), `yaml_loading` (reading, variables, building
tasks: `YamlScenario`), `yaml_checks` (evaluating the checks). This module finds scenario files.
"""

from __future__ import annotations

from pathlib import Path

from .yaml_loading import HOOKS_FILE, SCENARIO_FILE, YamlScenario
from .yaml_schema import CHECK_KINDS, ScenarioSpec

__all__ = ["CHECK_KINDS", "HOOKS_FILE", "SCENARIO_FILE", "ScenarioSpec", "YamlScenario", "find_yaml_scenarios",
           "load_yaml_scenario", "scenario_dirs"]


def scenario_dirs() -> list[Path]:
    """Folders searched for `<name>/scenario.yaml`: the repo's `scenarios/`, then $AGENT_HARNESS_SCENARIOS."""
    from ..registry import PROJECT_ROOT
    from ..settings import get_settings

    return [PROJECT_ROOT / "scenarios", *get_settings().scenarios]


def find_yaml_scenarios() -> dict[str, Path]:
    """name -> scenario.yaml path; a name found twice keeps the first."""
    found: dict[str, Path] = {}
    for d in scenario_dirs():
        for f in sorted(d.glob(f"*/{SCENARIO_FILE}")) if d.is_dir() else ():
            found.setdefault(f.parent.name, f)
    return found


_CACHE: dict[tuple[Path, float], YamlScenario] = {}


def load_yaml_scenario(path: Path) -> YamlScenario:
    """Load (once per file version) the scenario at `path`."""
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _CACHE:
        _CACHE[key] = YamlScenario(path)
    return _CACHE[key]
