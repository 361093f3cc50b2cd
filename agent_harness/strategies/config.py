"""The strategies' settings, each defined once: name, type and default (a dataclass field), with its
one-line help and command-line spelling (`Setting`, the field's metadata).

The CLI makes its flags from these (cli.py), so a flag's help and default are the field's. A config's
`dump()` is the trace header's record of it and the fingerprint's input. A setting added after schema
1.3 names the value that behaves as before it existed (`added`): a dump leaves it out while it holds
that value, so the fingerprint of a trace made before the setting existed still matches (--resume).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..errors import ConfigError
from ..tools import ToolOptions
from .single_shot import recipe_record

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SETTING = "setting"  # the metadata key of a field's `Setting`
PARTS = "parts"  # the metadata key of a nested config's settings (AgentConfig.tool_options)


class _Value:
    """`Setting.sets` of a flag that takes a value."""

    def __repr__(self) -> str:
        return "VALUE"


VALUE: Any = _Value()
NOT_ADDED: Any = _Value()  # `Setting.added` of a setting that is as old as the fingerprint (1.3)


@dataclass(frozen=True)
class Setting:
    """How one setting is described and spelled on the command line."""

    help: str  # one line; "{default}" in it is replaced by the default
    flag: str = ""  # without its dashes; "": the field's name, dashes for underscores
    sets: Any = VALUE  # a switch (a helper off or on): the flag takes no value and sets the field to this
    type: Callable[[str], Any] = str  # how a value flag's text is read
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    zero_is_none: bool = False  # a value flag's 0 means "none" (no budget)
    added: Any = NOT_ADDED  # added after 1.3: the value that behaves as before it existed

    @property
    def switch(self) -> bool:
        return self.sets is not VALUE


def setting(default: Any, help: str, **cli: Any) -> Any:
    """A dataclass field holding one setting (see `Setting` for `cli`)."""
    return field(default=default, metadata={SETTING: Setting(help, **cli)})


@dataclass(frozen=True)
class Flagged:
    """A setting reachable from the command line: where it lives in its config, its default, its spelling."""

    path: tuple[str, ...]  # field names from the config down: ("demo",), ("tool_options", "syntax_check")
    default: Any
    setting: Setting

    @property
    def flag(self) -> str:
        return "--" + (self.setting.flag or self.path[-1].replace("_", "-"))

    @property
    def help(self) -> str:
        shown = "none" if self.default is None else str(self.default)
        text = self.setting.help.replace("{default}", shown)
        return text if self.setting.switch else f"{text} (default: {shown})"


def _default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def settings(config: type) -> Iterator[Flagged]:
    """Every setting of `config` (a dataclass) that has a flag, nested ones (`PARTS`) after their field."""
    for f in fields(config):
        if SETTING in f.metadata:
            yield Flagged((f.name,), _default(f), f.metadata[SETTING])
        for name, part in f.metadata.get(PARTS, {}).items():
            yield Flagged((f.name, name), getattr(_default(f), name), part)


def added_values(config: type) -> dict[str, Any]:
    """The settings of `config` added after 1.3, each with the value that behaves as before it existed."""
    return {f.name: s.added for f in fields(config)
            if (s := f.metadata.get(SETTING)) is not None and s.added is not NOT_ADDED}


def added_parts(config: type, name: str) -> dict[str, Any]:
    """`added_values` of the nested config in field `name` (AgentConfig.tool_options)."""
    parts = next(f for f in fields(config) if f.name == name).metadata.get(PARTS, {})
    return {k: s.added for k, s in parts.items() if s.added is not NOT_ADDED}


C = TypeVar("C", bound="DataclassInstance")


def build(config: type[C], values: dict[tuple[str, ...], Any]) -> C:
    """`config` with `values` (by path, as `settings` names them) set and the rest at their defaults."""
    top = {path[0]: v for path, v in values.items() if len(path) == 1}
    for f in fields(config):
        parts = {path[1]: v for path, v in values.items() if len(path) == 2 and path[0] == f.name}
        if parts:
            top[f.name] = replace(_default(f), **parts)
    return config(**top)


ActionSpace = Literal["tools", "edit", "bash"]
ACTION_SPACES: tuple[ActionSpace, ...] = ("tools", "edit", "bash")
DemoSource = Literal["builtin", "task"]
Handoff = Literal["given", "kept"]
HANDOFFS: tuple[Handoff, ...] = ("given", "kept")
DEMO_SOURCES: tuple[DemoSource, ...] = ("builtin", "task")
MAX_CANDIDATES = 64
History = Literal["full", "condensed"]
Protocol = Literal["text", "native"]
PROTOCOLS: tuple[Protocol, ...] = ("text", "native")
ToolChoice = Literal["auto", "required"]
TOOL_CHOICES: tuple[ToolChoice, ...] = ("auto", "required")


@dataclass
class AgentConfig:
    """The react agent's budgets and helper switches for one episode."""

    max_steps: int = setting(12, "model turns per episode", type=int)
    max_total_tokens: int | None = setting(60_000, "token budget per episode, prompt and completion (0: none)",
                                           type=int, zero_is_none=True)
    # None by default: in a batched run an episode's wall time is mostly waiting for other episodes.
    max_wall_s: float | None = setting(None, "wall-time budget per episode in seconds (it counts time spent "
                                       "batched)", type=float)
    repeat_detection: bool = setting(True, "helper off: the same call twice in a row gets a notice instead of "
                                     "the same result", flag="no-repeat-detection", sets=False)
    format_reminder: bool = setting(True, "helper off: the usual next step and the reply format after every "
                                    "observation", flag="no-format-reminder", sets=False)
    loop_temperature: float | None = setting(0.7, "helper off: sample (temperature {default}) after a reply "
                                             "identical to the previous one", flag="no-loop-break", sets=None)
    demo: bool = setting(True, "helper off: the worked example episode before the task (prompt examples "
                         "instead)", flag="no-demo", sets=False)
    submit_checks: int = setting(1, "helper off: refuse the first FINAL while the visible tests fail, showing "
                                 "their output", flag="no-submit-check", sets=0)
    history: History = setting("full", "condensed: reads of files since rewritten, rewritten attempts and their "
                               "test runs shown as one line each (the trace keeps them whole)",
                               choices=("full", "condensed"))
    stale_notes: bool = setting(True, "helper off: tell a write that changes nothing, or repeats a version that "
                                "failed, so", flag="no-stale-notes", sets=False)
    stale_temperature: float | None = setting(0.3, "helper off: sample warmer ({default}, +0.2 per repeat) while "
                                              "the last write was stale", flag="no-stale-temperature", sets=None)
    initial_tests: bool = setting(True, "helper off: run the visible tests before the first turn, name the "
                                  "failing check in the task", flag="no-initial-tests", sets=False, added=False)
    # Off by default: with the file in view the 0.5B wrote it back verbatim, turn after turn (1/40 vs 9/40).
    initial_files: bool = setting(False, "helper on: show the file to fix (HumanEvalFix: the function's module) "
                                  "in the task message (off by default: the 0.5B copies it back unchanged)",
                                  sets=True, added=False)
    restart_after: int | None = setting(None, "helper on: after N stale writes in a row, begin the conversation "
                                        "again from the task with the files as given (sampling stays warm)",
                                        type=int, metavar="N", added=None)
    # None: the model's `protocol` (models.yaml), resolved per model by RunConfig.agent_for before an episode runs.
    protocol: Protocol | None = setting(None, "how the tool agent calls tools: text (THOUGHT / TOOL_CALL / FINAL) "
                                        "or native (the chat template's tool calls, `tools=`); default: the "
                                        "model's `protocol` in models.yaml, else text", choices=PROTOCOLS,
                                        added="text")
    # The OpenAI API's name. `required` is forced by prefilling the start of a call in the assistant turn:
    # the small Qwen coders, shown tools natively, otherwise answer in prose and never call one.
    tool_choice: ToolChoice = setting("auto", "native protocol: auto (a reply may call a tool; one with no call "
                                      "is the final answer) or required (every reply is a call: its start is "
                                      "prefilled, and a `submit` tool finishes)", choices=TOOL_CHOICES,
                                      added="auto")
    action_space: ActionSpace = setting("tools", "the tool agent's tools: tools (read_file, write_file, run_tests, "
                                        "...), edit (those and edit_file: replace one exact span) or bash "
                                        "(run_cmd alone, as mini-swe-agent)", choices=ACTION_SPACES, added="tools")
    demo_source: DemoSource = setting("builtin", "the worked example: builtin (a made-up `last` bug) or task (a real "
                                      "bug-fix task of the tuning split, never the one at hand)",
                                      choices=DEMO_SOURCES, added="builtin")
    # search (--agent search, reflect-search): a react turn sampled `candidates` times at once; best-of-n: the
    # single-shot answer sampled `candidates` times at once
    candidates: int = setting(4, "search, best-of-n: candidate replies sampled at once per turn, each tried on a "
                              "scratch copy of the workspace against the visible tests", type=int, metavar="K",
                              added=4)
    search_temperature: float = setting(0.8, "search, best-of-n: sampling temperature of every candidate but the "
                                        "first (which is sampled as react / single-shot samples)", type=float,
                                        metavar="T", added=0.8)
    # Tuned on the even split: the candidates copy the conversation's stale write, turn after turn (136 of 178
    # turns left the file as it was); beginning again after one such turn solved more, at fewer tokens.
    search_restart: bool = setting(True, "helper off: search begins the conversation again after a stale write "
                                   "(--restart-after 1, unless that is given)", flag="no-search-restart",
                                   sets=False, added=True)
    # Tuned on the even split: the 0.5B's search rewrote the test file with its own function in 8 of the 27 tasks
    # handed to it (11 of 17 on the held-out set), saw the tests pass and submitted; the 1.5B never did.
    protect_tests: bool = setting(True, "helper off: search lets write_file and edit_file change the task's test "
                                  "files (by default it refuses, and the model is told to fix the code they test)",
                                  flag="no-protect-tests", sets=False, added=False)
    prefer_changes: bool = setting(False, "helper on: search ranks a candidate that changes a file above one that "
                                   "changes none when the tests fail at the same check (by default the lower "
                                   "candidate number wins the tie)", sets=True, added=False)
    tests_on_write: bool = setting(False, "helper on: search shows the visible tests' result (its scratch copy's) "
                                   "with a write's observation, so no turn goes to run_tests after it", sets=True,
                                   added=False)
    # Tuned on the even split: the 0.5B's search writes back the file it was shown or guesses a new one; its
    # doubts of what it wrote, with the failing test in view, are where the fix is more often than its samples.
    search_branches: int = setting(0, "search: when no candidate of a turn passes and its best one writes a file "
                                   "not yet branched, score that reply and branch it where the model doubts what it "
                                   "wrote: N programs (as --agent branch), each tried as a candidate (needs a "
                                   "backend that scores replies)", type=int, metavar="N", added=0)
    # Tuned on the even split: no branch at a doubt whose other tokens only lay the write out otherwise passed (0 of
    # 380), and a turn whose best write was branched before branched nothing while its other writes were new.
    spread_branches: bool = setting(False, "helper on: --search-branches branches the turn's best write not yet "
                                    "branched (by default only its best write, if not yet branched), and skips "
                                    "doubts whose other tokens differ only in whitespace or escapes", sets=True,
                                    added=False)
    deeper_branches: bool = setting(False, "helper on: when every write of a turn was branched before, "
                                    "--search-branches branches the best one again at its most doubted tokens not "
                                    "branched yet (by default such a turn branches nothing)", sets=True, added=False)
    opening_candidates: int = setting(32, "best-of-n-search: programs sampled at once in its best-of-n phase "
                                      "(--candidates: per turn of its search phase)", type=int, metavar="N",
                                      added=16)
    handoff: Handoff = setting("given", "chains (reflect-react, reflect-search, best-of-n-search): the tool agent "
                               "begins from the task's files as given, or as the first phase left them (kept: "
                               "best-of-n's best failing program, the test files put back)", choices=HANDOFFS,
                               added="given")
    tool_options: ToolOptions = field(default_factory=ToolOptions, metadata={PARTS: {
        "syntax_check": Setting("helper off: syntax check of written .py", flag="no-syntax-check", sets=False),
        "extract_failure": Setting("helper off: failing line from test output", flag="no-failure-extract",
                                   sets=False),
        "show_values": Setting("helper on: run_tests of a Python test script shows what the operands of a "
                               "failing assert held (`candidate(3) = 5`), evaluated again in the failing frame",
                               sets=True, added=False),
    }})

    def __post_init__(self) -> None:
        if self.history not in ("full", "condensed"):
            raise ConfigError(f"history must be 'full' or 'condensed', not {self.history!r}")
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise ConfigError(f"--protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if self.tool_choice not in TOOL_CHOICES:
            raise ConfigError(f"--tool-choice must be one of {', '.join(TOOL_CHOICES)}, not {self.tool_choice!r}")
        if self.tool_choice == "required" and self.protocol == "text":
            raise ConfigError("--tool-choice required works with --protocol native only")
        if self.protocol == "native" and self.history == "condensed":  # its stand-ins are text-protocol replies
            raise ConfigError("--history condensed works with --protocol text only")
        if self.restart_after is not None and self.restart_after < 1:
            raise ConfigError(f"--restart-after must be > 0, got {self.restart_after}")
        if self.action_space not in ACTION_SPACES:
            raise ConfigError(f"--action-space must be one of {', '.join(ACTION_SPACES)}, not {self.action_space!r}")
        if self.demo_source not in DEMO_SOURCES:
            raise ConfigError(f"--demo-source must be one of {', '.join(DEMO_SOURCES)}, not {self.demo_source!r}")
        if not 1 <= self.candidates <= MAX_CANDIDATES:
            raise ConfigError(f"--candidates must be between 1 and {MAX_CANDIDATES}, got {self.candidates}")
        if not 0 <= self.search_branches <= MAX_CANDIDATES:
            raise ConfigError(f"--search-branches must be between 0 and {MAX_CANDIDATES}, got {self.search_branches}")
        if self.search_branches and self.protocol == "native":  # it prefills the reply's own text
            raise ConfigError("--search-branches works with --protocol text only")
        if not 1 <= self.opening_candidates <= MAX_CANDIDATES:
            raise ConfigError(f"--opening-candidates must be between 1 and {MAX_CANDIDATES}, "
                              f"got {self.opening_candidates}")
        if self.handoff not in HANDOFFS:
            raise ConfigError(f"--handoff must be one of {', '.join(HANDOFFS)}, not {self.handoff!r}")
        if not 0.0 <= self.search_temperature <= 2.0:
            raise ConfigError(f"--search-temperature must be between 0 and 2, got {self.search_temperature}")

    def recorded(self, searches: bool, opens: bool) -> AgentConfig:
        """These settings as a strategy records them: those it never reads (SEARCH_ONLY without a search,
        OPENING_ONLY without an opening best-of-n) as before they existed, so its fingerprint ignores them."""
        added = added_values(AgentConfig)
        unread = (() if searches else SEARCH_ONLY) + (() if opens else OPENING_ONLY)
        return replace(self, **{k: added[k] for k in unread})

    @property
    def forced_calls(self) -> bool:
        """Native with tool_choice required: every reply is a call (its start prefilled); submit finishes."""
        return self.protocol == "native" and self.tool_choice == "required"

    def dump(self) -> dict[str, Any]:
        """Every setting (tool options as a dict), less those added after 1.3 while they behave as before:
        the trace header's `agent` block and the fingerprint's `agent` input."""
        added = added_values(AgentConfig)
        # unresolved (no --protocol; RunConfig.agent_for resolves it per model) is recorded as the default
        values = asdict(self) | {"protocol": self.protocol or "text"}
        later = added_parts(AgentConfig, "tool_options")
        values["tool_options"] = {k: v for k, v in values["tool_options"].items() if later.get(k, NOT_ADDED) != v}
        return {k: v for k, v in values.items() if added.get(k, NOT_ADDED) != v}

    @classmethod
    def from_dump(cls, data: dict[str, Any]) -> AgentConfig:
        """The config a `dump()` (a trace's, of any version from 1.3) stands for: a setting added later and
        missing from it had the value that behaves as before it existed."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in data.items() if k in names}
        if isinstance(given.get("tool_options"), dict):
            given["tool_options"] = ToolOptions(**{**added_parts(cls, "tool_options"), **given["tool_options"]})
        return cls(**{**added_values(cls), **given})


# Settings only search reads: the other strategies record them as before they existed.
SEARCH_ONLY = ("protect_tests", "prefer_changes", "tests_on_write", "search_branches", "spread_branches",
               "deeper_branches")
OPENING_ONLY = ("opening_candidates",)


DRAFTS = ("chat", "bigcode")


@dataclass(frozen=True)
class ReflectConfig:
    """The reflect loop's settings (reflect, reflect-react). Iteration i samples at max(model temperature,
    temperatures[i]); `recipe` is the model's `bigcode_prompt`, set per model for the bigcode draft."""

    iters: int = setting(4, "reflect's model turns per episode", type=int)
    temperatures: tuple[float, ...] = (0.0, 0.4, 0.7, 1.0)  # the last one repeats
    draft: str = setting("bigcode", "how the first turn asks: bigcode (as single-shot asks: the declaration "
                         "prefilled; measured best) or chat (the task, a code block asked for)",
                         flag="reflect-draft", choices=DRAFTS, added="chat")
    recipe: str | None = None

    def __post_init__(self) -> None:
        if self.iters < 1:
            raise ConfigError(f"--iters must be > 0, got {self.iters}")
        if not self.temperatures or any(not 0.0 <= t <= 2.0 for t in self.temperatures):
            raise ConfigError("reflect temperatures must be between 0 and 2")
        if self.draft not in DRAFTS:
            raise ConfigError(f"--reflect-draft must be one of {', '.join(DRAFTS)}, got {self.draft!r}")

    def for_model(self, recipe: str | None) -> ReflectConfig:
        """This config for a model whose `bigcode_prompt` is `recipe` (it matters to the bigcode draft only)."""
        return replace(self, recipe=recipe) if self.draft == "bigcode" else self

    def record(self) -> dict[str, Any]:
        """The trace's `agent.reflect` block: every setting (the bigcode draft's prompt recipe with it)."""
        out: dict[str, Any] = {"iters": self.iters, "temperatures": list(self.temperatures), "draft": self.draft}
        if self.draft == "bigcode":
            out |= recipe_record(self.recipe)
        return out

    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint's block: `record()` less the settings added later while they behave as before
        (the chat draft), so earlier traces still match."""
        added = added_values(ReflectConfig)
        return {k: v for k, v in self.record().items() if added.get(k, NOT_ADDED) != v}
