"""The agent's tools and their support, one job per module:

- registry.py: ToolOptions, the `@tool` registry, `tools_for` and `run_tool` (`execute`: its text);
- result.py: ToolResult, the observation text plus the facts the agent reads;
- builtin.py: the tools themselves (read_file, write_file, list_dir, run_cmd, git_diff, grep, run_tests);
- args.py: the one argument check, shared with the reply parser;
- files.py: path and file helpers of the file tools;
- failures.py: the failing check of a test run, and syntax errors;
- output.py: truncation and timing-free test output;
- grep_main.py: the grep program that runs inside the sandbox.
"""

from __future__ import annotations

from . import builtin as _builtin  # registers the tools
from .args import ArgumentError, check_args
from .builtin import GREP_SCRIPT
from .failures import Failure, failure_point, failure_summary, find_failure, syntax_error, whole_statement
from .files import MAX_READ_BYTES, file_bytes, put_file, restore_files
from .output import strip_timings, truncate
from .registry import TOOLS, Tool, ToolOptions, execute, run_tool, tool, tools_for
from .result import ToolResult

__all__ = [
    "GREP_SCRIPT", "MAX_READ_BYTES", "TOOLS", "ArgumentError", "Tool", "ToolOptions", "ToolResult", "check_args",
    "execute", "run_tool",
    "Failure", "failure_point", "failure_summary", "find_failure",
    "file_bytes", "put_file", "restore_files", "strip_timings", "syntax_error",
    "whole_statement",
    "tool", "tools_for", "truncate",
]
del _builtin
