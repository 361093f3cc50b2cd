"""mkdocs hooks: the documentation pages that are made from the code and the repository at build time.

Generated on every build, never committed, so they cannot drift from what they describe:

- ``cli.md``: every command's ``--help``, from `agent_harness.cli.parser()` and the analyses' own parsers;
- ``environment.md``: the ``AGENT_HARNESS_*`` variables, from `agent_harness.settings` (`Settings`, `VARIABLES`);
- ``trace-schema.md``: every object of a trace file, from the trace model's JSON Schema;
- ``scenario-format.md``: ``scenarios/README.md``; ``results-history.md``: ``bench/RESULTS.md``.

``models.md`` also gets the field list at the top of ``models.yaml`` where it says ``<!-- registry-fields -->``.
A setting without a description, or a marker with nothing to put there, stops the build.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's package, not another install of it
WIDTH = 100  # help text is wrapped as in a 100-column terminal, whatever the building one is
MARKER = "<!-- registry-fields -->"


def _code(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```\n"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: `code` kept, the rest HTML-escaped, no pipes or line breaks."""
    parts = " ".join(text.split()).split("`")
    return "`".join(p if i % 2 else html.escape(p, quote=False) for i, p in enumerate(parts)).replace("|", "\\|")


@contextlib.contextmanager
def _columns(n: int) -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(n + 2)  # argparse wraps at COLUMNS - 2
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _analysis_help(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        importlib.import_module(f"agent_harness.analysis.{name}").main(["--help"])
    return out.getvalue()


def cli_reference() -> str:
    """Every command's help, as `agent-harness ... --help` prints it."""
    from agent_harness.analysis import ANALYSES
    from agent_harness.cli import parser

    top = parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    summary = {a.dest: a.help or "" for a in sub._choices_actions}
    out = ["# CLI reference", "",
           "Generated from the argument parsers when these docs are built (`agent_harness/cli/`), so it is",
           "what `agent-harness COMMAND --help` prints. `python run_agents.py` takes exactly the flags of",
           "`agent-harness run`. Bad input gets one line on stderr and exit code 2.", ""]
    with _columns(WIDTH):
        out += ["## agent-harness", "", _code(top.format_help())]
        for name, p in sub.choices.items():
            out += [f"## agent-harness {name}", "", _cell(summary.get(name, "")), "", _code(p.format_help())]
        out += ["## The analyses", "", "`agent-harness analyze NAME ARGS` runs one of these with its own arguments "
                "(`python analysis/NAME.py` in a checkout is the same).", ""]
        for name in ANALYSES:
            out += [f"### analyze {name}", "", _code(_analysis_help(name))]
    return "\n".join(out)


def _default(value: Any) -> str:
    if value is None or value == ():
        return "–"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    return f"`{value}`"


def environment() -> str:
    """The settings registry as a table: one row per `Settings` field, described in `VARIABLES`."""
    from agent_harness.settings import PREFIX, VARIABLES, Settings

    fields = Settings.model_fields
    if set(fields) != set(VARIABLES):
        raise ValueError(f"settings and their descriptions differ: {sorted(set(fields) ^ set(VARIABLES))}")
    rows = ["| variable | what it sets | value | parsed default |", "|---|---|---|---|"]
    for name, field in fields.items():
        what, value = VARIABLES[name]
        rows.append(f"| `{PREFIX}{name.upper()}` | {_cell(what)} | {_cell(value)} | {_default(field.default)} |")
    return "\n".join([
        "# Environment variables", "",
        "Read and validated once (`agent_harness/settings.py`); a bad value stops the run with one line naming",
        "the variable (exit 2). Unset or empty means the default. A variable with the `AGENT_HARNESS_` prefix",
        "that is not listed here is ignored with a warning. This table is generated from the settings",
        "registry when the docs are built; \"parsed default\" is the value the harness holds when the variable",
        "is unset (– : none, the code that reads it picks, as the value column says).", "",
        *rows, ""])


def _type(p: dict[str, Any]) -> str:
    """A JSON Schema property's type in words, objects as links to their section."""
    if "$ref" in p:
        name = p["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in p:
        return f"`{p['const']}`"
    if "enum" in p:
        return " \\| ".join(f"`{v}`" for v in p["enum"])
    if "anyOf" in p:
        return " or ".join(_type(x) for x in p["anyOf"])
    if "allOf" in p:  # the steps: one model per `type`
        return " or ".join(_type(x["then"]) for x in p["allOf"] if "then" in x)
    kind = p.get("type", "any")
    if kind == "array":
        return f"array of {_type(p.get('items', {}))}" if p.get("items") else "array"
    if kind == "object" and isinstance(p.get("additionalProperties"), dict):
        return f"object of {_type(p['additionalProperties'])}"
    return str(kind)


def _fields(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    rows = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, p in schema.get("properties", {}).items():
        text = [_cell(p.get("description", ""))]
        if "default" in p and p["default"] not in (None, [], {}):
            text.append(f"Default: `{p['default']}`.")
        mark = "yes" if name in required else ""
        rows.append(f"| `{name}` | {_type(p)} | {mark} | {' '.join(t for t in text if t)} |")
    return rows


def trace_schema() -> str:
    """One table per object of the trace's JSON Schema (`trace_schema.json` is the same schema)."""
    from agent_harness.traces.model import json_schema

    schema = json_schema()
    out = ["# Trace schema reference", "",
           "Generated from the trace model (`agent_harness/traces/model.py`, the steps in",
           "`agent_harness/traces/steps.py`) when these docs are built;",
           "`agent_harness/traces/trace_schema.json` is the same JSON Schema, and a test fails",
           "when the committed file differs. [Traces](traces.md) explains what the fields are for.", "",
           "## Trace", "", _cell(schema.get("description", "")), "", *_fields(schema), ""]
    for name, d in schema.get("$defs", {}).items():
        out += [f"## {name}", "", _cell(d.get("description", "")), "", *_fields(d), ""]
    return "\n".join(out)


def included(path: str, title: str, note: str) -> str:
    """A repository file as a page: its first heading replaced by `title`, then a note saying where it lives."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("# "))
    return "\n".join([*lines[:first], f"# {title}", "", f"!!! note \"{path}\"", f"    {note}", "",
                      *lines[first + 1:], ""])


def pages() -> dict[str, str]:
    return {
        "cli.md": cli_reference(),
        "environment.md": environment(),
        "trace-schema.md": trace_schema(),
        "scenario-format.md": included(
            "scenarios/README.md", "The YAML scenario format",
            "This page is `scenarios/README.md`, included when the docs are built; \"here\" is the `scenarios/` "
            "folder. [Scenarios and datasets](scenarios.md) lists the scenarios and how datasets are validated."),
        "results-history.md": included(
            "bench/RESULTS.md", "Results history (the lab notebook)",
            "This page is `bench/RESULTS.md`, included when the docs are built: every measurement as it was "
            "written, newest last, superseded ones included. [Results](results.md) has the current numbers."),
    }


def registry_fields() -> str:
    """The field list at the top of models.yaml (its leading comment), as a code block."""
    lines = []
    for line in (ROOT / "models.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    if not lines:
        raise ValueError("models.yaml has no leading comment to list its fields from")
    return _code("\n".join(lines))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, text in pages().items():
        files.append(File.generated(config, name, content=text))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == "models.md":
        if MARKER not in markdown:
            raise ValueError(f"docs/models.md lost its {MARKER} marker")
        return markdown.replace(MARKER, registry_fields())
    return markdown
