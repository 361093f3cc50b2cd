"""The tool agent: `Episode.run` asks the model, parses its reply, runs the tool and shows the
observation, until the model submits or a budget ends the episode. `run_episode` runs one episode
on a backend outside a run (tests, scripts).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, LimitsExceeded, Submitted, ToolError
from ..protocol import (
    NATIVE_STOP_STRINGS,
    STOP_STRINGS,
    ParsedReply,
    initial_file_note,
    initial_fix_note,
    initial_test_note,
    parse_reply,
    render_system_prompt,
)
from ..protocol.native import CALL_PREFILL, SUBMIT, parse_native, render_native_system_prompt, tool_schemas
from ..sandbox.workspace import Workspace
from ..tools import ToolResult as ToolOutput
from ..tools import restore_files, run_tool, tools_for
from ..traces.steps import (
    ElidedMessage,
    Final,
    InitialTests,
    Opening,
    ParseError,
    Restart,
    Step,
    SubmitCheck,
    Thought,
    ToolCall,
    ToolResult,
    reply_record,
    server_calls,
)
from ..types import Backend, Completion, Conversation, GenParams, RequestMeta, Task, ToolSpec, request_seed
from . import history
from .config import AgentConfig
from .demo import demo_messages
from .episode import Ask, EpisodeState
from .scratch import is_test_file

if TYPE_CHECKING:
    from ..traces.model import Trace

log = logging.getLogger(__name__)

FINAL_IGNORED = "(Your FINAL: was ignored: it came after a TOOL_CALL. Write FINAL: alone, after checking the result.)"
FINAL_REFUSED = "Your FINAL was not accepted: the tests fail (output below). Fix the code, run_tests, then FINAL."
NOTHING_CHANGED = "You have not changed any file yet."
REPEATED_CALL = "You made exactly the same call twice in a row. Its result has not changed; try something else."


def example_file(task: Task) -> str | None:
    """A file of the task to use in the prompt's examples: the first one that is not a test."""
    return next((f for f in task.files if not is_test_file(f)), None)


@dataclass
class Episode(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    config: AgentConfig = field(default_factory=AgentConfig)
    temperature_schedule: list[float] | None = None
    sample: int = 0  # with params.seed (the run seed) and the turn, derives each request's seed
    head: Conversation = field(default_factory=list)  # system prompt, demo and task message: made by begin()
    exchanges: list[history.Exchange] = field(default_factory=list)  # the turns since the conversation began
    _last_call: str | None = None
    _replies: list[str] = field(default_factory=list)
    _refused: int = 0
    _elided: history.Elisions = field(default_factory=dict)
    _began: int = 0  # position of the step the conversation began again at (its last restart; 0: none)

    def __post_init__(self) -> None:
        self.native = self.config.protocol == "native"  # tools as `tools=`, calls as the template's tool calls
        self.submit = self.config.forced_calls  # every reply a call; the submit tool ends the episode
        self.tools = {t.name: t for t in agent_tools(self.ws, self.config)}
        specs, example = list(self.tools.values()), example_file(self.task)
        self.system_prompt = (render_native_system_prompt(specs, example, self.submit) if self.native else
                              render_system_prompt(specs, example_path=example, examples=not self.config.demo))
        self.demo = list(demo_messages(tuple(self.tools), self.config.format_reminder, self.native, self.submit,
                                       self.config.demo_source, self.task.id)) if self.config.demo else []
        self.user_prompt = ""  # the task message, made by begin()
        stops = tuple(dict.fromkeys((*self.params.stop, *(NATIVE_STOP_STRINGS if self.native else STOP_STRINGS))))
        self.params = replace(self.params, stop=stops, tools=tuple(specs) if self.native else ())

    def annotate(self, trace: Trace) -> None:
        if self.native:
            trace.prompt.tools = tool_schemas(self.params.tools)
        if self.submit:
            trace.prompt.prefill = CALL_PREFILL

    def run(self, ask: Ask) -> None:
        """Ask, parse, run the tool, observe; until the model submits or a budget ends the episode."""
        self.begin()
        while not self.done:
            reply = ask(self.prompt(), self.gen_params(), RequestMeta(self.task, "react", self.turn))
            self.advance(reply)

    @property
    def messages(self) -> Conversation:
        """The whole conversation, nothing condensed."""
        return history.conversation(self.head, self.exchanges)

    @property
    def first_turn(self) -> int:
        """The position of the first reply's message."""
        return len(self.head)

    def begin(self) -> None:
        """The conversation up to the first reply: system prompt, demo and the task message (the visible
        tests run first when initial_tests is on). Once: a chain begins the phase before it runs."""
        if self.head:
            return
        self.user_prompt = self._task_message()
        self.head = [{"role": "system", "content": self.system_prompt}, *self.demo,
                     {"role": "user", "content": self.user_prompt}]

    def _task_message(self) -> str:
        """The statement, then what the helpers add: the file to fix as it is (initial_files), where the
        tests fail (initial_tests, recorded as a step) and, when a file was shown, the request to fix it."""
        text, shown = self.task.statement, []
        if self.config.initial_files and "read_file" in self.tools:  # small models otherwise write it blind
            for path in self.task.focus:
                note = initial_file_note(path, self._execute("read_file", {"path": path}))
                text += note
                shown += [path] if note else []
        if self.config.initial_tests and self.ws.test_cmd:
            text += initial_test_note(self._initial_tests())
        if shown and "write_file" in self.tools:
            text += initial_fix_note(shown)
        return text

    def _initial_tests(self) -> ToolOutput:
        """Run the visible tests before a turn and record it, so a stale write's note can say where they fail."""
        result = self._execute("run_tests", {})
        self._add(InitialTests(**self._at(), text=result.text, tool="run_tests", tests=history.test_record(result)))
        return result

    def _recent(self) -> list[Step]:
        """The steps of the conversation the model sees now (all of them unless it restarted)."""
        return self.steps[self._began:]

    def prompt(self) -> Conversation:
        if self.submit:  # tool_choice required: the reply begins as a call (history condensed is text-only)
            return [*self.messages, {"role": "assistant", "content": CALL_PREFILL}]
        if self.config.history == "full":
            return self.messages
        return history.conversation(self.head, self.exchanges, history.elisions(self._recent()))

    def gen_params(self) -> GenParams:
        temp = self.params.temperature
        if self.temperature_schedule:
            temp = self.temperature_schedule[min(self.turn, len(self.temperature_schedule) - 1)]
        # Greedy decoding of a repeated context repeats forever; one sampled step can break out.
        looping = len(self._replies) >= 2 and self._replies[-1] == self._replies[-2]
        if looping and self.config.loop_temperature is not None:
            temp = max(temp, self.config.loop_temperature)
        if self.config.stale_temperature is not None:  # copying a failed version: sample away from it
            temp = max(temp, history.stale_temperature(self.steps, self.config.stale_temperature))
        seed = None if self.params.seed is None else request_seed(self.params.seed, self.task.id, self.sample,
                                                                     self.turn)
        return replace(self.params, temperature=temp, seed=seed)

    def advance(self, c: Completion) -> list[Step]:
        """Consume one model reply: parse it, run its tool, append the observation."""
        first = len(self.steps)
        if self.submit and not c.tool_calls:  # the model continued the prefilled start of a call
            c = replace(c, text=CALL_PREFILL + c.text)
        self._count(c)
        opening: Opening = {**reply_record(c), "temperature": self.gen_params().temperature}
        elided = self._new_elisions()
        if elided:
            opening["elided"] = elided
        if c.endpoint is not None:
            opening["endpoint"] = c.endpoint
        if c.tool_calls:
            opening["server_calls"] = server_calls(c)
        self.exchanges.append(history.Exchange(self.turn, c.text))
        self._replies.append(c.text)
        try:
            if c.finish_reason == "length" and c.completion_tokens == 0:
                raise LimitsExceeded("the conversation no longer fits in the context window", "context")
            try:
                reply = parse_native(c.text, c.tool_calls, self.tools) if self.native else \
                    parse_reply(c.text, self.tools)
            except FormatError as e:
                if c.finish_reason == "length":  # the likeliest cause, and the one the model can act on
                    e = FormatError(f"Your reply was cut off at the limit of {self.params.max_tokens} tokens. "
                                    f"Write less: no tests or examples in files. {e}")
                self._respond(self._add(ParseError(**self._at(), text=str(e), **opening)))
            else:
                if reply.tool == SUBMIT.name:  # tool_choice required: the submit call is the final answer
                    summary = (reply.args or {}).get("summary")
                    reply = replace(reply, tool=None, args=None, final=str(summary or "").strip() or "(no summary)")
                if reply.thought:
                    self._add(Thought(**self._at(), text=reply.thought, **opening))
                    opening = {}
                if reply.final is not None:
                    self._add(Final(**self._at(), text=reply.final, repairs=reply.repairs, **opening))
                    self._review_final(reply.final)
                else:
                    self._call(reply, opening)
        except Submitted as s:
            self.final, self.exit_reason = str(s), "submitted"
        except LimitsExceeded as e:
            self.exit_reason = e.reason
        return self._end_turn(first)

    def _end_turn(self, first: int) -> list[Step]:
        self.turn += 1  # every model reply is a turn, the submitting one included
        if not self.done:
            try:
                self._check_limits()
            except LimitsExceeded as e:
                self.exit_reason = e.reason
        after = self._restart_after()
        if not self.done and after and history.stale_run(self._recent()) >= after:
            self._restart(after)
        return self.steps[first:]

    def _restart_after(self) -> int | None:
        """Stale writes in a row after which the conversation begins again (None: never)."""
        return self.config.restart_after

    def _restart(self, stale: int) -> None:
        """Begin the conversation again from the task message, with the task's files as given: the
        model copies its own stale writes from its context, temperature alone did not stop it."""
        self._began, self._last_call, self._elided, self.exchanges = len(self.steps), None, {}, []
        lost = restore_files(self.ws, self.task.files)
        note = f"{stale} stale writes in a row: the conversation begins again from the task, the files as given."
        self._add(Restart(**self._at(), text=note + (f" Not restored: {'; '.join(lost)}." if lost else "")))
        if self.config.initial_tests and self.ws.test_cmd:
            self._initial_tests()

    def _call(self, reply: ParsedReply, opening: Opening) -> None:
        call_id = f"call_{self.turn}"
        if self.native:  # the history shows the call as the template renders calls, the text beside it as content
            self.exchanges[-1].reply = reply.thought or ""
            self.exchanges[-1].calls = [history.native_call(call_id, reply.tool or "", reply.args or {})]
        self._add(ToolCall(**self._at(), text=json.dumps({"tool": reply.tool, "args": reply.args}), tool=reply.tool,
                           args=reply.args, call_id=call_id, repairs=reply.repairs, **opening))
        t0 = time.monotonic()
        args = reply.args or {}
        result = self._run_tool(reply.tool or "", args)
        facts = history.tool_facts(self.ws, self.steps, reply.tool, args, result, notes=self.config.stale_notes)
        obs = facts.text + (f"\n\n{FINAL_IGNORED}" if "final_after_call" in reply.repairs else "")
        self._respond(self._add(ToolResult(**self._at(), text=obs, tool=reply.tool, call_id=call_id,
                                           latency_s=time.monotonic() - t0, file=facts.file, tests=facts.tests,
                                           stale=facts.stale)))

    def _review_final(self, final: str) -> None:
        """Accept the FINAL, or refuse it (up to `submit_checks` times) while the visible tests fail:
        small models often submit without running the tests, or without changing anything."""
        if self._refused >= self.config.submit_checks or not self.ws.test_cmd:
            raise Submitted(final)
        result = self._execute("run_tests", {})
        if result.tests_passed:
            raise Submitted(final)
        self._refused += 1
        note = f"{FINAL_REFUSED} {NOTHING_CHANGED if not self.ws.changed_files() else ''}".rstrip()
        self._respond(self._add(SubmitCheck(**self._at(), text=result.text, tool="run_tests", note=note,
                                            tests=history.test_record(result))))

    def _respond(self, step: history.Answer) -> None:
        """The step that ends a turn, as the user message that answers its reply (history.user_message)."""
        self.exchanges[-1].answer = history.user_message(step, self.config.format_reminder, self.native, self.submit)

    def _new_elisions(self) -> list[ElidedMessage]:
        """The messages this turn's prompt shows condensed for the first time, for the trace."""
        if self.config.history == "full":
            return []
        now = history.elisions(self._recent())
        new: list[ElidedMessage] = [{"turn": t, "role": r, "text": text} for (t, r), text in now.items()
                                    if self._elided.get((t, r)) != text]
        self._elided = now
        return new

    def _run_tool(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        key = json.dumps([tool, args], sort_keys=True, default=repr)
        repeat = self.config.repeat_detection and key == self._last_call
        self._last_call = key
        if repeat:  # nothing ran: a repeated write leaves the file as the first one did
            return ToolOutput(REPEATED_CALL, changed=False if tool == "write_file" else None)
        return self._execute(tool, args)

    def _execute(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        """The tool's result; whatever it raises becomes an ERROR result and the episode goes on."""
        try:
            return run_tool(self.ws, tool, args, self.config.tool_options).safe()
        except ToolError as e:
            return ToolOutput.fault(e)
        except Exception as e:  # a fault the model's call provoked (OSError, RecursionError, ...)
            log.debug("tool %s raised", tool, exc_info=True)
            return ToolOutput.fault(e, (str(self.ws.root), str(self.ws.root.resolve())))

    def _spent(self) -> int:
        """The tokens the budget counts: every reply's, prompt and completion."""
        return self.prompt_tokens + self.completion_tokens

    def _check_limits(self) -> None:
        cfg = self.config
        if self.turn >= cfg.max_steps:
            raise LimitsExceeded(f"reached max_steps={cfg.max_steps}", "max_steps")
        if cfg.max_total_tokens and self._spent() >= cfg.max_total_tokens:
            raise LimitsExceeded(f"token budget {cfg.max_total_tokens} spent", "budget")
        if cfg.max_wall_s and time.monotonic() - self.started >= cfg.max_wall_s:
            raise LimitsExceeded(f"wall-time budget {cfg.max_wall_s}s spent", "budget")


def agent_tools(ws: Workspace, config: AgentConfig) -> list[ToolSpec]:
    """The tools the model is given: the workspace's (with edit_file under the edit action space, run_cmd
    alone under bash), and submit under native with tool_choice required."""
    tools = tools_for(ws, ("edit_file",) if config.action_space == "edit" else ())
    if config.action_space == "bash":
        tools = [t for t in tools if t.name == "run_cmd"]
    return [*tools, *([SUBMIT] if config.forced_calls else [])]


def run_episode(backend: Backend, episode: Episode) -> Episode:
    """Run one episode to the end on `backend`, outside a run (tests, scripts)."""
    from .asking import backend_asker

    episode.run(backend_asker(backend))
    return episode
