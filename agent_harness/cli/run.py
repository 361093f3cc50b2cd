"""`agent-harness run` (and `run_agents.py`) and `agent-harness validate`: their arguments and handlers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..text import printable
from .commands import add_registry, cmd_models, cmd_scenarios, rich_console, table_names

if TYPE_CHECKING:
    from ..run.episodes import StrategyInfo


def _add_sandbox(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sandbox", choices=["auto", "bwrap", "docker", "rlimit"], default=None,
                   help="where commands run (default: $AGENT_HARNESS_SANDBOX, else auto: Docker for tasks that name "
                        "an image when Docker works here, else bubblewrap, else rlimits)")
    p.add_argument("--sandbox-image", default=None, metavar="IMAGE",
                   help="Docker image of the tasks that name none (a local image; never pulled)")


def _apply_sandbox(args: argparse.Namespace) -> None:
    """--sandbox and --sandbox-image are their settings' variables, for this process and what it starts."""
    if args.sandbox:
        os.environ["AGENT_HARNESS_SANDBOX"] = args.sandbox
    if args.sandbox_image:
        from ..sandbox.docker_image import check_image_name

        os.environ["AGENT_HARNESS_SANDBOX_IMAGE"] = check_image_name(args.sandbox_image, "--sandbox-image")


RUN_DESCRIPTION = "Run models as tool-using agents on scenarios."


def run_parser(prog: str = "agent-harness run") -> argparse.ArgumentParser:
    """The `run` command's parser on its own (run_agents.py)."""
    return add_run_arguments(argparse.ArgumentParser(prog=prog, description=RUN_DESCRIPTION))


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 0 <= I < N, as (I, N); argparse turns the ValueError into a one-line usage error."""
    i, sep, n = text.partition("/")
    if not (sep and i.strip().isdigit() and n.strip().isdigit() and 0 <= int(i) < int(n)):
        raise argparse.ArgumentTypeError(f"'{text}' is not I/N with 0 <= I < N (e.g. 0/4)")
    return int(i), int(n)


def add_run_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_registry(p)
    _add_sandbox(p)
    p.add_argument("--models", default=None, help="comma-separated names or aliases (default: the registry default)")
    p.add_argument("--n", type=int, default=None, help="first N tasks of each scenario (default: all)")
    p.add_argument("--tasks", default=None, help="comma-separated task ids (e.g. Python/0,Python/5)")
    p.add_argument("--scenario", default="humanevalfix", help="comma-separated scenario names")
    p.add_argument("--all-scenarios", action="store_true", help="run every registered scenario")
    p.add_argument("--label", default=None,
                   help="comma-separated labels, or 'all' for every label of each scenario (default: gold)")
    p.add_argument("--samples", type=int, default=1, help="episodes per task (for pass@k)")
    p.add_argument("--out", type=Path, default=Path("traces"), help="traces folder")
    p.add_argument("--resume", action="store_true", help="skip episodes whose trace is complete")
    p.add_argument("--shard", type=parse_shard, default=None, metavar="I/N",
                   help="run only tasks whose index %% N == I (0 <= I < N): N processes with the same flags and "
                        "--out split a run; each summary covers every trace there, the last one all of them")
    p.add_argument("--concurrency", type=int, default=None,
                   help="episodes in flight per model (default: the model's `in_flight` in models.yaml, else "
                        "32 on vllm, measured fastest, and 16 otherwise)")
    p.add_argument("--seed", type=int, default=0)
    _add_strategy(p)
    p.add_argument("--mode", choices=["agent", "single-shot"], default=None,
                   help="older spelling: --mode agent = --agent react, --mode single-shot = --agent single-shot")
    p.add_argument("--dataset-path", type=Path, default=None,
                   help="HumanEvalFix rows: .jsonl, .parquet, or a dataset folder (parquet shards, save_to_disk)")
    p.add_argument("--dataset-hub", action="store_true",
                   help="HumanEvalFix from the Hub: datasets.load_dataset('bigcode/humanevalpack', 'python')")
    p.add_argument("--no-embed", action="store_true", help="skip step embeddings")
    p.add_argument("--backend", choices=["transformers", "vllm", "openai", "scripted"], default=None,
                   help="force this backend for every model (default: each model's own, with fallback)")
    p.add_argument("--no-streaming", action="store_true", help=argparse.SUPPRESS)  # no effect: one loop since 0.2
    p.add_argument("--workers", type=int, default=4, help="episodes doing harness work (tools, tests, scoring) at once")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--list-models", action="store_true", help="print the registry and exit")
    p.add_argument("--list-scenarios", action="store_true", help="print the scenarios and exit")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more log lines (the vLLM engine's own output is in <out>/engine.log)")
    from ..strategies.config import AgentConfig, ReflectConfig

    _add_settings(p.add_argument_group("reflect (--agent reflect, reflect-react)"), ReflectConfig)
    _add_settings(p.add_argument_group("the react agent's budgets and helpers (react, reflect-react)"), AgentConfig)
    return p


def _add_strategy(p: argparse.ArgumentParser) -> None:
    """--agent: its choices and help from the strategy registry."""
    from ..run.episodes import DEFAULT_ORDER, STRATEGIES

    order = " where it can run, else ".join(_spelled_with_presets(n, frozenset()) for n in DEFAULT_ORDER)
    p.add_argument("--agent", choices=[s.flag for s in STRATEGIES.values()], default=None,
                   help=f"strategy for every scenario (default: each scenario its best measured one: {order}): "
                        + "; ".join(f"{s.flag} ({s.help})" for s in STRATEGIES.values()))


def _add_settings(p: argparse._ArgumentGroup, config: type) -> None:
    """One flag per setting of `config`, its help and default from the setting's one definition."""
    from ..strategies.config import settings

    for s in settings(config):
        text = s.help.replace("%", "%%")
        if s.setting.switch:
            p.add_argument(s.flag, action="store_true", help=text)
        else:
            p.add_argument(s.flag, type=s.setting.type, choices=s.setting.choices or None, default=None,
                           metavar=s.setting.metavar, help=text)


def given_settings(args: argparse.Namespace, config: type) -> dict[tuple[str, ...], Any]:
    """The settings of `config` given on the command line (by `settings` path), each with the value it takes."""
    from ..strategies.config import settings

    given: dict[tuple[str, ...], Any] = {}
    for s in settings(config):
        value = getattr(args, s.flag.removeprefix("--").replace("-", "_"))
        if s.setting.switch and value:
            given[s.path] = s.setting.sets
        elif not s.setting.switch and value is not None:
            given[s.path] = None if s.setting.zero_is_none and value == 0 else value
    return given


def positive(name: str, value: int | None, allow_zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not allow_zero)):
        raise ConfigError(f"--{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _strategy(args: argparse.Namespace) -> str | None:
    """The strategy named by --agent, or by its older spelling --mode; None: each scenario's default."""
    from ..run.episodes import STRATEGIES

    old = {"agent": "react", "single-shot": "single-shot"}.get(args.mode) if args.mode else None
    if args.agent and old and args.agent != old:
        raise ConfigError(f"--agent {args.agent} and --mode {args.mode} disagree; use --agent alone")
    flag = args.agent or old
    return next(s.name for s in STRATEGIES.values() if s.flag == flag) if flag else None


def _check_reflect_flags(args: argparse.Namespace, strategies: dict[str, StrategyInfo]) -> None:
    """--iters and --reflect-draft apply to the strategies that reflect: refused when no scenario runs one."""
    from ..run.episodes import STRATEGIES
    from ..strategies.config import ReflectConfig, settings

    given = given_settings(args, ReflectConfig)
    if given and not any(s.reflects for s in strategies.values()):
        flag = next(s.flag for s in settings(ReflectConfig) if s.path in given)
        *rest, last = [s.flag for s in STRATEGIES.values() if s.reflects]
        names = f"{', '.join(rest)} and {last}" if rest else last
        raise ConfigError(f"{flag} applies to --agent {names} only")


def cmd_run(args: argparse.Namespace) -> int:
    if args.list_models:
        return cmd_models(args)
    if args.list_scenarios:
        return cmd_scenarios(args)
    from ..registry import load_registry

    _apply_sandbox(args)
    registry = load_registry(args.registry)
    specs = registry.resolve(args.models)
    from ..sandbox.tempdirs import reap_orphans

    reap_orphans()  # the workspaces of runs killed before they could remove them
    from ..sandbox.docker import reap_at_start

    reap_at_start()  # and their containers
    from ..run.planning import scenario_strategies
    from ..run.runner import RunConfig, run
    from ..run.summary import print_table
    from ..scenarios import get_scenario, scenario_names
    from ..strategies.config import AgentConfig, ReflectConfig, build

    for name in ("n", "samples", "concurrency", "max_steps", "workers"):
        positive(name.replace("_", "-"), getattr(args, name))
    positive("max-total-tokens", args.max_total_tokens, allow_zero=True)
    if args.dataset_path is not None and not args.dataset_path.exists():
        raise ConfigError(f"--dataset-path {args.dataset_path}: file not found (nor a dataset folder)")
    if args.dataset_path is not None and args.dataset_hub:
        raise ConfigError("--dataset-path and --dataset-hub exclude each other")
    scenarios = scenario_names() if args.all_scenarios else [s.strip() for s in args.scenario.split(",") if s.strip()]
    for s in scenarios:
        get_scenario(s)
    strategy = _strategy(args)
    # The vLLM engine's own output goes to a file in the output folder, never to the terminal.
    os.environ.setdefault("AGENT_HARNESS_ENGINE_LOG", str(args.out / "engine.log"))
    cfg = RunConfig(
        models=specs, scenarios=scenarios, labels=args.label.split(",") if args.label else None, n=args.n,
        task_ids=tuple(t.strip() for t in args.tasks.split(",")) if args.tasks else (), samples=args.samples,
        out=args.out, resume=args.resume, shard=args.shard, concurrency=args.concurrency, seed=args.seed,
        embed=not args.no_embed,
        strategy=strategy, dataset_path=args.dataset_path, dataset_hub=args.dataset_hub,
        reflect=build(ReflectConfig, given_settings(args, ReflectConfig)),
        workers=args.workers,
        backend=args.backend,
        progress=not args.no_progress and sys.stderr.isatty(),
        agent=build(AgentConfig, (agent := given_settings(args, AgentConfig))),
        given=frozenset(path[0] for path in agent),
    )
    strategies = scenario_strategies(cfg)
    _check_reflect_flags(args, strategies)
    summary = run(cfg)
    folders = {spec.name: {cfg.folder(spec, cfg.strategy_for(get_scenario(name), spec).name, name)
                           for name in strategies} for spec in specs}
    print_table(table_names({m: {s: e for s, e in sc.items() if s in folders[m]}
                             for m, sc in summary.items() if m in folders}), rich_console())
    if strategy is None:
        ran = {_spelled_with_presets(st.name, cfg.given or frozenset()):
               [n for n, other in strategies.items() if other is st] for st in strategies.values()}
        print(printable("strategy: " + "; ".join(f"{flag} on {', '.join(names)}" for flag, names in ran.items())
                        + " (each scenario's default; --agent picks one for all)"))
    print(f"traces: {printable(str(args.out))}/  summary: {printable(str(args.out / 'summary.json'))}")
    _warn_unscorable(args.out, specs)
    return 0


def _spelled_with_presets(strategy: str, given: frozenset[str]) -> str:
    """A default strategy's --agent spelling with the settings it adds (those the command line did not give)."""
    from ..run.episodes import DEFAULT_PRESETS, STRATEGIES
    from ..strategies.config import AgentConfig, settings

    flags = {s.path: s for s in settings(AgentConfig)}
    added = [flags[(k,)].flag + ("" if flags[(k,)].setting.switch else f" {v}")
             for k, v in DEFAULT_PRESETS.get(strategy, {}).items() if k not in given]
    return " ".join([STRATEGIES[strategy].flag, *added])


def _warn_unscorable(out: Path, specs: list[Any]) -> None:
    """One line naming the tasks this run's oracle failed (or was flagged on) or its null model passed."""
    from ..run.validate import unscorable_in_run

    oracles = {s.name for s in specs if s.backend == "scripted" and s.script == "oracle"}
    nulls = {s.name for s in specs if s.backend == "scripted" and s.script == "null"}
    if not oracles and not nulls:
        return
    bad = unscorable_in_run(out, oracles, nulls)
    if bad:
        shown = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        print(printable(f"warning: {len(bad)} task(s) cannot be scored as they stand (the oracle fails or is flagged, "
                        f"or the null model passes): {shown}; see `agent-harness validate`"), file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    from ..run.validate import validate

    _apply_sandbox(args)
    positive("n", args.n)
    positive("jobs", args.jobs)
    if args.dataset_path is not None and not args.dataset_path.exists():
        raise ConfigError(f"--dataset-path {args.dataset_path}: file not found (nor a dataset folder)")
    if args.dataset_path is not None and args.dataset_hub:
        raise ConfigError("--dataset-path and --dataset-hub exclude each other")
    checked = unscorable = 0
    for scenario in [s.strip() for s in args.scenario.split(",") if s.strip()]:
        report = validate(scenario, args.label.split(",") if args.label else None, args.n,
                          tuple(t.strip() for t in args.tasks.split(",")) if args.tasks else (), args.dataset_path,
                          args.dataset_hub, args.jobs, sys.stdout)
        checked, unscorable = checked + report.checked, unscorable + report.unscorable
    verdict = "every task can be scored" if not unscorable else f"{unscorable} cannot be scored"
    print(f"validate: {checked} tasks checked; {verdict}")
    return 0 if not unscorable else 1


def add_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    va = sub.add_parser(
        "validate", help="prove a dataset can be scored: every reference passes, every buggy version fails",
        description="Score each task's reference solution and its buggy version with the real scorer and sandbox; "
                    "print one line per task that cannot be scored (reference fails, buggy passes, or either is "
                    "flagged suspicious). Exit 0 only when every task can be scored.")
    va.add_argument("--scenario", default="humanevalfix", help="comma-separated scenario names")
    va.add_argument("--label", default=None, help="comma-separated labels, or 'all' (default: gold)")
    va.add_argument("--tasks", default=None, help="comma-separated task ids")
    va.add_argument("--n", type=int, default=None, help="first N tasks")
    va.add_argument("--dataset-path", type=Path, default=None,
                    help="HumanEvalFix-format rows: .jsonl, .parquet, or a dataset folder")
    va.add_argument("--dataset-hub", action="store_true", help="HumanEvalFix from the Hub")
    va.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="tasks scored at once (default: cores)")
    _add_sandbox(va)
    va.set_defaults(handler=cmd_validate)


