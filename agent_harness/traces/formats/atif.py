"""ATIF, Harbor's Agent Trajectory Interchange Format (v1.7, RFC 0001): one trajectory JSON per episode.

Export: the system prompt and the task are the first steps (system, user), after the worked example a prompt may
show (`prompt.demo`, steps marked `is_copied_context`: no new interaction); each model reply is one agent step
(`message` the raw reply, `reasoning_content` the thought, `tool_calls`, the tool results as its
`observation`, `metrics` its tokens); what the harness told the model between replies (test runs, submit
checks, feedback, restarts) is a system step. What ATIF has no field for goes under `extra.agent_harness`:
the trace header and outcome (verdict, score details) at the root, and on each step a record of the steps
it holds (type, turn, phase, repairs, files...), so that an import gives the trace back whole. Embeddings
are a reference (the trace file and run id), computed again on import. Every file is checked against
`atif_schema.json` (written from the RFC) and the rules a schema cannot state (`check`).

Import: any ATIF v1.x trajectory that passes the same checks. Without our records, an agent step becomes a
thought (its reasoning, else its message when it calls tools), its tool calls and their results, and a final
answer when it calls none; a later system or user message becomes feedback; steps marked `is_copied_context` are
the prompt's worked example.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from ..files import Unreadable
from ..model import NATIVE_HARNESS
from ._episode import (
    EXTRA_KEY,
    Episode,
    blocks,
    call_text,
    count,
    items,
    obj,
    opt_text,
    record,
    restore,
    text,
    tokens,
)

ATIF_VERSION = "ATIF-v1.7"
SCHEMA_PATH = Path(__file__).with_name("atif_schema.json")
_TOKENS = {"prompt": "prompt_tokens", "completion": "completion_tokens", "cached": "cached_tokens"}


# -- checking ---------------------------------------------------------------------------------------------
@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def check(doc: Any) -> list[str]:
    """Why `doc` is not a valid ATIF trajectory (empty when it is): the schema, then step ids that run
    1, 2, 3..., observation results that name a tool call of their own step, tool-call ids and embedded
    subagent ids unique."""
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:200]}"
              for e in _validator().iter_errors(doc)]
    if errors:
        return errors
    todo = [("", doc)]
    while todo:
        where, traj = todo.pop()
        seen: set[str] = set()
        for n, step in enumerate(traj["steps"], 1):
            if step["step_id"] != n:
                errors.append(f"{where}steps/{n - 1}/step_id: {step['step_id']}, expected {n}")
            ids = [c["tool_call_id"] for c in step.get("tool_calls") or []]
            if seen & set(ids) or len(set(ids)) != len(ids):
                errors.append(f"{where}steps/{n - 1}/tool_calls: a tool_call_id used twice")
            seen |= set(ids)
            for r in (step.get("observation") or {}).get("results", []):
                ref = r.get("source_call_id")
                if ref is not None and step["source"] == "agent" and ref not in ids:
                    errors.append(f"{where}steps/{n - 1}/observation: source_call_id {ref!r} is no tool call "
                                  "of this step")
        subs = traj.get("subagent_trajectories") or []
        sub_ids = [s["trajectory_id"] for s in subs]
        if len(set(sub_ids)) != len(sub_ids):
            errors.append(f"{where}subagent_trajectories: trajectory_id used twice")
        todo += [(f"{where}subagent_trajectories/{k}/", s) for k, s in enumerate(subs)]
    return errors


# -- export -----------------------------------------------------------------------------------------------
def _metrics(tok: Any) -> dict[str, int] | None:
    if not isinstance(tok, dict) or set(tok) - set(_TOKENS):
        return None
    return {_TOKENS[k]: v for k, v in tok.items()}


def _reply(block: list[dict[str, Any]], used: set[str]) -> dict[str, Any]:
    """The agent step of one model reply (see the module docstring)."""
    opening, recs, calls, results = block[0], [], [], []
    reasoning: str | None = None
    ids: dict[Any, str] = {}
    for s in block:
        moved: list[str] = []
        if s is opening:
            moved += ["raw"] if isinstance(s.get("raw"), str) else []
            moved += ["tokens"] if _metrics(s.get("tokens")) else []
        if s["type"] == "thought" and reasoning is None:
            reasoning = s["text"]
            moved.append("text")
        elif s["type"] == "tool_call":
            cid = s.get("call_id")
            tid = cid if isinstance(cid, str) and cid not in used else f"step-{s['i']}"
            used.add(tid)
            ids.setdefault(cid, tid)
            args = s.get("args")
            calls.append({"tool_call_id": tid, "function_name": s.get("tool") or "",
                          "arguments": args if isinstance(args, dict) else {}})
            moved += [k for k, ok in (("tool", isinstance(s.get("tool"), str)), ("args", isinstance(args, dict)),
                                      ("call_id", tid == cid)) if ok]
        elif s["type"] == "tool_result":
            res: dict[str, Any] = {"content": s["text"]}
            moved.append("text")
            if s.get("call_id") in ids:
                res["source_call_id"] = ids[s["call_id"]]
                moved += ["call_id"] if ids[s["call_id"]] == s["call_id"] else []
            results.append(res)
        recs.append(record(s, tuple(moved)))
    step: dict[str, Any] = {"source": "agent", "message": opening.get("raw") if isinstance(opening.get("raw"), str)
                            else ""}
    if reasoning is not None:
        step["reasoning_content"] = reasoning
    if calls:
        step["tool_calls"] = calls
    if results:
        step["observation"] = {"results": results}
    if metrics := _metrics(opening.get("tokens")):
        step["metrics"] = metrics
    step["extra"] = {EXTRA_KEY: {"steps": recs}}
    return step


def trajectory(trace: dict[str, Any], trace_file: str) -> dict[str, Any]:
    """The ATIF trajectory of one (checked) trace; `trace_file` is where it lies (the embeddings' reference)."""
    prompt, out, model = trace["prompt"], trace["outcome"], trace["model"]
    source = trace.get("source") or {}
    raw: list[dict[str, Any]] = [{"source": "system", "message": prompt.get("system") or ""}]
    for turn in prompt.get("demo") or []:
        raw.append({"source": "user" if turn.get("role") == "user" else "agent", "message": text(turn.get("content")),
                    "is_copied_context": True,  # a worked example shown before the task: no new interaction
                    "extra": {EXTRA_KEY: {"demo": {k: v for k, v in turn.items() if k != "content"}}}})
    raw.append({"source": "user", "message": prompt.get("task") or ""})
    used: set[str] = set()
    for kind, block in blocks(trace["steps"]):
        if kind == "reply":
            raw.append(_reply(block, used))
        else:
            raw.append({"source": "system", "message": block[0]["text"],
                        "extra": {EXTRA_KEY: {"steps": [record(block[0], ("text",))]}}})
    steps = [{"step_id": n, **s} for n, s in enumerate(raw, 1)]
    header = {k: v for k, v in trace.items() if k not in ("steps", "prompt", "outcome", "embeddings", "source")}
    emb = trace.get("embeddings")
    verdict = "unscored" if out.get("passed") is None else "passed" if out["passed"] else "failed"
    agent = trace.get("agent") or {}
    return {
        "schema_version": ATIF_VERSION,
        "session_id": trace["run_id"],
        "trajectory_id": trace["run_id"],
        "agent": {"name": source.get("harness") or NATIVE_HARNESS,
                  "version": source.get("harness_version") or trace.get("harness_version") or "unknown",
                  "model_name": model.get("name"),
                  **({"tool_definitions": prompt["tools"]} if prompt.get("tools") else {}),
                  "extra": {EXTRA_KEY: {k: agent.get(k) for k in ("strategy", "mode", "protocol", "tool_choice")
                                        if agent.get(k) is not None}}},
        "steps": steps,
        "notes": f"Exported by agent-harness from the trace {trace_file} (trace schema {trace['schema_version']}).",
        "final_metrics": {"total_prompt_tokens": out.get("prompt_tokens") or 0,
                          "total_completion_tokens": out.get("completion_tokens") or 0,
                          "total_cached_tokens": out.get("cached_prompt_tokens") or 0, "total_steps": len(steps)},
        "extra": {"verdict": verdict, EXTRA_KEY: {
            "trace_schema": trace["schema_version"], "header": header, "outcome": out,
            "prompt": {k: v for k, v in prompt.items() if k not in ("system", "task", "demo")},
            "embeddings": {**emb, "trace": trace_file, "run_id": trace["run_id"]} if emb else None}},
    }


# -- import -----------------------------------------------------------------------------------------------
def is_atif(data: dict[str, Any]) -> bool:
    return isinstance(data.get("schema_version"), str) and data["schema_version"].startswith("ATIF-v")


def episode(doc: dict[str, Any], task_id: str) -> Episode:
    """The episode an ATIF trajectory holds (`task_id`: the file's task when the trajectory does not say)."""
    if errors := check(doc):
        raise Unreadable(f"not a valid ATIF trajectory: {errors[0]}")
    agent, extra = doc["agent"], obj(doc.get("extra"))
    ours = obj(extra.get(EXTRA_KEY))
    header = obj(ours.get("header"))
    ep = Episode(fmt="atif", format_version=doc["schema_version"], harness=text(agent["name"], 200) or "unknown",
                 harness_version=text(agent["version"], 200), task_id=task_id,
                 model=text(agent.get("model_name"), 200) or "unknown", backend="atif")
    if header:
        ep.native = {"header": header, "outcome": obj(ours.get("outcome")), "prompt": obj(ours.get("prompt"))}
    ep.tools = [t for t in items(agent.get("tool_definitions")) if isinstance(t, dict)]
    fm = obj(doc.get("final_metrics"))
    if fm.get("total_prompt_tokens") is not None or fm.get("total_completion_tokens") is not None:
        ep.totals = {"prompt": count(fm.get("total_prompt_tokens")) or 0,
                     "completion": count(fm.get("total_completion_tokens")) or 0,
                     "cached": count(fm.get("total_cached_tokens")) or 0}
    ep.details = {"session_id": doc.get("session_id"), "trajectory_id": doc.get("trajectory_id"),
                  "total_cost_usd": fm.get("total_cost_usd"), "notes": opt_text(doc.get("notes"), 500)}
    for key in ("task_id", "instance_id"):
        if isinstance(extra.get(key), str) and not header:
            ep.task_id = text(extra[key], 500)
    turn, seen_agent, calls_made = -1, False, False
    for step in doc["steps"]:
        recs = items(obj(obj(step.get("extra")).get(EXTRA_KEY)).get("steps"))
        demo = obj(obj(step.get("extra")).get(EXTRA_KEY)).get("demo")
        message = text(step.get("message"))
        if isinstance(demo, dict) or step.get("is_copied_context") is True:
            ep.demo.append({"role": "user" if step["source"] == "user" else "assistant",
                            **(demo if isinstance(demo, dict) else {}), "content": message})
        elif step["source"] == "agent":
            seen_agent = True
            turn += 1
            calls_made = bool(step.get("tool_calls"))
            _agent_step(ep, step, message, recs, turn)
        elif not seen_agent and step["source"] == "system" and not ep.system and not recs:
            ep.system = message
        elif not seen_agent and step["source"] == "user" and not ep.task and not recs:
            ep.task = message
        elif recs:
            ep.steps += [s for r in recs if (s := restore(r, {"text": message})) is not None]
        else:
            ep.add("feedback", max(turn, 0), text=message)
            for r in items(obj(step.get("observation")).get("results")):
                ep.add("tool_result", max(turn, 0), text=text(r.get("content")), call_id=r.get("source_call_id"))
    finals = [s for s in ep.steps if s["type"] == "final"]
    ep.final = finals[-1]["text"] if finals else None
    ep.exit_reason = "submitted" if seen_agent and not calls_made else None
    return ep


def _agent_step(ep: Episode, step: dict[str, Any], message: str, recs: list[Any], turn: int) -> None:
    calls = step.get("tool_calls") or []
    results = (step.get("observation") or {}).get("results") or []
    metrics = step.get("metrics") or {}
    tok = {k: metrics[v] for k, v in _TOKENS.items() if metrics.get(v) is not None} or None
    names = {c["tool_call_id"]: c["function_name"] for c in calls}
    if recs:  # our own export: each record gives its step back, its moved fields from this step
        n_call = n_result = 0
        for k, rec in enumerate(recs):
            kind = rec.get("type") if isinstance(rec, dict) else None
            values: dict[str, Any] = {"raw": message, "tokens": tok} if k == 0 else {}
            if kind == "thought":
                values["text"] = step.get("reasoning_content")
            elif kind == "tool_call" and n_call < len(calls):
                c = calls[n_call]
                values.update(tool=c["function_name"], args=c["arguments"], call_id=c["tool_call_id"])
                n_call += 1
            elif kind == "tool_result" and n_result < len(results):
                values.update(text=text(results[n_result].get("content")),
                              call_id=results[n_result].get("source_call_id"))
                n_result += 1
            if (s := restore(rec, values)) is None:
                raise Unreadable(f"step {step['step_id']}: a malformed {EXTRA_KEY} record")
            ep.steps.append(s)
        return
    reasoning = opt_text(step.get("reasoning_content"))
    opening = {"raw": message, "tokens": tokens(metrics.get("prompt_tokens"), metrics.get("completion_tokens"),
                                                 metrics.get("cached_tokens"))}
    if reasoning is not None or (calls and message):
        ep.add("thought", turn, text=reasoning if reasoning is not None else message, **opening)
        opening = {}
    for c in calls:
        ep.add("tool_call", turn, text=call_text(c["function_name"], c["arguments"]),
               tool=text(c["function_name"], 200), args=c["arguments"], call_id=c["tool_call_id"], **opening)
        opening = {}
    for r in results:
        ref = r.get("source_call_id")
        ep.add("tool_result", turn, text=text(r.get("content")), tool=names.get(ref), call_id=ref)
    if not calls:
        ep.add("final", turn, text=message, **opening)
