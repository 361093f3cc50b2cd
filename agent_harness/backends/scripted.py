"""Scripted backend: deterministic replies through the normal text protocol.

- ``oracle``: replays each task's reference tool calls (``Task.oracle``), then writes FINAL.
- ``null``: submits at once without changing anything.
- a JSONL path: raw model replies. Each line is either a string / ``{"text": ...}`` (replies for
  every conversation, the k-th assistant turn gets the k-th line) or
  ``{"task": "<task id>", "replies": [...]}`` (replies for one task; a reply may be a list of
  strings, one per search candidate, the last one repeated). When replies run out the backend
  writes FINAL.

Each request's ``RequestMeta`` (``complete(conversation, params, meta)``) names its episode's task,
strategy and turn: the oracle replays that task's calls, a per-task script that task's replies, and
the k-th turn gets the k-th reply. Under the reflect and single-shot strategies the oracle answers with the
reference file in a ```python block and ``null`` with no code; to a prefilled assistant turn (the
calibrated single-shot, reflect's bigcode draft) the oracle answers with the rest of the reference file,
continuing the prefill as a model would. Without meta the turn is the number of assistant messages so
far, and the oracle, which needs its task, refuses.

A scoring request (`params.prompt_logprobs`, `--agent branch`) gets the prefilled reply in words, each at
log-probability -0.5; the oracle doubts two of them: the word where the reply leaves the reference file (the
reference's word preferred) and, more strongly, its last word (`pass` preferred, a decoy that fails). Under
branch the oracle's greedy answer (candidate 0) copies the file as given, so only a branch can fix it.

A native-protocol request (`params.tools` set) is answered natively: the oracle's call in Qwen's
``<tool_call>`` text on even turns and as a structured tool call (as a server that parses calls returns
it) on odd turns, so one run reads both; its FINAL and ``null``'s are replies with no call. To a request
whose assistant turn is prefilled with the start of a call (tool_choice required) they answer with the
rest of the call, and finish with a call of the submit tool.

Requests go through the same `Batcher` as the transformers backend's, so scripted runs exercise real
batching; the replies never depend on the batch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..jsonl import read_jsonl
from ..types import (
    BackendInfo,
    Completion,
    Conversation,
    FinishReason,
    GenParams,
    NativeCall,
    RequestMeta,
    Task,
    TokenScore,
)
from . import scoring
from .batching import Batcher
from .stops import cut_at_stop, stop_strings

if TYPE_CHECKING:
    from ..registry import ModelSpec

FINAL_TEXT = "THOUGHT: I am done.\nFINAL: done"


def render_call(thought: str, tool: str, args: dict[str, Any]) -> str:
    return f"THOUGHT: {thought}\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


def tagged_call(tool: str, args: dict[str, Any]) -> str:
    """A call in Qwen's (and Hermes') `<tool_call>` text, as its chat template writes calls."""
    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': args})}\n</tool_call>"


def native_reply(turn: int, thought: str, tool: str, args: dict[str, Any]) -> tuple[str, tuple[NativeCall, ...]]:
    """A native reply: the call in the template's `<tool_call>` text (even turns) or structured (odd turns)."""
    if turn % 2:
        return thought, (NativeCall(tool, json.dumps(args), f"scripted_{turn}"),)
    return f"{thought}\n{tagged_call(tool, args)}", ()


def forced_call(prefill: str, tool: str, args: dict[str, Any]) -> str:
    """The rest of a call whose start `prefill` is (tool_choice required)."""
    call = tagged_call(tool, args)
    return call[len(prefill):] if call.startswith(prefill) else call


Reply = str | tuple[str, ...]  # a scripted reply, or one per search candidate


def _load_script(path: Path) -> tuple[list[str], dict[str, list[Reply]]]:
    shared: list[str] = []
    per_task: dict[str, list[Reply]] = {}
    for n, item in read_jsonl(path, "script"):
        if isinstance(item, str):
            shared.append(item)
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            shared.append(item["text"])
        elif (isinstance(item, dict) and isinstance(item.get("task"), str)
              and isinstance(item.get("replies"), list)):
            per_task.setdefault(item["task"], []).extend(
                tuple(map(str, r)) or ("",) if isinstance(r, list) else str(r) for r in item["replies"])
        else:
            raise ConfigError(
                f"{path}:{n}: expected a string, {{'text': ...}} or {{'task': ..., 'replies': [...]}}"
            )
    return shared, per_task


class ScriptedBackend:
    """Replays fixed replies; the same inputs always give the same outputs."""

    def __init__(self, mode: str, script_path: Path | None = None, batch_delay_s: float = 0.0) -> None:
        self.mode = mode
        self.batch_delay_s = batch_delay_s
        self.info = BackendInfo(requested="scripted", used="scripted", details={"script": mode})
        self._shared: list[str] = []
        self._per_task: dict[str, list[Reply]] = {}
        if script_path is not None:
            self._shared, self._per_task = _load_script(script_path)
        self._batcher = Batcher(self._answer, name=f"scripted {mode}")

    def _reply(self, conv: Conversation, meta: RequestMeta | None,
               native: bool = False) -> str | tuple[str, tuple[NativeCall, ...]]:
        task = meta.task if meta is not None else None
        turn = meta.turn if meta is not None else sum(m["role"] == "assistant" for m in conv)
        prefill = conv[-1]["content"] if conv and conv[-1]["role"] == "assistant" else None
        # native with a prefilled call (tool_choice required): every reply continues a call, submit finishes
        forced = prefill if native else None
        if meta is not None and meta.strategy not in ("react", "search") and self.mode in ("oracle", "null"):
            writes = [c["args"]["content"] for c in meta.task.oracle if c["tool"] == "write_file"]
            given = _given(meta.task)
            if (self.mode == "oracle" and meta.strategy == "branch" and meta.candidate == 0 and prefill is not None
                    and given is not None and given.startswith(prefill)):
                return given[len(prefill):]  # the greedy program copies the code it was shown
            if self.mode == "oracle" and writes and prefill is not None and writes[-1].startswith(prefill):
                return writes[-1][len(prefill):]
            if self.mode == "oracle" and writes:
                return f"Here is the fixed code:\n```python\n{writes[-1]}\n```"
            return "The code looks correct to me as it is."
        if self.mode == "null":
            if forced is not None:
                return forced_call(forced, "submit", {"summary": "no changes"})
            return "I will leave the code as it is." if native else \
                "THOUGHT: I will leave the code as it is.\nFINAL: no changes"
        if self.mode == "oracle":
            if task is None:
                raise ConfigError("scripted oracle: the request names no task (pass meta=RequestMeta(task))")
            if turn < len(task.oracle):
                call = task.oracle[turn]
                if forced is not None:
                    return forced_call(forced, call["tool"], call.get("args", {}))
                if native:
                    return native_reply(turn, f"Reference step {turn + 1}.", call["tool"], call.get("args", {}))
                return render_call(f"Reference step {turn + 1}.", call["tool"], call.get("args", {}))
            if forced is not None:
                return forced_call(forced, "submit", {"summary": "applied the reference fix"})
            return "The reference fix is in place." if native else \
                "THOUGHT: The reference fix is in place.\nFINAL: applied the reference fix"
        replies: list[Reply] = [*self._per_task.get(task.id, self._shared)] if task is not None else [*self._shared]
        said = replies[turn] if turn < len(replies) else FINAL_TEXT
        return said if isinstance(said, str) else said[min(meta.candidate if meta else 0, len(said) - 1)]

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        if meta is None and self.mode == "oracle":  # refused here, so the batch it would join goes on
            raise ConfigError("scripted oracle: the request names no task (pass meta=RequestMeta(task))")
        return await self._batcher.submit(conversation, params, meta)

    def stats(self) -> dict[str, float]:
        return self._batcher.stats()

    def _answer(self, conversations: list[Conversation], params: GenParams, seeds: list[int | None],
                metas: list[RequestMeta | None]) -> list[Completion]:  # the batch function; replies do not sample
        if self.batch_delay_s:
            time.sleep(self.batch_delay_s)
        out = []
        for conv, meta in zip(conversations, metas, strict=True):
            start = time.perf_counter()
            if params.prompt_logprobs:
                scoring.check(conv, params)
                scores = self._scores(conv[-1]["content"], meta) if self.mode == "oracle" else _tokens(
                    conv[-1]["content"], {})
                out.append(Completion("", sum(len(m["content"].split()) for m in conv), 0, "stop",
                                      time.perf_counter() - start, scores=scores))
                continue
            said = self._reply(conv, meta, native=bool(params.tools))
            text, calls = said if isinstance(said, tuple) else (said, ())
            # Stop strings apply as they would for a real model.
            finish: FinishReason = "stop"
            cut = cut_at_stop(text, stop_strings(params))
            text = text if cut is None else cut
            words = text.split()
            if len(words) > params.max_tokens:
                text, finish = " ".join(words[: params.max_tokens]), "length"
            prompt_tokens = sum(len(m["content"].split()) for m in conv)
            out.append(
                Completion(
                    text=text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=min(len(words), params.max_tokens),
                    finish_reason=finish,
                    latency_s=time.perf_counter() - start,
                    tool_calls=calls,
                )
            )
        return out

    def _scores(self, content: str, meta: RequestMeta | None) -> tuple[TokenScore, ...]:
        """The oracle's scores of a prefilled reply: the word of `content` where it leaves the reference file is
        doubted (the reference's word preferred) and, more strongly, its last word (a decoy: `pass` preferred),
        so a search over doubts tries a wrong branch before the right one."""
        writes = [c["args"]["content"] for c in meta.task.oracle if c["tool"] == "write_file"] if meta else []
        words = list(_WORD.finditer(content))
        if not writes or not words:
            return _tokens(content, {})
        ref = writes[-1]
        doubts: dict[int, list[tuple[str, float]]] = {words[-1].start(): [("pass", -0.1)]}
        n = len(os.path.commonprefix([content, ref]))
        at = next((m.start() for m in words if m.start() <= n < m.end()), None)
        fix = _WORD.match(ref, at) if at is not None else None
        if at is not None and fix is not None and fix.group():
            doubts.setdefault(at, []).append((fix.group(), -0.3))
        return _tokens(content, doubts)

    def close(self) -> None:
        self._batcher.close()


_WORD = re.compile(r"\s*\S+|\s+")


def _tokens(content: str, doubts: dict[int, list[tuple[str, float]]]) -> tuple[TokenScore, ...]:
    """`content` in words, each with log-probability -0.5; a word starting at a doubt's offset has its others."""
    return tuple(TokenScore(m.start(), m.group(), -0.5, tuple(doubts.get(m.start(), ())))
                 for m in _WORD.finditer(content))


def _given(task: Task) -> str | None:
    """The file the oracle's last write replaces, as the task gives it."""
    paths = [c["args"].get("path") for c in task.oracle if c["tool"] == "write_file"]
    return task.files.get(paths[-1]) if paths and isinstance(paths[-1], str) else None


def slow_start(delay_s: float) -> None:
    """Stand-in for an engine that loads in a child process, as vLLM's does: the child runs `delay_s` s
    and the start waits for it. Like vLLM's wait for its engine, this one swallows KeyboardInterrupt, and
    a start cut short leaves the child running: stopping both is the harness's job (tests/test_signals.py)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", str(delay_s)])
    while True:
        try:
            child.wait()
            return
        except KeyboardInterrupt:  # vllm.utils.network_utils.zmq_socket_ctx does this during the engine start
            continue


def create(spec: ModelSpec) -> ScriptedBackend:
    if spec.start_delay_s:
        slow_start(spec.start_delay_s)
    script = spec.script or ""
    if script in ("oracle", "null"):
        return ScriptedBackend(script, batch_delay_s=spec.batch_delay_s)
    path = Path(script)
    if not path.is_absolute():
        from ..registry import PROJECT_ROOT

        path = PROJECT_ROOT / path
    backend = ScriptedBackend("replay", path, spec.batch_delay_s)
    backend.info.details["script"] = str(path)
    return backend
