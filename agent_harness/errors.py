"""Typed exceptions. Flow-control exceptions carry the message the model will see."""

from __future__ import annotations


class HarnessError(Exception):
    """A real fault: stops the command with a one-line message and a non-zero exit."""

    exit_code = 1


class ConfigError(HarnessError):
    """Bad user input (YAML, CLI flags, unknown names). Exit code 2."""

    exit_code = 2


class MissingExtraError(HarnessError):
    """An optional dependency is not installed; the message names the install command."""

    exit_code = 2


class BackendUnavailable(HarnessError):
    """A backend cannot start here (not installed, no GPU, no weights offline)."""


class AgentFlow(Exception):
    """Base of the exceptions that steer the agent loop; `str(e)` is shown to the model."""


class FormatError(AgentFlow):
    """The model's reply does not follow the THOUGHT/TOOL_CALL/FINAL protocol."""


class ToolError(AgentFlow):
    """A tool call failed (bad path, escape attempt, bad args); becomes an observation."""


class Submitted(AgentFlow):
    """The model wrote FINAL; carries the final text."""


class LimitsExceeded(AgentFlow):
    """Step, token or wall-time budget exhausted; carries which one."""

    def __init__(self, message: str, reason: str = "max_steps") -> None:
        super().__init__(message)
        self.reason = reason


class ScoreError(HarnessError):
    """A scorer could not reach a verdict (e.g. the agent's code sabotaged the scoring set-up).

    The runner records it as the episode's `score_error`: neither a pass, a fail nor a resisted attack.
    """


class BackendError(HarnessError):
    """A backend broke its contract (e.g. no completion for a conversation) or failed while running."""
