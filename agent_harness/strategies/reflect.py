"""The reflect strategy: propose the whole fixed function, run the visible tests, reflect on the failure.

Each iteration is one model turn. The reply's code is extracted (by the scenario), checked
without running it (syntax, then the entry point and its parameters), written to the workspace
and tested in the sandbox. On a failure the next prompt holds only the task, the last extracted
code and the failing check, not the whole history: small models copy what their context holds.
A version already tried gets "try a different approach" with its known failure instead of a
second test run. Temperature rises per iteration (seeded; both recorded on each attempt step).
With `draft="bigcode"` (the default) the first turn is asked as the calibrated single-shot asks (the
declaration prefilled, bigcode's stop words and post-processing); the turns after it are asked in chat
form, the draft shown as the last attempt. `--reflect-draft chat` asks the first turn in chat form too
(the default before 2026-11-27: 18 of 164 tasks against 26 for the 0.5B, bench/RESULTS.md).

`ReflectEpisode` has the shape of `agent.Episode` (prompt, gen_params, advance, done, steps, ...),
so the runner's tick and streaming loops run it unchanged. Scenarios opt in by implementing
`Reflectable`; the others (repo and security scenarios) are refused with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ConfigError, ToolError
from ..sandbox.workspace import Workspace
from ..scenarios import SingleShot
from ..scenarios.bigcode_prompt import FixPrompt
from ..tools import ToolOptions, find_failure, put_file, run_tool, syntax_error, whole_statement
from ..traces.steps import Attempt, CheckResult, Feedback, Step, reply_record
from ..types import Completion, Conversation, GenParams, Message, RequestMeta, Task, request_seed
from .config import ReflectConfig
from .episode import Ask, EpisodeState
from .single_shot import MIN_TOKENS, Calibrated, bigcode_params

if TYPE_CHECKING:
    from ..traces.model import Trace

ASK = "Reply with the complete fixed function in one ```python code block."
MAX_FAILURE_CHARS = 800
MAX_ECHO_CHARS = 2000  # a reply without code, echoed back as the assistant turn


@runtime_checkable
class Reflectable(SingleShot, Protocol):
    """A scenario whose answer is one file of code the strategy can extract, check and test."""

    def target_file(self, task: Task) -> str:
        """The workspace file the extracted code replaces."""
        ...

    def fixed_source(self, task: Task, completion: str) -> str | None:
        """The file text a completion stands for; None when it holds no code."""
        ...

    def check_source(self, task: Task, source: str) -> str | None:
        """Why `source` cannot be tested (entry point missing, parameters changed), or None."""
        ...


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _whole_statement(files: dict[str, str], rel: str, line: int) -> str | None:
    """The statement of task file `rel` at `line`, all its lines, when it is short enough to show."""
    text = whole_statement(files[rel], line) if rel in files else None
    return text if text and len(text) <= MAX_FAILURE_CHARS else None


def _failure(obs: str, files: dict[str, str], values: bool) -> str:
    """The failing check of a test run, in a few lines (with its values when `values`: --show-values);
    else the run's status and output tail."""
    failure = find_failure(obs, values=values)
    found = failure.summary() if failure else None
    if failure and (c := failure.check):
        whole = _whole_statement(files, c.file, c.line)
        if whole and "\n" in whole:
            found = failure.summary(f"Failing check ({c.file}, line {c.line}):\n{whole}")
    if found:
        return found
    lines = obs.splitlines()
    text = "\n".join([lines[0], *lines[1:][-10:]]) if lines else "(no output)"
    return text if len(text) <= MAX_FAILURE_CHARS else text[:MAX_FAILURE_CHARS] + " ..."


@dataclass
class ReflectEpisode(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Reflectable
    config: ReflectConfig = field(default_factory=ReflectConfig)
    tool_options: ToolOptions = field(default_factory=ToolOptions)
    sample: int = 0
    _last: Message | None = None  # the last attempt as the assistant turn of the next prompt
    _feedback: str = ""
    _tried: dict[str, tuple[int, str, bool]] = field(default_factory=dict)  # code -> attempt, failure, valid

    def __post_init__(self) -> None:
        self.draft: FixPrompt | None = None  # the first turn's bigcode-style prompt (the default draft)
        if self.config.draft == "bigcode":
            if not isinstance(self.scenario, Calibrated):
                raise ConfigError("--reflect-draft bigcode needs a scenario with a bigcode-style prompt")
            self.draft = self.scenario.fix_prompt(self.task)
        self.task_messages: Conversation = self.scenario.single_shot_prompt(self.task)
        self.system_prompt = next((m["content"] for m in self.task_messages if m["role"] == "system"), "")
        self.user_prompt = self.task_messages[-1]["content"]
        self.target = self.scenario.target_file(self.task)
        self._original = _norm(self.task.files.get(self.target, ""))
        self.params = replace(self.params, max_tokens=max(self.params.max_tokens, MIN_TOKENS), stop=())

    def run(self, ask: Ask) -> None:
        """Ask for the whole fixed function, test it, feed the failure back; until it passes or the
        attempts run out."""
        while not self.done:
            reply = ask(self.prompt(), self.gen_params(), RequestMeta(self.task, "reflect", self.turn))
            self.advance(reply)

    def annotate(self, trace: Trace) -> None:
        trace.agent.reflect = self.config.record()

    def prompt(self) -> Conversation:
        if self.draft is not None and self.turn == 0:
            return self.draft.conversation()
        if self._last is None:
            return list(self.task_messages)
        return [*self.task_messages, self._last, {"role": "user", "content": self._feedback}]

    def gen_params(self) -> GenParams:
        cfg = self.config
        temp = max(self.params.temperature, cfg.temperatures[min(self.turn, len(cfg.temperatures) - 1)])
        seed = None if self.params.seed is None else request_seed(self.params.seed, self.task.id, self.sample,
                                                                     self.turn)
        params = self.params
        if self.draft is not None and self.turn == 0:
            params = bigcode_params(params, self.config.recipe)
        if temp == params.temperature and seed == params.seed:
            return params
        return replace(params, temperature=temp, seed=seed)

    def advance(self, c: Completion) -> list[Step]:
        """Consume one reply: extract, check, write, test; then the feedback for the next turn."""
        first = len(self.steps)
        params = self.gen_params()
        self._count(c)
        source = self._source(c.text)
        self._add(Attempt(**self._at(), text=source or "", **reply_record(c), temperature=params.temperature,
                          seed=params.seed))
        if c.finish_reason == "length" and c.completion_tokens == 0:
            self.exit_reason = "context"
        else:
            try:
                check, message, output = self._evaluate(source)
            except Exception as e:  # a harness fault ends this episode, never the run
                self._add(Feedback(**self._at(), text=f"harness error: {type(e).__name__}: {e}", check="error"))
                self.exit_reason, self.turn = "error", self.turn + 1
                return self.steps[first:]
            self._add(Feedback(**self._at(), text=message, check=check,
                               tool="run_tests" if output is not None else None, output=output))
            if check == "passed":
                self.exit_reason = "submitted"
            self._feedback = f"{message}\n{ASK}" if check != "passed" else ""
            self._last = {"role": "assistant", "content": f"```python\n{source.rstrip()}\n```" if source
                          else (c.text[:MAX_ECHO_CHARS] or "(empty reply)")}
        self.turn += 1
        if not self.done and self.turn >= self.config.iters:
            self.exit_reason = "max_steps"
        return self.steps[first:]

    def _source(self, completion: str) -> str | None:
        """The module a reply stands for; a bigcode draft is post-processed as bigcode does (no body: no code)."""
        if self.draft is not None and self.turn == 0:
            program = self.draft.program(completion)
            return program + "\n" if program != self.draft.prefill else None
        return self.scenario.fixed_source(self.task, completion)

    def _evaluate(self, source: str | None) -> tuple[CheckResult, str, str | None]:
        """(check, the message for the model, the test output when the tests ran)."""
        if source is None:
            return "no_code", "Your reply has no code.", None
        key, attempt = _norm(source), self.turn + 1
        if key in self._tried:
            n, failure, valid = self._tried[key]
            if valid:
                self._write(self.target, source)  # the workspace holds the latest valid version
            return "repeat", f"This is the same code as your attempt {n}, which failed:\n{failure}\n" \
                "Try a different approach.", None
        error = syntax_error(source, self.target)
        if error:
            self._tried[key] = (attempt, error, False)
            return "syntax", f"Your code has a syntax error, so the tests were not run:\n{error}", None
        problem = self.scenario.check_source(self.task, source)
        if problem:
            self._tried[key] = (attempt, problem, False)
            return "signature", f"The tests were not run: {problem}", None
        try:
            self._write(self.target, source)
            for rel, text in self.task.files.items():  # tests the last run may have rewritten
                if rel != self.target:
                    self._write(rel, text)
        except ToolError as e:
            return "write_error", f"Your code could not be saved and tested: {e}", None
        result = run_tool(self.ws, "run_tests", {}, replace(self.tool_options, extract_failure=False))
        obs = result.text
        if result.tests_passed:
            return "passed", "The tests passed.", obs
        failure = _failure(obs, self.task.files, self.tool_options.show_values)
        self._tried[key] = (attempt, failure, True)
        unchanged = " This is the original code, unchanged: the bug is still in it." if key == self._original else ""
        return "failed", f"Your code fails the tests.{unchanged} The failing check:\n{failure}", obs

    def _write(self, rel: str, text: str) -> None:
        put_file(self.ws, rel, text)
