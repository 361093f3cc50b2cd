"""What a tool call gives back: the text the model reads, and the facts the harness acts on.

The agent, the next-step reminder and the history notes read these fields, never the text: a
file that starts with "ERROR:" or a test printing "Tests PASSED" cannot pass for a fact.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ToolError
from ..text import error_text, safe_text


@dataclass(frozen=True)
class ToolResult:
    text: str  # the observation shown to the model
    tests_passed: bool | None = None  # run_tests: whether the tests passed; None when none ran
    failing_check: str | None = None  # a failed test run: the line it stopped at (see failures.failure_point)
    changed: bool | None = None  # write_file: the new content differs from what the file held
    error: str | None = None  # the exception type of a refused or faulted call ("ToolError", "OSError", ...)
    values: tuple[str, ...] = ()  # a failed test run, `show_values`: "expr = value" of the failing assert

    @classmethod
    def fault(cls, e: BaseException, hide: tuple[str, ...] = ()) -> ToolResult:
        """A call that raised: ``ERROR: <message>`` for a ToolError (its message is meant for the
        model), ``ERROR: <Type>: <message>`` for any other fault, with the `hide` paths removed."""
        text = safe_text(str(e)) if isinstance(e, ToolError) else error_text(e, hide)
        return cls(f"ERROR: {text}", error=type(e).__name__)

    def safe(self) -> ToolResult:
        """The result with lone surrogates replaced in its texts (see text.safe_text)."""
        check = None if self.failing_check is None else safe_text(self.failing_check)
        return replace(self, text=safe_text(self.text), failing_check=check,
                       values=tuple(safe_text(v) for v in self.values))
