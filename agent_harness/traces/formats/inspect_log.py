"""Inspect AI eval logs (`.eval`): export (one log per harness x model x scenario x label, written with
inspect_ai's own log API: the `[inspect]` extra) and import (read without inspect_ai, as hostile input).

Export: each episode is a sample (id the task id, epoch its sample + 1): the prompt and every step as chat
messages (a model reply is an assistant message with its tool calls, a tool result a tool message, what the
harness told the model a user message), the verdict as the score `agent_harness` (C or I; none when
unscored), the token counts as `model_usage`. What Inspect has no field for goes to metadata
(`agent_harness`): the trace header and outcome on the sample (sandbox, suspicious, score details), a
record of its steps on each message (repairs, phase, files, tokens per reply).

Import: every sample of an `.eval` (or `.json`) log, read member by member within caps (`_read.Archive`).
Messages become steps; per-reply token counts come from the sample's model events when there is one per
reply; the verdict is the score named `agent_harness`, else the log's first scorer (C, true or 1 pass).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ...errors import HarnessError, MissingExtraError
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
    seconds,
    text,
)
from ._read import Archive, json_object

SCORER = "agent_harness"
INSTALL = "pip install 'agent-harness[inspect]'"
LIMITS = {"message": "max_steps", "turn": "max_steps", "token": "budget", "time": "budget", "working": "budget",
          "cost": "budget", "context": "context"}


# -- export -----------------------------------------------------------------------------------------------
def _messages(trace: dict[str, Any], model: str) -> list[dict[str, Any]]:
    prompt = trace["prompt"]
    out: list[dict[str, Any]] = [{"role": "system", "content": prompt.get("system") or ""}]
    for turn in prompt.get("demo") or []:
        out.append({"role": "user" if turn.get("role") == "user" else "assistant", "content": text(turn.get("content")),
                    "metadata": {EXTRA_KEY: {"demo": {k: v for k, v in turn.items() if k != "content"}}}})
    out.append({"role": "user", "content": prompt.get("task") or ""})
    for kind, block in blocks(trace["steps"]):
        if kind == "event":
            out.append({"role": "user", "content": block[0]["text"],
                        "metadata": {EXTRA_KEY: {"steps": [record(block[0], ("text",))]}}})
            continue
        opening, recs, calls, tools = block[0], [], [], []
        for s in block:
            moved = ["raw"] if s is opening and isinstance(s.get("raw"), str) else []
            if s["type"] == "tool_call" and isinstance(s.get("call_id"), str) and isinstance(s.get("tool"), str):
                args = s.get("args") if isinstance(s.get("args"), dict) else {}
                calls.append({"id": s["call_id"], "function": s["tool"], "arguments": args})
                moved += ["call_id", "tool"] + (["args"] if isinstance(s.get("args"), dict) else [])
            elif s["type"] == "tool_result":
                tools.append({"role": "tool", "content": s["text"], "tool_call_id": s.get("call_id"),
                              "function": s.get("tool"), "metadata": {EXTRA_KEY: {"steps": [record(s, ("text",))]}}})
                continue
            recs.append(record(s, tuple(moved)))
        out.append({"role": "assistant", "content": opening.get("raw") if isinstance(opening.get("raw"), str) else "",
                    "model": model, "source": "generate", **({"tool_calls": calls} if calls else {}),
                    "metadata": {EXTRA_KEY: {"steps": recs}}})
        out += tools
    return out


def _usage(out: dict[str, Any]) -> dict[str, Any]:
    prompt, cached, completion = (out.get(k) or 0
                                  for k in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens"))
    return {"input_tokens": prompt - cached, "output_tokens": completion, "total_tokens": prompt + completion,
            **({"input_tokens_cache_read": cached} if cached else {})}


def sample(trace: dict[str, Any], model: str) -> dict[str, Any]:
    """The EvalSample (as a dict for `EvalSample.model_validate`) of one checked trace."""
    out = trace["outcome"]
    messages = _messages(trace, model)
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    scores = None
    if out.get("passed") is not None:
        details = {**(out.get("score_details") or {}), "compromised": out.get("compromised")}
        scores = {SCORER: {"value": "C" if out["passed"] else "I", "answer": out.get("final"),
                           "explanation": out.get("test_output"), "metadata": details}}
    header = {k: v for k, v in trace.items() if k not in ("steps", "prompt", "outcome", "embeddings")}
    return {
        "id": trace["task_id"], "epoch": trace.get("sample", 0) + 1, "input": trace["prompt"].get("task") or "",
        "target": "", "messages": messages, "scores": scores,
        "output": {"model": model, "choices": [{"message": last, "stop_reason": "stop"}] if last else []},
        "metadata": {EXTRA_KEY: {"header": header, "outcome": out, "prompt": {
            k: v for k, v in trace["prompt"].items() if k not in ("system", "task", "demo")}}},
        "model_usage": {model: _usage(out)}, "total_time": out.get("elapsed_seconds"),
        "started_at": _when(trace.get("timestamp")),
        **({"error": {"message": out["error"], "traceback": "", "traceback_ansi": ""}} if out.get("error") else {}),
    }


def _when(stamp: Any) -> str | None:
    """An ISO 8601 time in UTC, or None when `stamp` is not one (a trace's timestamp is only known to be text)."""
    try:
        when = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def _span(traces: list[dict[str, Any]]) -> tuple[datetime, datetime]:
    """When the first episode began and the last one ended (now, when no trace says)."""
    starts, ends = [], []
    for t in traces:
        try:
            start = datetime.fromisoformat(t.get("timestamp") or "")
        except ValueError:
            continue
        start = (start if start.tzinfo else start.replace(tzinfo=UTC)).astimezone(UTC)
        starts.append(start)
        took = min(float(t["outcome"].get("elapsed_seconds") or 0.0), 1e8)  # a trace may say 1e12 s: no date holds it
        try:
            ends.append(start + timedelta(seconds=took))
        except OverflowError:
            ends.append(start)
    now = datetime.now(UTC)
    return min(starts, default=now), max(ends, default=now)


def write_log(traces: list[dict[str, Any]], folder: Any) -> str:
    """Write one `.eval` log of `traces` (one harness, model, scenario and label) into `folder` (a
    `safewrite.Folder`) with inspect_ai's API; returns its file name."""
    try:
        from inspect_ai.log import EvalLog, write_eval_log
    except ImportError:
        raise MissingExtraError(f"--format inspect needs inspect_ai: {INSTALL}") from None
    first = traces[0]
    harness = (first.get("source") or {}).get("harness") or NATIVE_HARNESS
    model = f"{harness}/{first['model']['name']}"
    key = "\0".join([harness, first["model"]["name"], first["scenario"], first["label"],
                     str((first.get("agent") or {}).get("protocol")), *sorted(t["run_id"] for t in traces)])
    ident = hashlib.sha256(key.encode()).hexdigest()[:22]
    created, ended = _span(traces)
    samples = [sample(t, model) for t in traces]
    scored = [t["outcome"]["passed"] for t in traces if t["outcome"].get("passed") is not None]
    usage = {model: {k: sum(s["model_usage"][model].get(k, 0) for s in samples)
                     for k in ("input_tokens", "output_tokens", "total_tokens", "input_tokens_cache_read")}}
    from pydantic import ValidationError

    try:
        log = _log(EvalLog, ident, created, ended, first, harness, model, samples, scored, usage)
    except ValidationError as e:  # a value inspect_ai refuses that the trace model let through
        err = e.errors()[0]
        raise HarnessError(f"inspect_ai refused the log of {model} ({'/'.join(map(str, err['loc']))}: "
                           f"{err['msg']})") from None
    task = "".join(c if c.isalnum() else "-" for c in first["scenario"])[:60].strip("-") or "task"
    name = f"{created:%Y-%m-%dT%H-%M-%S}-00-00_{task}_{ident}.eval"
    with tempfile.TemporaryDirectory(prefix="inspect-export-") as tmp:  # private: inspect writes by path
        path = os.path.join(tmp, name)
        write_eval_log(log, path, format="eval")
        folder.write(name, Path(path).read_bytes())
    return name


def _log(EvalLog: Any, ident: str, created: datetime, ended: datetime, first: dict[str, Any],  # noqa: N803
         harness: str, model: str, samples: list[dict[str, Any]], scored: list[bool], usage: dict[str, Any]) -> Any:
    agent = first.get("agent") or {}
    return EvalLog.model_validate({
        "version": 2, "status": "success",
        "eval": {"eval_id": ident, "run_id": ident, "created": created.isoformat(), "task": first["scenario"],
                 "task_id": ident, "task_version": 0, "task_args": {"label": first["label"]},
                 "dataset": {"name": first["scenario"], "samples": len(samples),
                             "sample_ids": sorted({s["id"] for s in samples})},
                 "model": model, "config": {"epochs": max(s["epoch"] for s in samples)},
                 "packages": {"agent-harness": first.get("harness_version") or "unknown"},
                 "solver": agent.get("strategy"),
                 "metadata": {EXTRA_KEY: {"harness": harness, "label": first["label"]}}},
        "plan": {"steps": [{"solver": agent.get("strategy") or "react",
                            "params": {k: v for k, v in agent.items() if k != "strategy"}}]},
        "results": {"total_samples": len(samples), "completed_samples": len(samples),
                    "scores": [{"name": SCORER, "scorer": SCORER, "scored_samples": len(scored),
                                "unscored_samples": len(samples) - len(scored),
                                "metrics": {"accuracy": {"name": "accuracy",
                                                         "value": sum(scored) / len(scored) if scored else 0.0}}}]},
        "stats": {"started_at": created.isoformat(), "completed_at": ended.isoformat(), "model_usage": usage},
        "samples": samples,
    })


# -- import -----------------------------------------------------------------------------------------------
def _attachments(value: Any, found: dict[str, Any]) -> Any:
    """`value` with every "attachment://<key>" string replaced by the sample's attachment (iterative)."""
    top = [value]
    todo: list[tuple[Any, Any]] = [(top, 0)]
    while todo:
        parent, key = todo.pop()
        v = parent[key]
        if isinstance(v, str) and v.startswith("attachment://") and isinstance(found.get(v[13:]), str):
            parent[key] = found[v[13:]]
        elif isinstance(v, dict):
            todo += [(v, k) for k in v]
        elif isinstance(v, list):
            todo += [(v, k) for k in range(len(v))]
    return top[0]


def _passed(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return {"C": True, "I": False, "P": False, "N": False}.get(value.upper())
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    return None


def _score(scores: dict[str, Any], order: list[str]) -> tuple[bool | None, dict[str, Any]]:
    names = [SCORER] + order + list(scores)
    name = next((n for n in names if isinstance(scores.get(n), dict)), None)
    if name is None:
        return None, {}
    s = scores[name]
    value = s.get("value")
    return _passed(value), {"inspect_score": {"scorer": name[:200], "value": value if isinstance(
        value, str | int | float | bool) else str(value)[:200], "explanation": opt_text(s.get("explanation"), 2000)}}


def _tokens(usage: Any) -> dict[str, int] | None:
    u = obj(usage)
    inp, cache_r, cache_w = (count(u.get(k)) or 0 for k in ("input_tokens", "input_tokens_cache_read",
                                                           "input_tokens_cache_write"))
    out = count(u.get("output_tokens"))
    if out is None and not inp:
        return None
    return {"prompt": inp + cache_r + cache_w, "completion": out or 0, "cached": cache_r}


def episodes(raw: bytes, name: str) -> list[Episode]:
    """The episodes (samples) of one Inspect log: an `.eval` archive, or a `.json` log."""
    if name.endswith(".eval"):
        archive = Archive(raw)
        header = obj(archive.json("header.json")) if "header.json" in archive.members else obj(
            archive.json("_journal/start.json"))
        samples = [archive.json(n) for n in sorted(archive.names()) if n.startswith("samples/")]
    else:
        header = json_object(raw)
        samples = items(header.get("samples"))
    spec = obj(header.get("eval"))
    if not spec or not isinstance(spec.get("task"), str):
        raise Unreadable("not an Inspect log (no eval.task)")
    order = [obj(s).get("name") for s in items(obj(header.get("results")).get("scores"))]
    out = []
    for k, s in enumerate(samples):
        if not isinstance(s, dict) or not isinstance(s.get("messages"), list):
            raise Unreadable(f"sample {k}: not an object with a list of messages")
        out.append(_episode(spec, s, k, [n for n in order if isinstance(n, str)], header.get("version")))
    return out


def _episode(spec: dict[str, Any], s: dict[str, Any], k: int, order: list[str], version: Any) -> Episode:
    s = _attachments(s, obj(s.get("attachments")))
    meta = obj(obj(s.get("metadata")).get(EXTRA_KEY))
    head = obj(meta.get("header"))
    solver = opt_text(spec.get("solver"), 200)
    ep = Episode(fmt="inspect", format_version=f"Inspect log version {count(version)}", episode=k,
                 harness=text(obj(head.get("source")).get("harness"), 200) or (NATIVE_HARNESS if head else "inspect"),
                 harness_version=opt_text(obj(spec.get("packages")).get("inspect_ai"), 100),
                 task_id=text(str(s.get("id")) if isinstance(s.get("id"), int | str) else "", 500) or f"sample-{k}",
                 model=text(spec.get("model"), 200) or "unknown", backend="inspect",
                 scenario=text(spec.get("task"), 200), sample=max((count(s.get("epoch")) or 1) - 1, 0))
    if head:
        ep.native = {"header": {k: v for k, v in head.items() if k != "source"}, "outcome": obj(meta.get("outcome")),
                     "prompt": obj(meta.get("prompt"))}
    ep.passed, ep.score_details = _score(obj(s.get("scores")), order)
    ep.elapsed = seconds(s.get("total_time")) or 0.0
    ep.timestamp = opt_text(s.get("started_at"), 100) or opt_text(spec.get("created"), 100)
    ep.error = opt_text(obj(s.get("error")).get("message"), 4000)
    model_events = [obj(e.get("output")).get("usage") for e in items(s.get("events"))
                    if isinstance(e, dict) and e.get("event") == "model"]
    replies = [m for m in items(s.get("messages")) if isinstance(m, dict) and m.get("role") == "assistant"]
    per_reply = model_events if len(model_events) == len(replies) else [None] * len(replies)
    _steps(ep, items(s.get("messages")), per_reply)
    totals = [_tokens(u) for u in obj(s.get("model_usage")).values()]
    if totals and all(totals):
        ep.totals = {key: sum(t[key] for t in totals if t) for key in ("prompt", "completion", "cached")}
    limit = obj(s.get("limit")).get("type")
    last = replies[-1] if replies else {}
    ep.exit_reason = ("error" if ep.error else LIMITS.get(limit, "error") if isinstance(limit, str)
                      else "submitted" if replies and not last.get("tool_calls") else None)
    ep.final = text(last.get("content")) if replies and not last.get("tool_calls") else None
    ep.details = {"eval_id": opt_text(spec.get("eval_id"), 100), "solver": solver, "limit": opt_text(limit, 100),
                  "uuid": opt_text(s.get("uuid"), 100)}
    return ep


def _steps(ep: Episode, messages: list[Any], per_reply: list[Any]) -> None:
    turn, names, n_reply, structured = -1, {}, 0, False
    for n, m in enumerate(messages):
        if not isinstance(m, dict):
            raise Unreadable(f"messages/{n}: not an object")
        role, content = m.get("role"), m.get("content")
        ours = obj(obj(m.get("metadata")).get(EXTRA_KEY))
        if isinstance(ours.get("demo"), dict):
            ep.demo.append({"role": role, **ours["demo"], "content": text(content)})
            continue
        recs = items(ours.get("steps"))
        calls = [c for c in items(m.get("tool_calls")) if isinstance(c, dict)]
        if role == "system" and turn < 0 and not ep.system and not recs:
            ep.system = text(content)
        elif role == "user" and turn < 0 and not ep.task and not recs:
            ep.task = text(content)
        elif role == "assistant":
            turn += 1
            structured |= bool(calls)
            usage = per_reply[n_reply] if n_reply < len(per_reply) else None
            n_reply += 1
            if recs:
                _restore(ep, recs, text(content), calls, m)
                continue
            parts = content if isinstance(content, list) else []
            reasoning = "\n".join(p["reasoning"] for p in parts if isinstance(p, dict) and isinstance(
                p.get("reasoning"), str)) or None
            said = text([p for p in parts if isinstance(p, dict) and p.get("type") == "text"] if parts else content)
            opening = {"raw": said, "tokens": _tokens(usage) if usage else None}
            if reasoning is not None or (calls and said):
                ep.add("thought", turn, text=reasoning if reasoning is not None else said, **opening)
                opening = {}
            for c in calls:
                fn = text(c.get("function"), 200) or "?"
                args = obj(c.get("arguments"))
                ep.add("tool_call", turn, text=call_text(fn, args), tool=fn, args=args,
                       call_id=opt_text(c.get("id"), 200), **opening)
                names[c.get("id")] = fn
                opening = {}
            if not calls:
                ep.add("final", turn, text=said, **opening)
        elif recs:
            ep.steps += [s for r in recs if (s := restore(r, {"text": text(content)})) is not None]
        elif role == "tool":
            cid = opt_text(m.get("tool_call_id"), 200)
            err = obj(m.get("error")).get("message")
            ep.add("tool_result", max(turn, 0), text=text(content) + (f"\n{text(err)}" if isinstance(err, str) else ""),
                   tool=opt_text(m.get("function"), 200) or names.get(cid), call_id=cid)
        else:
            ep.add("feedback", max(turn, 0), text=text(content))
    ep.protocol = "native" if structured else "text"


def _restore(ep: Episode, recs: list[Any], said: str, calls: list[dict[str, Any]], m: dict[str, Any]) -> None:
    n_call = 0
    for k, rec in enumerate(recs):
        values: dict[str, Any] = {"raw": said} if k == 0 else {}
        if isinstance(rec, dict) and rec.get("type") == "tool_call" and n_call < len(calls):
            c = calls[n_call]
            values.update(tool=c.get("function"), args=c.get("arguments"), call_id=c.get("id"))
            n_call += 1
        if (s := restore(rec, values)) is None:
            raise Unreadable(f"message {opt_text(m.get('id'), 100)}: a malformed {EXTRA_KEY} record")
        ep.steps.append(s)
