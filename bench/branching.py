"""Branching at the model's own doubts: a search over programs that uses the model as a bug locator.

    .venv/bin/python bench/branching.py --model qwen2.5-coder-0.5b --split odd --n 164
    .venv/bin/python bench/branching.py --model qwen2.5-coder-0.5b --dataset-path tests/data/heldout/python.jsonl

For each task the buggy function is put in the assistant's turn of the calibrated single-shot prompt (bigcode's,
the program it would write if it copied the code it was shown) and one request reads the model's log-probabilities
of those tokens (`prompt_logprobs`). Where the model would rather have written another token than the one in the
code, by the largest margin, it doubts the code: the `positions` most doubted tokens each give `alternatives`
candidates, the code up to that token, the model's preferred other token in its place, and the rest of the
function completed greedily. Candidates are scored, in order of doubt, with the harness's own hidden-test scorer
until one passes (HumanEvalFix's visible tests are its hidden ones; a candidate that passes is the one submitted).

This measures the idea before it becomes a strategy: it talks to a local `vllm serve` (started here) directly, so
it needs the vLLM extra, and its numbers are set beside `bench/strategies.py`'s best-of-n rows run on the same
machine with the same number of candidates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _machine import cpu_name  # noqa: E402
from strategies import split_ids  # noqa: E402

from agent_harness.backends.local import first_line  # noqa: E402
from agent_harness.metrics import wilson_interval  # noqa: E402
from agent_harness.types import Task  # noqa: E402

STOP = ["\ndef", "\nclass", "\nif", "\nassert"]  # `vllm serve` takes four; bigcode's cut does the rest


@dataclass(frozen=True)
class Doubt:
    """A token of the given code that the model would rather not have written: `margin` = log p(best other
    token) - log p(the code's token); `others`: the other tokens it prefers, best first."""

    position: int
    margin: float
    others: tuple[int, ...]


def doubts(ids: list[int], logprobs: list[dict[str, Any] | None], start: int, positions: int,
           alternatives: int) -> list[Doubt]:
    """The `positions` most doubted tokens of `ids[start:]`, most doubted first (ties: earlier first)."""
    found: list[Doubt] = []
    for j in range(start, len(ids)):
        scored = logprobs[j] if j < len(logprobs) else None
        if not scored:
            continue
        own = scored.get(str(ids[j]))
        own_lp = float(own["logprob"]) if own else float("-inf")
        others = sorted(((float(v["logprob"]), int(k)) for k, v in scored.items() if int(k) != ids[j]), reverse=True)
        if others:
            found.append(Doubt(j, others[0][0] - own_lp, tuple(k for _, k in others[:alternatives])))
    found.sort(key=lambda d: (-d.margin, d.position))
    return found[:positions]


@dataclass
class Outcome:
    task: str
    solved: bool = False
    candidates: int = 0  # distinct programs scored
    passing: int | None = None  # which of them passed (0-based, in order of doubt)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    wall_s: float = 0.0
    error: str = ""
    branch: dict[str, Any] = field(default_factory=dict)  # where the passing candidate left the given code
    program: str = ""  # the passing program, as submitted
    notes: list[str] = field(default_factory=list)


class Server:
    """The few calls to a `vllm serve` completions endpoint this benchmark makes, with token ids."""

    def __init__(self, base_url: str) -> None:
        import httpx

        self.http = httpx.Client(base_url=base_url, timeout=900)
        self.model = self.http.get("/v1/models").json()["data"][0]["id"]

    def complete(self, prompts: list[list[int]], max_tokens: int, **extra: Any) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompts, "max_tokens": max_tokens, "temperature": 0.0, **extra}
        reply = self.http.post("/v1/completions", json=body)
        reply.raise_for_status()
        out: dict[str, Any] = reply.json()
        return out


def run_task(task: Task, server: Server, tok: Any, args: argparse.Namespace) -> Outcome:
    """One task: the doubts, a greedy completion from each, scored in order until one passes."""
    from agent_harness.scenarios.bigcode_prompt import task_prompt
    from agent_harness.scenarios.humanevalfix import run_hidden_test

    t0, out = time.monotonic(), Outcome(task.id)
    md = task.metadata
    fix = task_prompt(task)
    body = fix.prompt_base[len(fix.prefill):] + task.files[md["module"]][len(str(md["declaration"])):]
    head = tok(fix.render("codeqwen"), add_special_tokens=False)["input_ids"]
    ids = head + tok(body, add_special_tokens=False)["input_ids"]
    scored = server.complete([ids], 1, prompt_logprobs=args.top)
    out.prompt_tokens += int(scored["usage"]["prompt_tokens"])
    found = doubts(ids, scored["choices"][0]["prompt_logprobs"], len(head), args.positions, args.alternatives)
    branches = [(d, alt) for d in found for alt in d.others]
    prefixes = [ids[:d.position] + [alt] for d, alt in branches]
    if not prefixes:
        out.error, out.wall_s = "no doubted token", time.monotonic() - t0
        return out
    replies = server.complete(prefixes, args.max_tokens, stop=STOP)
    out.prompt_tokens += int(replies["usage"]["prompt_tokens"])
    out.completion_tokens += int(replies["usage"]["completion_tokens"])
    seen: set[str] = set()
    choices = sorted(replies["choices"], key=lambda c: int(c["index"]))
    for choice, prefix, (d, alt) in zip(choices, prefixes, branches, strict=True):
        text = tok.decode(prefix[len(head):]) + choice["text"]
        if "\ufffd" in text:
            out.notes.append("a candidate split a character")
            continue
        module = fix.module(text)
        if module in seen:
            continue
        seen.add(module)
        res = run_hidden_test(module, md["module"], md["entry_point"], md["hidden_test"],
                              float(md.get("timeout_s", 10.0)), helpers=str(md.get("helpers", "")))
        out.candidates += 1
        if res.passed:
            out.solved, out.passing, out.program = True, out.candidates - 1, fix.program(text)
            out.branch = {"token": d.position - len(head), "code": tok.decode([ids[d.position]]),
                          "model": tok.decode([alt]), "margin": round(d.margin, 3)}
            break
    out.wall_s = time.monotonic() - t0
    return out


def guarded(task: Task, server: Server, tok: Any, args: argparse.Namespace) -> Outcome:
    """`run_task`, with a fault of its own (a bad reply, a refused request) recorded as that task's error."""
    t0 = time.monotonic()
    try:
        return run_task(task, server, tok, args)
    except Exception as e:
        return Outcome(task.id, error=first_line(e)[:200], wall_s=time.monotonic() - t0)


def load(args: argparse.Namespace) -> list[Task]:
    from agent_harness.scenarios import get_scenario
    from agent_harness.scenarios.base import TaskQuery

    tasks = get_scenario("humanevalfix").load_tasks(TaskQuery(n=args.n, dataset_path=args.dataset_path))
    keep = set(split_ids(args.split, len(tasks)))
    tasks = [t for i, t in enumerate(tasks) if i in keep]
    if args.tasks:
        want = set(args.tasks.split(","))
        tasks = [t for t in tasks if t.id in want]
    return tasks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--registry", type=Path, default=ROOT / "models.yaml")
    p.add_argument("--dataset-path", type=Path, default=None)
    p.add_argument("--n", type=int, default=None, help="the first N tasks (default: all)")
    p.add_argument("--split", choices=["all", "even", "odd"], default="all")
    p.add_argument("--tasks", default="", help="comma-separated task ids (after --n and --split)")
    p.add_argument("--positions", type=int, default=16, help="doubted tokens branched at")
    p.add_argument("--alternatives", type=int, default=2, help="other tokens tried at each")
    p.add_argument("--top", type=int, default=5, help="log-probabilities read per token (vLLM's prompt_logprobs)")
    p.add_argument("--max-tokens", type=int, default=768)
    p.add_argument("--concurrency", type=int, default=8, help="tasks in flight")
    p.add_argument("--out", type=Path, default=ROOT / "bench-out" / "branching")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer
    from vllm_server import ServerError, served_folder, serving

    from agent_harness.registry import load_registry

    spec = load_registry(args.registry).resolve(args.model)[0]
    if spec.bigcode_prompt != "codeqwen":
        raise SystemExit(f"error: {spec.name}: this benchmark renders the codeqwen prompt only")
    tasks = load(args)
    args.out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(served_folder(spec))
    t0, outcomes = time.monotonic(), []
    try:
        with serving(spec, args.out / f"server-{spec.name}.log", args.out / f"served-{spec.name}.yaml"):
            url = json.loads((args.out / f"served-{spec.name}.yaml").read_text())["models"][0]["openai"]["base_url"]
            server = Server(url.removesuffix("/v1"))
            with ThreadPoolExecutor(args.concurrency) as pool, open(args.out / f"tasks-{spec.name}.jsonl", "w") as f:
                for o in pool.map(lambda t: guarded(t, server, tok, args), tasks):
                    outcomes.append(o)
                    f.write(json.dumps(o.__dict__) + "\n")
                    f.flush()
                    print(f"{o.task}: {'solved' if o.solved else 'failed'} after {o.candidates} candidates"
                          f"{' (' + o.error + ')' if o.error else ''}", flush=True)
    except ServerError as e:
        raise SystemExit(f"error: {e}") from None
    wall = time.monotonic() - t0
    solved, n = sum(o.solved for o in outcomes), len(outcomes)
    lo, hi = wilson_interval(solved, n)
    cand = [o.candidates for o in outcomes]
    print(f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {cpu_name()}: {spec.name}, {n} tasks, "
          f"{args.positions} x {args.alternatives} branches")
    print("| model | tasks | pass@1 [95% CI] | solved | candidates scored (mean) | completion tok / task | wall s |")
    print("|---|---|---|---|---|---|---|")
    completion = sum(o.completion_tokens for o in outcomes) / max(n, 1)
    print(f"| {spec.name} | {n} | {solved / max(n, 1):.3f} [{lo:.2f}, {hi:.2f}] | {solved} | "
          f"{sum(cand) / max(n, 1):.1f} | {completion:,.0f} | {wall:,.0f} |")
    print("solved: " + ", ".join(o.task for o in outcomes if o.solved))
    faults = [f"{o.task} ({o.error})" for o in outcomes if o.error]
    if faults:
        print(f"{len(faults)} tasks ended in a fault, counted failed: " + "; ".join(faults))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
