"""Command line: `agent-harness run|validate|models|scenarios|analyze|export|import`, and `run_agents.py`
(= `run`). The commands' arguments and handlers are run.py (run, validate) and commands.py (the others)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .. import stop
from ..analysis import ANALYSES
from ..errors import HarnessError, StopRequested
from ..secrets import redact
from ..text import printable, printable_stdio
from .commands import add_export, add_registry, cmd_analyze, cmd_models, cmd_scenarios
from .run import RUN_DESCRIPTION, add_run_arguments, add_validate, cmd_run, given_settings, run_parser

__all__ = ["given_settings", "main", "parser", "run_agents_main", "run_parser"]


class PrintableFormatter(logging.Formatter):
    """Log lines with control characters escaped: messages quote model output, server replies and file names."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(redact(super().formatMessage(record)))

    def formatException(self, ei: Any) -> str:
        return printable(redact(super().formatException(ei)), multiline=True)

    def formatStack(self, stack_info: str) -> str:
        return printable(redact(super().formatStack(stack_info)), multiline=True)


def parser() -> argparse.ArgumentParser:
    """`agent-harness` and its subcommands."""
    top = argparse.ArgumentParser(prog="agent-harness", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run agents (same flags as run_agents.py)", description=RUN_DESCRIPTION)
    add_run_arguments(run).set_defaults(handler=cmd_run)
    add_validate(sub)
    models = sub.add_parser("models", help="list the model registry")
    add_registry(models)
    models.set_defaults(handler=cmd_models)
    sub.add_parser("scenarios", help="list scenarios with task counts").set_defaults(handler=cmd_scenarios)
    an = sub.add_parser("analyze", help="run an analysis: agent-harness analyze NAME TRACES_DIR ...",
                        description="Run one analysis of a traces folder (see `agent-harness analyze NAME --help`).")
    an.add_argument("name", metavar="NAME", help=", ".join(ANALYSES))
    an.add_argument("args", nargs=argparse.REMAINDER, help="the analysis's own arguments")
    an.set_defaults(handler=cmd_analyze)
    add_export(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    with printable_stdio():  # outside text (model, server, trace and file names) is printed escaped
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
        if args.command == "run":
            _setup_logging(args.verbose)
        return _guard(lambda: args.handler(args), resumable=args.command == "run")


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    logging.captureWarnings(True)  # library warnings quote outside text too


def run_agents_main(argv: list[str] | None = None) -> int:
    """Entry of `python run_agents.py`: the `run` command."""
    with printable_stdio():
        args = run_parser("run_agents.py").parse_args(sys.argv[1:] if argv is None else argv)
        _setup_logging(args.verbose)
        return _guard(lambda: cmd_run(args))


def _guard(fn: Callable[[], int], resumable: bool = True) -> int:
    """Run a command: harness errors become one line on stderr and the error's exit code; Ctrl-C and SIGTERM
    stop it at any moment (`stop`) with exit code 130. Everything printed is escaped (`printable`)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with stop.handling_signals():
        try:
            try:
                return fn()
            except HarnessError as e:
                if stop.requested() is None:
                    print(f"error: {printable(redact(str(e)))}", file=sys.stderr)
                    return e.exit_code
            except Exception:  # a bug: its traceback, escaped (exception messages quote outside text)
                if stop.requested() is None:
                    sys.stderr.write(printable(redact(traceback.format_exc()), multiline=True))
                    return 1
        except (StopRequested, KeyboardInterrupt):
            pass
        # Stopped (or a library turned the stop into an error of its own): what was started is closed.
        signum = stop.requested() or signal.SIGINT
        then = ("traces written so far are complete JSON; rerun with --resume" if resumable
                else "nothing half-written was left behind")
        print(f"interrupted ({signal.Signals(signum).name}): {then}", file=sys.stderr)
        return 130
