#!/usr/bin/env python3
"""The strategy table: single-shot, reflect and the react agent, side by side, per model.

    .venv/bin/python bench/strategies.py --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b-offline --n 164 --serve
    .venv/bin/python bench/strategies.py --models qwen2.5-coder-0.5b --n 164 --only reflect --resume
    .venv/bin/python bench/strategies.py --split odd --only single-shot,search-k4 --serve   # the untuned split

`--split even|odd|all` runs the even-numbered tasks of the first `--n` (Python/0, 2, 4, ...: the split
strategies are tuned on), the odd-numbered ones (never tuned on: report changes there) or all of them;
the table's header names the split, and only that split's episodes are counted. A dataset of your own
(`--cli-args '--dataset-path tests/data/heldout/python.jsonl'`) splits by its task numbers the same way.

With no `--only`, the table's configs run (TABLE: single-shot, reflect, react with full and condensed
history, reflect-react, and single-shot pass@5 at T=0.8 as the ceiling of verified resampling); the
ablations of single helpers run when named, or all of them with `--only all`.

Each configuration (CONFIGS below: a name, the CLI flags it adds, optionally a sampling temperature)
runs through the normal CLI, `run_agents.py --no-embed --resume`, one model at a time, into its own
folder `<out>/<config>/`. A finished config × model leaves `<out>/<config>/done-<model>.json`;
`--resume` skips those (unless they covered fewer tasks than `--n`, or the harness's defaults for that
strategy have changed since: the marker holds their digest) and continues the others where their traces
stop, so a long benchmark can be stopped and picked up again, or extended to more tasks.
`--only NAME[,NAME]` runs a subset; `--report` runs nothing and prints the table of the episodes the folders
hold (a long run's progress: the `tasks` column says how many each row covers). A config whose flags this CLI
does not have (e.g. `--history` before that feature exists) is skipped with a note.

`--serve`: each model's configs go to one local `vllm serve` of its prepared folder (started here, one
model at a time, through an openai registry entry with the model's name and generation settings): one
engine start per model instead of one per config (the `vllm` backend starts its own server for each
run). The traces then record backend `openai`.

The table (printed, and appended to bench/RESULTS.md unless `--no-append`): pass@1 with its 95 % CI
(Wilson over episodes; pass@k too when a config samples k times), mean turns, mean prompt / computed
(prompt - cached) / completion tokens per episode, wall time (the run's, model load excluded, from
`runs.jsonl`), the engine's mean batch (requests in flight while it was busy, from `runs.jsonl`), turns,
tokens (prompt + completion) and wall seconds per solved task, and the machine and date. When a config
samples single-shot several times (`single-shot-T0.8-n48`), every other row also gets single-shot's pass@n
at the same sampling budget: n = the row's completion tokens per episode / single-shot's per sample, so a
search's gain from the agent's feedback is told apart from its gain from sampling more. A
chained strategy (reflect-react) also gets a row per phase: the episodes that reached the phase, the
tasks solved in it, and its own turns and tokens; on a greedy backend its first phase is the first
strategy alone.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _machine import cpu_flags, cpu_name, run_row  # noqa: E402  (bench/ is on sys.path when a benchmark runs as a script)
from strategy_table import match_budgets, rows_for, table  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"


@dataclass(frozen=True)
class Config:
    args: tuple[str, ...]
    temperature: float | None = None  # sampling temperature for every model (a registry copy); None: the model's
    samples: int = 1


CONFIGS: dict[str, Config] = {
    "single-shot": Config(("--agent", "single-shot")),  # bigcode's recipe (the calibrated baseline)
    "single-shot-chat": Config(("--agent", "single-shot-chat")),  # the chat-style one of earlier tables
    "reflect": Config(("--agent", "reflect")),
    "react-full": Config(("--agent", "react", "--history", "full")),
    "react-condensed": Config(("--agent", "react", "--history", "condensed")),
    "react-no-initial-tests": Config(("--agent", "react", "--history", "full", "--no-initial-tests")),
    "react-initial-files": Config(("--agent", "react", "--history", "full", "--initial-files")),
    "react-restart-1": Config(("--agent", "react", "--history", "full", "--restart-after", "1")),
    "react-restart-2": Config(("--agent", "react", "--history", "full", "--restart-after", "2")),
    "single-shot-pass5-T0.8": Config(("--agent", "single-shot"), temperature=0.8, samples=5),
    "reflect-react": Config(("--agent", "reflect-react", "--history", "full")),
    # reflect's first draft asked as the calibrated single-shot (bigcode's prompt, declaration prefilled)
    "reflect-bigcode-draft": Config(("--agent", "reflect", "--reflect-draft", "bigcode")),
    "reflect-react-bigcode-draft": Config(("--agent", "reflect-react", "--history", "full",
                                           "--reflect-draft", "bigcode")),
    # the native tool protocol (the chat template's tool calls): each beside its text-protocol config
    "react-native": Config(("--agent", "react", "--history", "full", "--protocol", "native")),
    "reflect-react-native": Config(("--agent", "reflect-react", "--history", "full", "--protocol", "native")),
    "react-native-no-demo": Config(("--agent", "react", "--history", "full", "--protocol", "native", "--no-demo")),
    "react-native-required": Config(("--agent", "react", "--history", "full", "--protocol", "native",
                                     "--tool-choice", "required")),
    "reflect-react-native-required": Config(("--agent", "reflect-react", "--history", "full", "--protocol",
                                             "native", "--tool-choice", "required")),
    # issue 45: search over verified candidates, K replies per turn, against single-shot sampled as often
    "search-k1": Config(("--agent", "search", "--candidates", "1")),
    "search-k4": Config(("--agent", "search", "--candidates", "4")),
    "search-k8": Config(("--agent", "search", "--candidates", "8")),
    "reflect-search-k4": Config(("--agent", "reflect-search", "--candidates", "4")),
    "reflect-search-k8": Config(("--agent", "reflect-search", "--candidates", "8")),
    "single-shot-T0.8-n48": Config(("--agent", "single-shot"), temperature=0.8, samples=48),
    "best-of-n-k4": Config(("--agent", "best-of-n", "--candidates", "4")),
    "best-of-n-k16": Config(("--agent", "best-of-n", "--candidates", "16")),
    "best-of-n-k32": Config(("--agent", "best-of-n", "--candidates", "32")),  # best-of-n-search's token budget
    "single-shot-T0.8-n16": Config(("--agent", "single-shot"), temperature=0.8, samples=16),  # a third of the time
    # best-of-n (16 programs), then the tool agent's search (4 candidates a turn) where none passes
    "best-of-n-search": Config(("--agent", "best-of-n-search")),
    "best-of-n-search-kept": Config(("--agent", "best-of-n-search", "--handoff", "kept")),
    "best-of-n-search-files": Config(("--agent", "best-of-n-search", "--initial-files")),
    "best-of-n-search-changes": Config(("--agent", "best-of-n-search", "--prefer-changes")),
    "best-of-n-search-tests-on-write": Config(("--agent", "best-of-n-search", "--tests-on-write")),
    "best-of-n-search-unprotected": Config(("--agent", "best-of-n-search", "--no-protect-tests")),  # before the helper
    "best-of-n-search-values": Config(("--agent", "best-of-n-search", "--show-values")),
    # the chain from 32 programs (best-of-n-k32's samples on the same seeds; the default since 2026-11-30), from 16
    "best-of-n-search-o32": Config(("--agent", "best-of-n-search", "--opening-candidates", "32")),
    "best-of-n-search-o16": Config(("--agent", "best-of-n-search", "--opening-candidates", "16")),  # default to 11-30
    # the search phase with another action space or worked example (item 3, tried on react alone before)
    "best-of-n-search-edit": Config(("--agent", "best-of-n-search", "--action-space", "edit")),
    "best-of-n-search-demo-task": Config(("--agent", "best-of-n-search", "--demo-source", "task")),
    "best-of-n-search-no-demo": Config(("--agent", "best-of-n-search", "--no-demo")),
    # branching where the model doubts the given code (as many programs as best-of-n-search's opening samples)
    "branch": Config(("--agent", "branch")),
    "branch-search": Config(("--agent", "branch-search")),
    # the tool agent after branching, its search branching its own writes where it doubts them (issue 45)
    "branch-search-branches": Config(("--agent", "branch-search", "--search-branches", "32")),
    "branch-search-branches-files": Config(("--agent", "branch-search", "--search-branches", "32",
                                            "--initial-files")),
    "branch-search-spread-files": Config(("--agent", "branch-search", "--search-branches", "32", "--spread-branches",
                                          "--initial-files")),
    "branch-search-deeper-files": Config(("--agent", "branch-search", "--search-branches", "32", "--spread-branches",
                                          "--deeper-branches", "--initial-files")),
    "branch-search-branches-kept": Config(("--agent", "branch-search", "--search-branches", "32",
                                           "--handoff", "kept")),
    "best-of-n-k8": Config(("--agent", "best-of-n", "--candidates", "8")),
    "best-of-n-k1": Config(("--agent", "best-of-n", "--candidates", "1")),
    "search-k4-no-restart": Config(("--agent", "search", "--candidates", "4", "--no-search-restart")),
    # what other agents do: a span edit tool, the shell alone, another task's worked example, none
    "search-k4-edit": Config(("--agent", "search", "--candidates", "4", "--action-space", "edit")),
    "search-k4-bash": Config(("--agent", "search", "--candidates", "4", "--action-space", "bash")),
    "search-k4-demo-task": Config(("--agent", "search", "--candidates", "4", "--demo-source", "task")),
    "search-k4-no-demo": Config(("--agent", "search", "--candidates", "4", "--no-demo")),
    "react-edit": Config(("--agent", "react", "--action-space", "edit")),
    "react-bash": Config(("--agent", "react", "--action-space", "bash")),
    "react-demo-task": Config(("--agent", "react", "--demo-source", "task")),
    "react-no-demo": Config(("--agent", "react", "--no-demo")),
}
SPLITS = ("all", "even", "odd")
TABLE = ("single-shot", "reflect", "react-full", "react-condensed", "reflect-react", "single-shot-pass5-T0.8")


def machine() -> str:
    cpu = cpu_name(platform.processor() or "unknown CPU")
    bf16 = "yes" if "avx512_bf16" in cpu_flags() else "no"
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores, AVX-512 BF16: {bf16}"


def git_rev() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return r.stdout.strip() or "?"


def cli_flags() -> str:
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    return r.stdout


def missing_flags(cfg: Config, help_text: str) -> list[str]:
    return [a for a in cfg.args if a.startswith("--") and a not in help_text]


def registry_copy(models: list[str], temperature: float, dest: Path, source: Path) -> Path:
    """`source` with `temperature` set on the named models (by name or alias)."""
    import yaml

    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    for m in data["models"]:
        if m["name"] in models or set(m.get("aliases") or ()) & set(models):
            m["temperature"] = temperature
            m.pop("temperature_schedule", None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return dest


def done_file(name: str, model: str, args: argparse.Namespace) -> Path:
    return args.out / name / f"done-{model}.json"


@contextlib.contextmanager
def served(model: str, args: argparse.Namespace) -> Iterator[Path]:
    """A local `vllm serve` of `model`'s prepared folder while the block runs; yields a registry whose
    entry of the same name is an openai client of it."""
    from vllm_server import ServerError, serving

    from agent_harness.registry import load_registry

    spec = load_registry(args.registry).resolve(model)[0]
    reg = args.out / f"served-{spec.name}.yaml"
    try:
        with serving(spec, args.out / f"server-{spec.name}.log", reg) as healthy_s:
            print(f"[strategies] vllm serve {spec.name}: healthy after {healthy_s:.0f} s", file=sys.stderr,
                  flush=True)
            yield reg
    except ServerError as e:
        raise SystemExit(f"error: {e}") from None


def defaults_digest(cfg: Config) -> str:
    """A digest of the settings `cfg`'s flags leave to the harness (the agent's and reflect's defaults, as its
    strategy records them): a changed default makes a finished run resume instead of being skipped."""
    from agent_harness.run.episodes import STRATEGIES, default_strategy, with_presets
    from agent_harness.scenarios import get_scenario
    from agent_harness.strategies.config import AgentConfig, ReflectConfig

    args = list(cfg.args)
    name = args[args.index("--agent") + 1].replace("-", "_") if "--agent" in args else \
        default_strategy(get_scenario("humanevalfix"), ReflectConfig()).name
    agent = STRATEGIES[name].recorded(AgentConfig())
    if "--agent" not in args:  # the settings the default was measured with
        agent = with_presets(agent, name)
    data = {"strategy": name, "agent": agent.dump(), "reflect": ReflectConfig().record()}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _done_n(done: Path, split: str = "all", defaults: str | None = None) -> int:
    """Tasks a finished run covered (0 when none, another split, or other defaults than `defaults`): a run over
    fewer tasks resumes instead of skipping. A marker from before the digest was kept counts as done."""
    try:
        data = json.loads(done.read_text(encoding="utf-8"))
        if data.get("split", "all") != split or data.get("defaults", defaults) != defaults:
            return 0
        return int(data.get("n", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def split_ids(split: str, n: int) -> list[int]:
    """The task numbers of `split` among the first `n` (even: the tuning split; odd: never tuned on)."""
    return [i for i in range(n) if split == "all" or i % 2 == (split == "odd")]


def run_config(name: str, cfg: Config, model: str, args: argparse.Namespace, registry: Path) -> tuple[str, str]:
    """Run one config × model through the CLI (`registry` holds the model); (status, note)."""
    folder = args.out / name
    done = done_file(name, model, args)
    if _done_n(done, args.split, defaults_digest(cfg)) >= args.n:
        return "done", "already done (skipped)"
    cmd = [sys.executable, str(ROOT / "run_agents.py"), "--models", model, "--n", str(args.n), "--out", str(folder),
           "--no-embed", "--resume", *cfg.args, *shlex.split(args.cli_args)]
    if args.split != "all":  # bare numbers: the dataset's prefix (Python/, Heldout/) is added
        cmd += ["--tasks", ",".join(map(str, split_ids(args.split, args.n)))]
    if cfg.samples > 1:
        cmd += ["--samples", str(cfg.samples)]
    if cfg.temperature is not None:
        cmd += ["--registry", str(registry_copy([model], cfg.temperature, folder / "models.yaml", registry))]
    elif registry != ROOT / "models.yaml":
        cmd += ["--registry", str(registry)]
    print(f"[strategies] {name} × {model}: {shlex.join(cmd[1:])}", file=sys.stderr, flush=True)
    r = run_row(cmd, cwd=ROOT, stdout=subprocess.DEVNULL if args.quiet else None)
    if r.returncode != 0:
        return "failed", f"run_agents.py exited {r.returncode}"
    done.write_text(json.dumps({"config": name, "model": model, "n": args.n, "split": args.split, "cmd": cmd[1:],
                                "defaults": defaults_digest(cfg),
                                "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}) + "\n")
    return "ok", ""


def run_all(names: list[str], models: list[str], args: argparse.Namespace) -> list[str]:
    """Run each config × model not done yet (one server per model with --serve); notes on skips and failures."""
    help_text = cli_flags()
    notes: list[str] = []
    runnable = []
    for name in names:
        missing = missing_flags(CONFIGS[name], help_text)
        if missing:
            notes.append(f"{name}: skipped, this CLI has no {', '.join(missing)}")
        else:
            runnable.append(name)
    for model in models:
        todo = [n for n in runnable
                if _done_n(done_file(n, model, args), args.split, defaults_digest(CONFIGS[n])) < args.n]
        with served(model, args) if args.serve and todo else contextlib.nullcontext(args.registry) as registry:
            for name in runnable:
                status, note = run_config(name, CONFIGS[name], model, args, registry)
                if note:
                    notes.append(f"{name} × {model}: {note}")
    return notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="qwen2.5-coder-0.5b", help="comma-separated registry names")
    p.add_argument("--n", type=int, default=164, help="first N HumanEvalFix tasks")
    p.add_argument("--split", choices=SPLITS, default="all",
                   help="tasks of the first N: even (Python/0, 2, ...: tune on these), odd (never tuned on: report "
                        "on these) or all")
    p.add_argument("--only", default=None,
                   help=f"comma-separated configs, or 'all' (default: {', '.join(TABLE)}; --list shows every one)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "strategies", help="one folder per config")
    p.add_argument("--resume", action="store_true",
                   help="skip config × model pairs already done and continue the others (else a folder "
                        "with traces is refused)")
    p.add_argument("--cli-args", default="", help="extra run_agents.py flags for every config, e.g. '--label docs'")
    p.add_argument("--label", default=None, help="count only this label's episodes (with --cli-args '--label X')")
    p.add_argument("--registry", type=Path, default=ROOT / "models.yaml")
    p.add_argument("--results", type=Path, default=RESULTS, help="markdown file the table is appended to")
    p.add_argument("--no-append", action="store_true", help="print the table only")
    p.add_argument("--report", action="store_true",
                   help="run nothing: the table of the episodes the folders hold now (a run still going, or "
                        "stopped); implies --no-append")
    p.add_argument("--quiet", action="store_true", help="hide the runs' own tables")
    p.add_argument("--list", action="store_true", help="print the configs and exit")
    p.add_argument("--serve", action="store_true",
                   help="send each model's requests to a local `vllm serve` of its folder (started here)")
    args = p.parse_args(argv)
    # A plain SIGTERM would skip the `finally` that stops a `--serve` server (left holding GBs of RAM).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.list:
        for name, cfg in CONFIGS.items():
            extra = (f"  (T={cfg.temperature}" if cfg.temperature is not None else "  (") + f", samples {cfg.samples})"
            print(f"{name:24s} {shlex.join(cfg.args)}{extra}{'' if name in TABLE else '  [ablation]'}")
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    names = list(CONFIGS) if args.only == "all" else \
        [n.strip() for n in args.only.split(",")] if args.only else list(TABLE)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not models or args.n <= 0:
        why = f"unknown config '{unknown[0]}'; valid: {', '.join(CONFIGS)}" if unknown else \
            "--models is empty" if not models else "--n must be > 0"
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.report:
        args.no_append = True
    elif not args.resume:
        busy = [f"{args.out / n / m}" for n in names for m in models if (args.out / n / m).is_dir()]
        if busy:
            print(f"error: {busy[0]} already holds traces; pass --resume to continue, or another --out",
                  file=sys.stderr)
            return 2
    notes = [] if args.report else run_all(names, models, args)
    rows = [r for name in names for model in models for r in rows_for(name, CONFIGS[name].samples, model, args)]
    match_budgets(rows)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    which = {"all": "", "even": ", the even-numbered (tuning) split", "odd": ", the odd-numbered (untuned) split"}
    text = (f"## Strategies: {', '.join(models)}, first {args.n} tasks{which[args.split]} ({now})\n\n"
            f"Machine: {machine()}; Python {platform.python_version()}; git {git_rev()}. "
            f"`bench/strategies.py --models {args.models} --n {args.n} --split {args.split}"
            f"{' --serve' if args.serve else ''}{' --only ' + args.only if args.only else ''}"
            f"{' --cli-args ' + shlex.quote(args.cli_args) if args.cli_args else ''}`: each config through "
            "`run_agents.py --no-embed`; tokens are means per episode, computed = prompt - cached; "
            "wall s excludes model load; tokens / solved = (prompt + completion) / tasks solved; mean batch = "
            "requests in flight while the engine was busy.\n\n"
            + (table(rows) if rows else "(no finished episodes)") + "\n"
            + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else ""))
    print(text)
    if not args.no_append and rows:
        with args.results.open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return 1 if any("exited" in n for n in notes) else 0


if __name__ == "__main__":
    sys.exit(main())
