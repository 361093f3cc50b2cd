"""mini-swe-agent trajectories (`.traj.json`): read into this project's trace model (import only).

The file holds `messages` (OpenAI-style chat messages, each with mini's `extra`), `info` (model_stats,
config, mini_version, exit_status, submission) and `trajectory_format` (mini-swe-agent-1.1 today); a
SWE-bench batch run adds `instance_id`. The messages become steps:

- the first system and user messages are the prompt; each assistant message is a turn: its text a thought
  (with the reply's token counts and finish reason from `extra.response`), each tool call (or, in the text
  mode, each parsed `extra.actions` command) a tool_call;
- a `tool` message is a tool_result (so is a user message answering a text-mode command);
- a user message mini sent for a reply it refused (`extra.interrupt_type`, the reply in `extra.response`)
  is a parse_error: the reply it refused is its raw text, the error shown is its text;
- the `exit` message is the final step: the submission (for SWE-bench style runs, the diff), with
  `exit_status` as the exit reason.

mini does not judge its own runs (SWE-bench does that afterwards): verdicts come from `--verdicts`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ..files import Unreadable
from ._episode import Episode, arguments, call_text, count, items, obj, opt_text, seconds, text, tokens

EXIT_REASONS = {"Submitted": "submitted", "LimitsExceeded": "max_steps", "TimeExceeded": "budget",
                "CostLimitExceeded": "budget", "ContextWindowExceeded": "context"}
_BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
MAX_BLOCK_SCAN = 1 << 20  # characters of a reply searched for a text-mode command block


def is_mini(data: dict[str, Any]) -> bool:
    fmt = data.get("trajectory_format")
    if isinstance(fmt, str):
        return fmt.startswith("mini-swe-agent")
    return isinstance(data.get("messages"), list) and "mini_version" in obj(data.get("info"))


def _reply(extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the reply's first choice, its usage) from a message's `extra.response` (a LiteLLM response dump)."""
    response = obj(extra.get("response"))
    return obj((items(response.get("choices")) or [{}])[0]), obj(response.get("usage"))


def _tokens(usage: dict[str, Any]) -> dict[str, int] | None:
    cached = obj(usage.get("prompt_tokens_details")).get("cached_tokens")
    return tokens(usage.get("prompt_tokens"), usage.get("completion_tokens"), cached)


def _short(kind: Any) -> str:
    """`minisweagent.models.litellm_model.LitellmModel` -> litellm_model.LitellmModel."""
    return ".".join(kind.split(".")[-2:])[:200] if isinstance(kind, str) else "mini-swe-agent"


def episode(data: dict[str, Any], task_id: str) -> Episode:
    """The episode a mini-swe-agent trajectory holds (`task_id`: from the file name, unless the file says)."""
    info = obj(data.get("info"))
    config = obj(info.get("config"))
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise Unreadable("no 'messages' list")
    ep = Episode(fmt="mini-swe-agent", format_version=opt_text(data.get("trajectory_format"), 100),
                 harness="mini-swe-agent", harness_version=opt_text(info.get("mini_version"), 100),
                 task_id=text(data.get("instance_id"), 500) or task_id,
                 model=text(obj(config.get("model")).get("model_name"), 200) or "unknown",
                 backend=_short(config.get("model_type")))
    turn, calls, pending, structured = -1, {}, [], False
    stamps: list[float] = []
    exit_status: str | None = None
    for n, m in enumerate(messages):
        if not isinstance(m, dict):
            raise Unreadable(f"messages/{n}: not an object")
        role, content, extra = m.get("role"), text(m.get("content")), obj(m.get("extra"))
        if (t := seconds(extra.get("timestamp"))) is not None:
            stamps.append(t)
        if role == "system" and turn < 0 and not ep.system:
            ep.system = content
        elif role == "user" and turn < 0 and not ep.task:
            ep.task = content
        elif role == "assistant":
            turn += 1
            choice, usage = _reply(extra)
            opening = {"raw": content, "tokens": _tokens(usage),
                       "finish_reason": opt_text(choice.get("finish_reason"), 50)}
            found = [c for c in items(m.get("tool_calls")) if isinstance(c, dict)]
            structured |= bool(found)
            if content or not (found or extra.get("actions")):
                ep.add("thought", turn, text=content, **opening)
                opening = {}
            for c in found:
                fn = obj(c.get("function"))
                name, args = text(fn.get("name"), 200) or "?", arguments(fn.get("arguments"))
                cid = opt_text(c.get("id"), 200)
                ep.add("tool_call", turn, text=call_text(name, args), tool=name, args=args, call_id=cid, **opening)
                calls[cid] = name
                opening = {}
            commands = [obj(a) for a in items(extra.get("actions"))] if not found else []
            if not found and not commands:
                commands = [{"command": b} for b in _BASH_BLOCK.findall(content[:MAX_BLOCK_SCAN])]
            for k, a in enumerate(commands):
                cid = opt_text(a.get("tool_call_id"), 200) or f"action-{turn}-{k}"
                args = {"command": text(a.get("command"))}
                ep.add("tool_call", turn, text=call_text("bash", args), tool="bash", args=args, call_id=cid, **opening)
                pending.append(cid)
                opening = {}
        elif role == "tool":
            cid = opt_text(m.get("tool_call_id"), 200)
            ep.add("tool_result", max(turn, 0), text=content, tool=calls.get(cid), call_id=cid)
        elif role == "user" and extra.get("response") is not None:  # a reply mini refused, and what it said
            turn += 1
            choice, usage = _reply(extra)
            ep.add("parse_error", turn, text=content, raw=text(obj(choice.get("message")).get("content")),
                   tokens=_tokens(usage), finish_reason=opt_text(choice.get("finish_reason"), 50))
        elif role == "user" and pending:  # the text mode's observation of a command
            ep.add("tool_result", max(turn, 0), text=content, tool="bash", call_id=pending.pop(0))
        elif role == "exit":
            exit_status = opt_text(extra.get("exit_status"), 100) or content[:100]
            submission = extra.get("submission")
            ep.final = text(submission) if isinstance(submission, str) else content
            ep.add("final", max(turn, 0), text=ep.final)
        else:
            ep.add("feedback", max(turn, 0), text=content)
    exit_status = exit_status or opt_text(info.get("exit_status"), 100)
    ep.exit_reason = EXIT_REASONS.get(exit_status or "", "error" if exit_status else None)
    if ep.exit_reason == "error":
        ep.error = f"mini-swe-agent exit status: {exit_status}"
    ep.protocol = "native" if structured else "text"
    if stamps:
        try:
            ep.timestamp = datetime.fromtimestamp(min(stamps), UTC).isoformat(timespec="seconds")
        except (OverflowError, OSError, ValueError):  # a time no calendar holds: left unknown
            ep.timestamp = None
        ep.elapsed = round(max(stamps) - min(stamps), 3)
    stats = obj(info.get("model_stats"))
    ep.details = {"exit_status": exit_status, "instance_cost": seconds(stats.get("instance_cost")),
                  "api_calls": count(stats.get("api_calls")), "agent_type": _short(config.get("agent_type")),
                  "environment_type": _short(config.get("environment_type")),
                  "instance_id": opt_text(data.get("instance_id"), 500)}
    return ep
