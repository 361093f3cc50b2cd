"""The strategy table of bench/strategies.py: one row per config × model (and one per phase of a chained
strategy) read from the traces, single-shot's pass@n at each row's sampling budget, and the Markdown table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_harness.metrics import aggregate_pass_at_k, bootstrap_interval, wilson_interval
from agent_harness.traces.store import load_traces


def in_split(task_id: str, split: str, n: int) -> bool:
    number = task_id.rsplit("/", 1)[-1]
    return split == "all" or (number.isdigit() and int(number) < n and int(number) % 2 == (split == "odd"))


def _wall(folder: Path, model: str) -> tuple[float, float | None]:
    """The runs' wall time (model load excluded) and the engine's mean batch over them (weighted by the time
    the backend was busy), from `runs.jsonl`."""
    total = busy = area = 0.0
    runs = folder / "runs.jsonl"
    for line in runs.read_text(encoding="utf-8").splitlines() if runs.is_file() else []:
        try:
            row = json.loads(line)
            if row.get("model") == model:
                total += float(row.get("wall_s") or 0.0)
                gen = float(row.get("generate_s") or 0.0)
                busy, area = busy + gen, area + gen * float(row.get("mean_batch") or 0.0)
        except (ValueError, TypeError, AttributeError):
            continue
    return total, area / busy if busy else None


def rows_for(name: str, samples: int, model: str, args: Any) -> list[dict[str, Any]]:
    """The config's row for `model`, then one per phase when its episodes run in phases (reflect-react)."""
    folder = args.out / name
    if not (folder / model).is_dir():
        return []
    frames = load_traces(folder / model)
    runs = frames.runs
    runs = runs[(runs["model"] == model) & runs["completed"].fillna(False).astype(bool)]
    if args.label:
        runs = runs[runs["label"] == args.label]
    runs = runs[[in_split(str(t), args.split, args.n) for t in runs["task_id"]]]
    if runs.empty:
        return []
    per_task: dict[str, list[bool]] = {}
    for task, passed in zip(runs["task_id"], runs["passed"], strict=True):
        per_task.setdefault(str(task), []).append(bool(passed))
    passed = int(sum(map(sum, per_task.values())))
    episodes = len(runs)
    k = samples
    at = aggregate_pass_at_k(per_task, sorted({1, k}))
    lo, hi = wilson_interval(passed, episodes) if k == 1 else bootstrap_interval(per_task, 1)
    solved = sum(any(v) for v in per_task.values())
    wall, batch = _wall(folder, model)
    row = {"config": name, "model": model, "tasks": len(per_task), "pass@1": at.get(1, 0.0), "ci": (lo, hi),
           "pass_k": at.get(k) if k > 1 else None, "k": k, "wall_s": wall, "batch": batch, "solved": solved,
           "per_task": per_task, "wall_per_solved": wall / solved if solved else None,
           **_cost(float(runs["num_turns"].fillna(0).sum()), runs["prompt_tokens"], runs["cached_prompt_tokens"],
                   runs["completion_tokens"], episodes, solved)}
    steps = frames.steps[frames.steps["run_id"].isin(set(runs["run_id"]))]
    replies = int(steps["prompt_tokens"].notna().sum())  # each model reply is one step with token counts
    row["parse_rate"] = int((steps["type"] == "parse_error").sum()) / replies if replies else None
    return [row, *_phase_rows(name, model, runs, steps)]


def _cost(turns: float, prompt: Any, cached: Any, completion: Any, episodes: int, solved: int) -> dict[str, Any]:
    """Per-episode means and per-solved totals of turns and tokens (pandas Series of token counts)."""
    p, c, o = (float(x.fillna(0).sum()) for x in (prompt, cached, completion))
    return {"turns": turns / episodes, "prompt": p / episodes, "computed": (p - c) / episodes,
            "completion": o / episodes, "turns_per_solved": turns / solved if solved else None,
            "tokens_per_solved": (p + o) / solved if solved else None}


def _phase_rows(name: str, model: str, runs: Any, steps: Any) -> list[dict[str, Any]]:
    """One row per phase of a chained strategy: the episodes that reached it, those it solved (the
    episode passed and its last step is in that phase), and its own turns and tokens (each model call is
    one step with token counts). On a greedy backend the first phase's row is what the first strategy
    scores alone; the later ones say what each added on what the phases before it left."""
    steps = steps[steps["phase"].notna()]
    if steps.empty:
        return []
    last = steps.sort_values("i").groupby("run_id")["phase"].last()
    won = set(runs.loc[runs["passed"].fillna(False).astype(bool), "run_id"])
    out = []
    for phase in steps.sort_values("i")["phase"].unique():
        mine = steps[steps["phase"] == phase]
        ids = set(mine["run_id"])
        solved = sum(1 for r in ids if r in won and last.get(r) == phase)
        calls = mine[mine["prompt_tokens"].notna()]
        lo, hi = wilson_interval(solved, len(ids))
        out.append({"config": f"{name} · {phase} phase", "model": model,
                    "tasks": len(set(mine["task_id"])), "pass@1": solved / len(ids), "ci": (lo, hi),
                    "pass_k": None, "k": 1, "wall_s": None, "batch": None, "solved": solved,
                    "wall_per_solved": None,
                    "parse_rate": int((mine["type"] == "parse_error").sum()) / len(calls) if len(calls) else None,
                    **_cost(float(len(calls)), calls["prompt_tokens"], calls["cached_tokens"],
                            calls["completion_tokens"], len(ids), solved)})
    return out


def _num(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def match_budgets(rows: list[dict[str, Any]]) -> None:
    """Give each row single-shot's pass@n at its sampling budget, where a config sampled single-shot several
    times for the same model: n = the row's completion tokens per episode over single-shot's per sample
    (rounded, at least 1; capped at the samples taken, and marked so)."""
    for sampled in [r for r in rows if r["k"] > 1 and r["config"].startswith("single-shot") and r.get("per_task")]:
        for r in rows:
            if r["model"] != sampled["model"] or r is sampled or not sampled["completion"]:
                continue
            n = max(1, round(r["completion"] / sampled["completion"]))
            at = min(n, sampled["k"])
            r["budget"] = (at, aggregate_pass_at_k(sampled["per_task"], [at]).get(at, 0.0), n > at)


def _budget(r: dict[str, Any]) -> str:
    if "budget" not in r:
        return "–"
    n, value, capped = r["budget"]
    return f"pass@{'≥' if capped else ''}{n} {value:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| config | model | tasks | pass@1 [95% CI] | pass@k | single-shot, same budget | mean turns | prompt tok "
            "| computed tok | completion tok | wall s | mean batch | solved | turns / solved | tokens / solved "
            "| wall s / solved | parse errors / reply |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lo, hi = r["ci"]
        pk = "–" if r["pass_k"] is None else f"pass@{r['k']} {r['pass_k']:.3f}"
        lines.append(
            f"| {r['config']} | {r['model']} | {r['tasks']} | {r['pass@1']:.3f} [{lo:.2f}, {hi:.2f}] | {pk} "
            f"| {_budget(r)} | {r['turns']:.2f} | {_num(r['prompt'])} | {_num(r['computed'])} "
            f"| {_num(r['completion'])} | {_num(r['wall_s'])} | {_num(r.get('batch'), '{:.1f}')} | {r['solved']} "
            f"| {_num(r['turns_per_solved'], '{:.1f}')} | {_num(r['tokens_per_solved'])} "
            f"| {_num(r.get('wall_per_solved'), '{:.0f}')} | {_num(r.get('parse_rate'), '{:.3f}')} |")
    return "\n".join(lines)
