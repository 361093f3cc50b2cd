"""HumanEvalFix as bigcode-evaluation-harness asks it: the prompt, the stop words, the post-processing.

This is the recipe the calibrated single-shot baseline follows (`--agent single-shot`), so its pass@1
can be put beside numbers published with that harness (its `humanevalfixtests-python` and
`humanevalfixdocs-python` tasks; our labels `gold` and `docs`):

- prompt base: the row's `declaration` (tests variant) or its `prompt`, the signature with the
  docstring (docs variant);
- context: prompt base + `buggy_solution`, and under the tests variant a newline and the row's `test`;
- the user turn: ``Fix bugs in <entry_point>.``, a newline, the context, nothing stripped;
- the assistant turn starts with the prompt base, its trailing whitespace removed (bigcode strips the
  whole prompt string, whose end is the prompt base), and the model continues it;
- generation stops at the Python stop words below;
- post-processing: the completion's trailing whitespace removed, cut at the first stop word, then
  cut before the first non-blank line that does not start with a space or a tab; the program is
  the prompt base without its trailing whitespace followed by that text;
- the program runs after bigcode's import lines (`IMPORT_LINES`), with the row's test after it.

Model families differ only in the turn markers around the user text and the prefill. A model names its
recipe in the registry (`bigcode_prompt: codeqwen`); `chat_template(recipe)` is then the Jinja template
that renders exactly bigcode's string for that family, given to the backend with the request
(`GenParams.chat_template`). A model without a recipe gets the same two messages through its own
chat template (for Qwen2.5 that adds its default system turn, which bigcode's string does not have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..types import Conversation

if TYPE_CHECKING:
    from ..types import Task

STOP_WORDS: tuple[str, ...] = ("\nclass", "\ndef", "\n#", "\n@", "\nprint", "\nif", "\nassert", "<|endoftext|>")
# bigcode's Python import helper, put before every program it runs. numpy is not in every sandbox's
# Python; bigcode's environment has it, so it is imported where it exists and skipped where it does not.
IMPORT_LINES = (
    "import math\nimport re\nimport sys\nimport copy\nimport datetime\nimport itertools\nimport collections\n"
    "import heapq\nimport statistics\nimport functools\nimport hashlib\n"
    "try:\n    import numpy\n    import numpy as np\nexcept ImportError:\n    pass\n"
    "import string\nfrom typing import *\nfrom collections import *\n"
)
# Turn markers of bigcode's `--prompt` recipes, as Jinja chat templates: a user turn (and a system turn,
# only if a conversation has one; bigcode's never does), and an assistant turn that the prompt ends
# inside when it is continued. No default system turn.
TEMPLATES: dict[str, str] = {
    "codeqwen": (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
}
MODEL_TEMPLATE = "model_chat_template"  # the trace's name for "no recipe: the model's own template"


def recipes() -> tuple[str, ...]:
    return tuple(TEMPLATES)


def chat_template(recipe: str | None) -> str | None:
    """The template that renders `recipe`'s prompt; None (the model's own template) without a recipe."""
    if recipe is None:
        return None
    if recipe not in TEMPLATES:
        raise ConfigError(f"unknown bigcode_prompt recipe '{recipe}'; valid: {', '.join(TEMPLATES)}")
    return TEMPLATES[recipe]


def remove_last_block(code: str) -> str:
    """`code` cut at its first stop word, then before its first non-blank line that starts at column 0."""
    cut = min((i for i in (code.find(w) for w in STOP_WORDS) if i >= 0), default=len(code))
    code = code[:cut]
    pos = 0
    while pos < len(code):
        end = code.find("\n", pos)
        end = len(code) if end < 0 else end
        line = code[pos:end]
        if line.strip() and line[0] not in " \t":
            return code[:pos - 1] if pos else ""
        pos = end + 1
    return code


@dataclass(frozen=True)
class FixPrompt:
    """One HumanEvalFix row as bigcode's recipe asks it."""

    prompt_base: str  # the declaration (tests variant) or the prompt with its docstring (docs variant)
    context: str  # what the user turn shows after the instruction
    entry_point: str
    given: str = ""  # the code to fix after the prompt base (the row's buggy solution)

    @property
    def copied(self) -> str:
        """The assistant turn a model that copied the code it was shown would write: the prompt base and the
        given code (the branch strategy reads the model's doubts of it)."""
        return self.prompt_base + self.given

    @property
    def user(self) -> str:
        return f"Fix bugs in {self.entry_point}.\n{self.context}"

    @property
    def prefill(self) -> str:
        """The assistant turn's start, which the model continues."""
        return self.prompt_base.rstrip()

    def conversation(self) -> Conversation:
        return [{"role": "user", "content": self.user}, {"role": "assistant", "content": self.prefill}]

    def program(self, completion: str) -> str:
        """What bigcode makes of a completion: the prompt base with the completion's first block after it."""
        return self.prefill + remove_last_block(completion.rstrip())

    def module(self, completion: str) -> str:
        """The module to score: bigcode's import lines, then `program(completion)`."""
        return (IMPORT_LINES + "\n" + self.program(completion)).strip() + "\n"

    def render(self, recipe: str) -> str:
        """bigcode's prompt string for `recipe` (what the recipe's template and a continued turn give)."""
        if recipe != "codeqwen":
            raise ConfigError(f"unknown bigcode_prompt recipe '{recipe}'; valid: {', '.join(TEMPLATES)}")
        return f"<|im_start|>user\n{self.user}<|im_end|>\n<|im_start|>assistant\n{self.prompt_base}".strip()


def fix_prompt(prompt_base: str, buggy_solution: str, test: str, entry_point: str, docs: bool) -> FixPrompt:
    """The recipe's pieces from a row's fields; `docs`: the docs variant (no tests in the context)."""
    context = prompt_base + buggy_solution + ("" if docs else "\n" + test)
    return FixPrompt(prompt_base, context, entry_point, buggy_solution)


def task_prompt(task: Task) -> FixPrompt:
    """The recipe's pieces of a HumanEvalFix task (scenarios/humanevalfix.build_task's layout)."""
    md = task.metadata
    head, module = str(md["declaration"]), task.files[md["module"]]
    if not module.startswith(head):
        raise ConfigError(f"{task.id}: the module does not start with the task's declaration")
    prefix = str(md.get("import_prefix", ""))  # the row's `import` field, which bigcode leaves out for Python
    base = head[len(prefix):] if prefix and head.startswith(prefix) else head
    return fix_prompt(base, module[len(head):], str(md["hidden_test"]), str(md["entry_point"]), bool(md.get("docs")))
