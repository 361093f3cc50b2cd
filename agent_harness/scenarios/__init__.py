"""Scenario registry: names map to import paths of objects that satisfy `Scenario`."""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .base import Scenario, SingleShot, TaskQuery

__all__ = ["SCENARIOS", "Scenario", "SingleShot", "TaskQuery", "get_scenario", "scenario_names"]


# name -> "module:attribute"
SCENARIOS: dict[str, str] = {
    "humanevalfix": "agent_harness.scenarios.humanevalfix:SCENARIO",
    "bogus": "agent_harness.scenarios.bogus:SCENARIO",
}


def scenario_names() -> list[str]:
    """The Python scenarios above plus every `scenarios/<name>/scenario.yaml`."""
    from .yaml_scenario import find_yaml_scenarios

    return sorted(set(SCENARIOS) | set(find_yaml_scenarios()))


def get_scenario(name: str) -> Scenario:
    if name in SCENARIOS:
        module, _, attr = SCENARIOS[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    from .yaml_scenario import find_yaml_scenarios, load_yaml_scenario

    found = find_yaml_scenarios()
    if name not in found:
        raise ConfigError(f"unknown scenario '{name}'; valid: {', '.join(scenario_names())}")
    return load_yaml_scenario(found[name])
