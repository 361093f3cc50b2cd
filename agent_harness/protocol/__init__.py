"""The plain-text agent protocol, one job per module:

- prompt.py: the system prompt, stop strings, observation and error texts, the next-step reminder;
- parser.py: `parse_reply`, the forgiving parser of one model reply;
- scan.py: the regex-free scans of model text it uses (markers, fences, a bare call);
- decode.py: decoding the call object (JSON, lax JSON, a Python literal);
- the arguments are checked by agent_harness.tools.args, the one validator `execute` uses too.
"""

from __future__ import annotations

from .parser import REPAIRS, ParsedReply, parse_reply
from .prompt import (
    ERROR_HEADER,
    EXPECTED_FORM,
    NATIVE_STOP_STRINGS,
    NEXT_STEP,
    OBSERVATION_HEADER,
    REMINDER,
    STOP_STRINGS,
    format_error,
    format_observation,
    initial_file_note,
    initial_fix_note,
    initial_test_note,
    next_step,
    render_system_prompt,
)

__all__ = [
    "ERROR_HEADER", "EXPECTED_FORM", "NATIVE_STOP_STRINGS", "NEXT_STEP", "OBSERVATION_HEADER", "REMINDER", "REPAIRS",
    "STOP_STRINGS",
    "ParsedReply", "format_error", "format_observation", "initial_file_note", "initial_fix_note", "initial_test_note",
    "next_step", "parse_reply", "render_system_prompt",
]
