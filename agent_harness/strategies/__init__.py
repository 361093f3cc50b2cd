"""Strategies: how a model works on a task, each a step function over `episode.EpisodeState`.

`react` (react.py: tool calls in the THOUGHT/TOOL_CALL/FINAL protocol), `reflect` (whole-function
proposals tested and reflected on), `single_shot` (one completion, no tools). `extract` pulls the
code out of a completion for the last two.
"""
