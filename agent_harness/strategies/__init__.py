"""Strategies: how a model works on a task, each a plain loop (`run(ask)`) over an episode's state.

`react` (react.py: tool calls in the THOUGHT/TOOL_CALL/FINAL protocol), `reflect` (whole-function
proposals tested and reflected on), `reflect_react` (chain.py: reflect, then react on the files as
given), `single_shot` (bigcode's recipe) and `single_shot_chat` (one chat answer). `extract` pulls the
code out of a completion. `build_episode` is the one place a strategy name becomes an episode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..types import GenParams, request_seed
from ..workspace import Workspace
from .chain import ReflectThenReact
from .react import Episode
from .reflect import ReflectEpisode, require_reflectable
from .single_shot import Calibrated, ChatSingleShotEpisode, SingleShotEpisode

if TYPE_CHECKING:
    from ..planning import Job, RunConfig
    from ..registry import ModelSpec

AnyEpisode = Episode | SingleShotEpisode | ChatSingleShotEpisode | ReflectEpisode | ReflectThenReact
Builder = Callable[["RunConfig", "ModelSpec", "Job", Any, Workspace, GenParams], AnyEpisode]


def _single_shot(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                 params: GenParams) -> AnyEpisode:
    if not isinstance(scenario, Calibrated):
        raise TypeError(f"scenario '{job.scenario_name}' has no bigcode-style prompt")
    return SingleShotEpisode(job.task, ws, _first_seed(cfg, job, params), scenario, spec.bigcode_prompt)


def _single_shot_chat(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                      params: GenParams) -> AnyEpisode:
    return ChatSingleShotEpisode(job.task, ws, _first_seed(cfg, job, params), scenario)


def _reflect(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
             params: GenParams) -> AnyEpisode:
    return ReflectEpisode(job.task, ws, params, require_reflectable(job.scenario_name, scenario),
                          cfg.reflect.for_model(spec.bigcode_prompt), cfg.agent.tool_options, sample=job.sample)


def _reflect_react(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                   params: GenParams) -> AnyEpisode:
    return ReflectThenReact(job.task, ws, params, require_reflectable(job.scenario_name, scenario),
                            cfg.reflect.for_model(spec.bigcode_prompt), cfg.agent, spec.temperature_schedule,
                            job.sample)


def _react(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
           params: GenParams) -> AnyEpisode:
    return Episode(job.task, ws, params, cfg.agent, temperature_schedule=spec.temperature_schedule,
                   sample=job.sample)


def _first_seed(cfg: RunConfig, job: Job, params: GenParams) -> GenParams:
    from dataclasses import replace

    return replace(params, seed=request_seed(cfg.seed, job.task.id, job.sample, 0))


STRATEGY_BUILDERS: dict[str, Builder] = {
    "react": _react, "reflect": _reflect, "reflect_react": _reflect_react,
    "single_shot": _single_shot, "single_shot_chat": _single_shot_chat,
}


def build_episode(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, params: GenParams) -> AnyEpisode:
    """The episode `cfg.strategy` runs on `job`, in a fresh workspace of the task's files (removed
    again when the episode cannot be built). Nothing runs in the sandbox here: that is the loop's."""
    ws = Workspace.create(job.task.files, test_cmd=job.task.test_cmd)
    try:
        return STRATEGY_BUILDERS[cfg.strategy](cfg, spec, job, scenario, ws, params)
    except BaseException:
        ws.cleanup()
        raise
