"""Compare models on the same tasks: pass@k with CIs, who solves what, costs, exits, tools, parse errors.

An arm is a model under one harness, tool-calling protocol and strategy configuration; arms are never pooled.

A model run under two tool-calling protocols (text: THOUGHT / TOOL_CALL / FINAL; native: API tool calls)
is two arms, never pooled: every table has a `protocol` column, and where arms are named against each other
(pairwise tables, plots) an arm is "model (protocol)" when the traces hold more than one protocol. Likewise
episodes of other harnesses (imported: `agent-harness import`) are arms of their own: every table has a
`harness` column, and an arm is "model [harness]" when the traces hold more than one harness, so that the
pairwise tables test one harness against another on the tasks both ran.

Usage: python analysis/compare_models.py TRACES_DIR [--out DIR]
   or: agent-harness analyze compare_models TRACES_DIR [--out DIR]
Writes compare_models.md, one CSV per table and pass_at_1.png, pass_vs_steps.png, tokens_time.png,
tool_use.png.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics import aggregate_pass_at_k, bootstrap_interval, wilson_interval
from ..sandbox.safewrite import Folder
from ..text import md_inline
from ..traces.store import TraceFrames
from ._common import Section, parser, passed, prepare, say_caps, write_section
from .arms import ARM, GROUP, arm_names, several_configs, several_harnesses, several_protocols, with_arms
from .compare_plots import plot_pass, plot_pass_vs_steps, plot_tokens_time, plot_tools

KS = (1, 5, 10)
DENSE_TURNS = 50  # pass_vs_steps: a row for every turn budget up to this
MAX_PAIR_MODELS = 40  # pairwise: the models with the most episodes (pairs grow with the square)
MAX_PLOT_ARMS = 20  # plots: the arms with the most episodes (each is an artist, a legend entry, a box)


def pass_ks(samples: int) -> list[int]:
    """The k > 1 to report: 5 and 10 where the samples allow, and k = samples per task."""
    return sorted({k for k in KS if 1 < k <= samples} | ({samples} if samples > 1 else set()))


def _per_task(g: pd.DataFrame) -> dict[str, list[bool]]:
    return {str(t): list(v) for t, v in passed(g).groupby(g["task_id"]).agg(list).items()}


def pass_table(runs: pd.DataFrame, n_boot: int = 2000) -> pd.DataFrame:
    """pass@1 over episodes (Wilson 95 % CI); pass@k, k ≤ samples per task (bootstrap CI over tasks).

    Unscored episodes (a scorer fault: `passed` null) are counted apart and left out of every rate,
    as in summary.json; a group with nothing scored has no rates.
    """
    rows = []
    for key, group in with_arms(runs).groupby(GROUP, sort=True):
        g = group[group["passed"].notna()]
        row: dict[str, object] = {**dict(zip(GROUP, key, strict=True)), "tasks": group["task_id"].nunique(),
                                  "episodes": len(group), "unscored": len(group) - len(g),
                                  "suspicious": suspicious_count(group)}
        if g.empty:
            rows.append(row)
            continue
        per_task = _per_task(g)
        n, c = len(g), int(passed(g).sum())
        lo, hi = wilson_interval(c, n)
        samples = min(len(v) for v in per_task.values())
        row.update({"samples/task": samples, "passed": c, "pass@1": c / n, "pass@1 lo": lo, "pass@1 hi": hi})
        for k, value in aggregate_pass_at_k(per_task, pass_ks(samples)).items():
            row[f"pass@{k}"] = value
            row[f"pass@{k} lo"], row[f"pass@{k} hi"] = bootstrap_interval(per_task, k=k, n_boot=n_boot)
        comp = g["compromised"].dropna().astype(bool)
        if len(comp):
            row["compromised"] = comp.mean()
            row["compromised lo"], row["compromised hi"] = wilson_interval(int(comp.sum()), len(comp))
        rows.append(row)
    return pd.DataFrame(rows)


def suspicious_count(runs: pd.DataFrame) -> int:
    """Episodes the scorer flagged `suspicious` (it saw signs of a forged pass; such an episode fails)."""
    return int(runs["suspicious"].notna().sum()) if "suspicious" in runs else 0


def solved_by_task(runs: pd.DataFrame, several: bool | None = None, harnesses: bool | None = None,
                   configs: bool | None = None) -> pd.DataFrame:
    """(scenario, label, task_id) × arm (see `arm_names`): True when at least one of the arm's samples passed."""
    runs = with_arms(runs)
    keys = [runs["scenario"], runs["label"], runs["task_id"],
            arm_names(runs, several, harnesses, configs).rename("model")]
    return passed(runs).groupby(keys).any().unstack()


def pairwise(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per pair of arms (models, or "model (protocol)" when there are several protocols) and scenario × label:
    tasks solved by both/one/neither, with an exact McNemar test.

    Returns (pairs, tasks solved by one arm and not another, matrix of "row solved, column not"
    counts pooled over every scenario × label).
    """
    from scipy.stats import binomtest

    runs = with_arms(runs)
    several, harnesses, configs = several_protocols(runs), several_harnesses(runs), several_configs(runs)
    arms = arm_names(runs, several, harnesses, configs)
    top = arms.value_counts(sort=True).index[:MAX_PAIR_MODELS]
    solved = solved_by_task(runs[arms.isin(top)], several, harnesses, configs)
    models = list(solved.columns)
    pairs, only, matrix = [], [], pd.DataFrame(0, index=models, columns=models)
    for (scenario, label), tab in solved.groupby(level=[0, 1], sort=True):
        for a, b in itertools.combinations(models, 2):
            both_ran = tab[[a, b]].dropna()
            sa, sb = both_ran[a].astype(bool), both_ran[b].astype(bool)
            only_a, only_b = int((sa & ~sb).sum()), int((sb & ~sa).sum())
            if both_ran.empty:
                continue
            p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
            pairs.append({"scenario": scenario, "label": label, "model A": a, "model B": b,
                          "common tasks": len(both_ran), "both": int((sa & sb).sum()), "only A": only_a,
                          "only B": only_b, "neither": int((~sa & ~sb).sum()), "McNemar p": p})
            matrix.loc[a, b] += only_a
            matrix.loc[b, a] += only_b
            for winner, loser, mask in ((a, b, sa & ~sb), (b, a, sb & ~sa)):
                only += [{"scenario": scenario, "label": label, "task_id": idx[2], "solved by": winner,
                          "not solved by": loser} for idx in both_ran.index[mask.to_numpy()]]
    matrix.index.name = "solved by ↓, not by →"
    cols = ["scenario", "label", "task_id", "solved by", "not solved by"]
    return pd.DataFrame(pairs), pd.DataFrame(only, columns=cols), matrix.reset_index()


def distributions(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol × scenario: mean, median, p90 and max of turns, steps, tokens and wall time
    per episode."""
    runs = with_arms(runs)
    runs = runs.assign(total_tokens=runs["prompt_tokens"].fillna(0) + runs["completion_tokens"].fillna(0))
    metrics = ["turns_used", "num_steps", "total_tokens", "completion_tokens", "elapsed_seconds"]
    long = runs.melt(id_vars=[*ARM, "scenario"], value_vars=metrics, var_name="metric").dropna()
    long["value"] = long["value"].astype(float)
    stats = long.groupby([*ARM, "scenario", "metric"], sort=True)["value"]
    out = stats.agg(["mean", "median", lambda s: s.quantile(0.9), "max"])
    out.columns = ["mean", "median", "p90", "max"]
    return out.reset_index()


def exit_reasons(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol × scenario: episodes by exit reason."""
    runs = with_arms(runs)
    table = pd.crosstab([runs[c] for c in (*ARM, "scenario")],
                        runs["exit_reason"].fillna("none"))
    return table.reset_index().rename_axis(columns=None)


def tool_usage(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol × tool: calls, calls per episode and the share of episodes that used the tool."""
    runs = with_arms(runs)
    calls = steps[steps["type"] == "tool_call"].assign(tool=lambda d: d["tool"].fillna("?"))
    arm_of = runs[["run_id", *ARM]].drop_duplicates("run_id")  # steps carry the model, not the protocol
    calls = calls.drop(columns=[c for c in ARM if c in calls]).merge(arm_of, on="run_id")
    if calls.empty:
        return pd.DataFrame(columns=[*ARM, "tool", "calls", "calls/episode", "episodes using"])
    episodes = runs.groupby(ARM).size().rename("episodes")
    table = calls.groupby([*ARM, "tool"]).agg(calls=("run_id", "size"), users=("run_id", "nunique"))
    table = table.reset_index().join(episodes, on=ARM)
    table["calls/episode"] = table["calls"] / table["episodes"]
    table["episodes using"] = table["users"] / table["episodes"]
    order = [True] * len(ARM) + [False]  # the arms in order, each arm's most used tool first
    return table.drop(columns=["users", "episodes"]).sort_values([*ARM, "calls"], ascending=order)


def write_behaviour(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol × scenario: how episodes use write_file. A copy loop shows as many writes per
    episode but one version: stale writes changed nothing or brought back a version that had failed."""
    cols = [*ARM, "scenario", "episodes", "writes/episode", "versions/episode", "stale writes/episode",
            "episodes with 2+ versions", "restarts/episode"]
    writes = steps[(steps["type"] == "tool_result") & (steps["tool"] == "write_file") & steps["file_sha"].notna()]
    if writes.empty:
        return pd.DataFrame(columns=cols)
    changed = writes["file_changed"].astype("boolean").fillna(False).astype(bool)
    per_run = pd.DataFrame({
        "writes": writes.groupby("run_id").size(),
        "versions": writes[changed].groupby("run_id")["file_sha"].nunique(),
        "stale": writes[~changed | writes["repeat_of"].notna()].groupby("run_id").size(),
        "restarts": steps[steps["type"] == "restart"].groupby("run_id").size(),
    })
    runs = with_arms(runs).join(per_run, on="run_id").fillna({k: 0 for k in per_run.columns})
    g = runs.groupby([*ARM, "scenario"], sort=True)
    out = g.agg(episodes=("run_id", "size"), w=("writes", "mean"), v=("versions", "mean"), s=("stale", "mean"),
                two=("versions", lambda s: float((s >= 2).mean())), r=("restarts", "mean")).reset_index()
    out.columns = cols
    return out


def _turns(runs: pd.DataFrame) -> pd.Series:
    """Model turns per episode: turns_used (it counts a submitting turn, num_turns does not), and at least
    one per parse error (each is a refused reply; a hand-edited trace may put several in one turn)."""
    return np.maximum(runs["turns_used"].fillna(0), runs["parse_errors"].fillna(0)).astype(int)


def parse_errors(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol × scenario: parse errors per model turn, and the share of episodes with at least one."""
    runs = with_arms(runs)
    runs = runs.assign(turns=_turns(runs))
    g = runs.groupby([*ARM, "scenario"], sort=True)
    out = g.agg(episodes=("run_id", "size"), turns=("turns", "sum"),
                parse_errors=("parse_errors", "sum"))
    out["parse errors/turn"] = out["parse_errors"] / out["turns"].clip(lower=1)
    out["episodes with one"] = g["parse_errors"].apply(lambda s: float((s > 0).mean()))
    return out.reset_index()


def parse_failures(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model × protocol, all scenarios: episodes, model turns, parse_error steps, parse errors per turn
    (Wilson 95 % CI over turns) and the share of episodes with at least one parse error."""
    cols = [*ARM, "episodes", "turns", "parse errors", "parse errors/turn", "parse errors/turn lo",
            "parse errors/turn hi", "episodes with any"]
    runs = with_arms(runs)
    rows = []
    for arm, g in runs.groupby(ARM, sort=True):
        turns, errors = int(_turns(g).sum()), int(g["parse_errors"].fillna(0).sum())
        lo, hi = wilson_interval(errors, turns)
        rows.append([*arm, len(g), turns, errors, errors / turns if turns else np.nan, lo, hi,
                     float((g["parse_errors"].fillna(0) > 0).mean())])
    return pd.DataFrame(rows, columns=cols)


def pass_vs_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """Share of episodes that passed using at most s model turns: for every s up to the longest episode
    (at most DENSE_TURNS), and past that at each turn count some episode of the group used (the curve
    changes only there). Rows grow with the episodes, never with the turn numbers a trace holds."""
    runs = with_arms(runs).assign(ok=passed(runs))
    longest = int(runs["turns_used"].max()) if len(runs) else 0
    dense = np.arange(1, min(longest, DENSE_TURNS) + 1)
    parts = []
    for key, g in runs.groupby(GROUP, sort=True):
        used = g["turns_used"].to_numpy(np.int64)
        budgets = np.union1d(dense, used[used > DENSE_TURNS])
        solved = np.sort(used[g["ok"].to_numpy(bool)])
        parts.append(pd.DataFrame({**dict(zip(GROUP, key, strict=True)), "max turns": budgets,
                                   "pass@1": np.searchsorted(solved, budgets, side="right") / len(g)}))
    cols = [*GROUP, "max turns", "pass@1"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def analyze(frames: TraceFrames, out: Folder | Path, n_boot: int = 2000) -> Section:
    """Every table and plot of the comparison, as one section."""
    runs, steps = with_arms(frames.runs), frames.steps
    several, harnesses, configs = several_protocols(runs), several_harnesses(runs), several_configs(runs)
    table = pass_table(runs, n_boot)
    pairs, only, matrix = pairwise(runs)
    tools = tool_usage(runs, steps)
    curve = pass_vs_steps(runs)

    shown = set(arm_names(runs, several, harnesses, configs).value_counts(sort=True).index[:MAX_PLOT_ARMS])

    def named(df: pd.DataFrame) -> pd.DataFrame:
        """`df` with `model` naming the arm, only the arms the plots show."""
        df = df.assign(model=arm_names(df, several, harnesses, configs)) if len(df) else df
        return df[df["model"].isin(shown)] if len(df) else df

    sec = Section("Model comparison", text=[
        f"{len(runs)} complete episodes of {runs['model'].nunique()} model(s), tool-calling protocol(s) "
        f"{', '.join(md_inline(p) for p in sorted(runs['protocol'].unique()))}, on "
        f"{runs.groupby(['scenario', 'label', 'task_id']).ngroups} scenario × label × task combination(s).",
        "pass@1 is the share of passing episodes, with a 95 % Wilson score interval over episodes. "
        "pass@k (k ≤ samples per task) is the unbiased estimator of Chen et al. averaged over tasks, with a "
        f"95 % percentile bootstrap interval over tasks ({n_boot} resamples). An unscored episode (a scorer "
        "fault) is counted in 'unscored' and left out of every rate. compromised is the share of episodes "
        "whose scorer flagged a compromise (Wilson CI). suspicious counts the episodes the scorer failed for "
        "signs of a forged pass (reward hacking: tests skipped or stubbed, an exit before the verdict, "
        "values that compare equal to anything).",
        "A task is solved by a model when at least one of its samples passed. 'only A' counts tasks solved "
        "by A and not by B among the tasks both ran; McNemar p is the exact two-sided binomial test on "
        "only A vs only B (discordant pairs).",
        "Pass vs turn budget: an episode counts as passed within s turns when it passed and used at most s "
        "model turns (turns_used = highest step turn + 1; outcome.num_turns does not count a submitting "
        "turn).",
        "Tool-calling protocol: text (THOUGHT / TOOL_CALL / FINAL) or native (the API's tool calls). Runs of "
        "one model under two protocols are never pooled: every table has a protocol column"
        + (", and the pairwise tables and plots name each arm 'model (protocol)'." if several else "."),
        "Harness: who ran the episode: agent-harness (this project), or the harness an imported episode came "
        "from (`agent-harness import`: ATIF trajectories, mini-swe-agent, Inspect logs). Harnesses are never "
        "pooled: every table has a harness column"
        + (f" ({', '.join(md_inline(h) for h in sorted(runs['harness'].unique()))}), and the pairwise tables "
           "and plots name each arm 'model [harness]': a pair of arms of two harnesses is a paired test between "
           "them on the tasks both ran." if harnesses else "."),
        "Strategy configuration (config): the strategy and, where the traces hold several configurations of "
        "one strategy, the settings that tell them apart (–: a setting the trace does not record, the default "
        "of the harness that wrote it). Configurations are never pooled: every table has a config column, and "
        "the scenario is the task's (a trace folder's strategy and protocol suffixes taken off), so the "
        "strategies and protocols of one model meet on the same tasks"
        + (", and the pairwise tables and plots name each arm 'model · config': a pair of arms of one model is "
           "a paired test between its configurations." if configs else "."),
        "Parse failures: parse_error steps (replies the parser refused) per model turn (turns_used, and at "
        "least one per parse error), with a 95 % Wilson interval over turns; 'episodes with any' is the share "
        "of episodes with at least one.",
    ])
    if (n_arms := runs.groupby(ARM).ngroups) > MAX_PAIR_MODELS:
        sec.caps.append(f"{n_arms} models: the pairwise tables cover the {MAX_PAIR_MODELS} "
                        "with the most episodes.")
    if n_arms > MAX_PLOT_ARMS:
        sec.caps.append(f"{n_arms} models: the plots show the {MAX_PLOT_ARMS} with the most episodes (the "
                        "tables have them all).")
    flagged = runs[runs["suspicious"].notna()] if "suspicious" in runs else runs.iloc[:0]
    if len(flagged):
        sec.tables.append(("suspicious", "Episodes flagged suspicious (signs of a forged pass), with the scorer's "
                           "reason", flagged[[*GROUP, "task_id", "sample", "suspicious"]]
                           .sort_values([*GROUP, "task_id", "sample"])))
    sec.tables[:0] = [
        ("pass_at_k", "pass@k per model × protocol × scenario × label", table),
        ("pairwise", "Tasks solved by one model and not the other (per scenario × label)", pairs),
        ("solved_matrix", "Tasks solved by the row model and not the column model (all scenarios)", matrix),
        ("solved_only", "Which tasks: solved by one model, not the other", only),
        ("distributions", "Turns, steps, tokens and wall time per episode", distributions(runs)),
        ("exit_reasons", "Exit reasons (episodes)", exit_reasons(runs)),
        ("tool_usage", "Tool use", tools),
        ("write_behaviour", "Writes and versions per episode (a copy loop: many writes, one version)",
         write_behaviour(runs, steps)),
        ("parse_failures", "Parse failures per protocol (model × protocol, all scenarios)", parse_failures(runs)),
        ("parse_errors", "Parse errors per scenario", parse_errors(runs)),
        ("pass_vs_steps", "pass@1 within a turn budget", curve),
    ]
    sec.plots += [
        ("pass@1 by model (95 % CI)", plot_pass(named(table), out)),
        ("pass@1 vs max turns", plot_pass_vs_steps(named(curve), out)),
        ("Tokens and wall time per task", plot_tokens_time(named(runs), out)),
        ("Tool use per episode", plot_tools(named(tools), out)),
    ]
    return sec


def main(argv: list[str] | None = None) -> int:
    p = parser("compare_models", __doc__.splitlines()[0])
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples for pass@k CIs")
    args = p.parse_args(argv)
    frames, out = prepare(args)
    section = analyze(frames, out, args.boot)
    say_caps(section)
    print(f"wrote {write_section(section, out, 'compare_models')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
