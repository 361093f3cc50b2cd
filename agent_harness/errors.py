"""Typed exceptions. Flow-control exceptions carry the message the model will see."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError


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


class StopRequested(BaseException):
    """Ctrl-C or SIGTERM: unwinds the run from wherever it is, closing what it started.

    Not a KeyboardInterrupt: libraries catch those and go on (vLLM's engine start does, so a Ctrl-C
    while the engine loaded was lost); nor an Exception, which the harness's fault handlers take.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


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


class ModelCallFailed(BackendError):
    """The backend raised while completing one request: that episode ends, the others go on."""


class UnusableReply(BackendError):
    """The server's reply could not be used (`Completion.error`): the episode ends with no verdict."""


def validation_error(source: object, e: ValidationError, data: Any, *, id_key: str = "id",
                     tagged: str = "item", kinds: Sequence[str] = ()) -> ConfigError:
    """The first problem pydantic found in `data` (read from `source`), as one line:
    `source: key.path[item]: message`. List items are named by their `id_key` where they have one;
    a `kind`-tagged union's members are called `tagged`, and `kinds` are its valid tags."""
    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "union_tag_invalid":
        msg = f"unknown {tagged} kind; valid: {', '.join(kinds)}"
    elif err["type"] == "union_tag_not_found":
        msg = f"{tagged} needs a 'kind'"
    return ConfigError(f"{source}: {error_path(err['loc'], data, id_key)}: {msg}")


def error_path(loc: tuple[int | str, ...], data: Any, id_key: str = "id") -> str:
    """A pydantic location as a key path through `data`; list items by their `id_key` where they have one."""
    parts: list[str] = []
    node = data
    for p in loc:
        if isinstance(p, int) and isinstance(node, list):
            item = node[p] if p < len(node) else None
            label = item.get(id_key) if isinstance(item, dict) else None
            parts.append(f"[{label if label not in (None, '') else p}]")
            node = item
        elif isinstance(node, dict) and p in node:
            parts.append(("." if parts else "") + str(p))
            node = node[p]
        elif isinstance(node, dict) and node.get("kind") == p:
            continue  # the discriminator tag pydantic adds to the path
        else:
            parts.append(("." if parts else "") + str(p))
            node = None
    return "".join(parts) or "(top level)"
