"""Check a HumanEvalPack-format dataset the classic single-process way (standard library only).

    python tests/data/check_single_process.py DATASET.jsonl [--timeout 10] [--max-seconds 1.0]

For every row, in a fresh subprocess each: the reference program (`import + declaration +
canonical_solution`, then the test) must pass, and the buggy one (`... + buggy_solution`) must fail
by a wrong value or behaviour (an exception while the test runs, not a syntax error, not an error
while the module alone is executed, not a timeout). The test is appended to the module and the
whole text is exec'd in one fresh namespace, as bigcode-evaluation-harness does. Also checked:
the row has exactly HumanEvalFix's fields, ids are unique, the test defines `check(<entry_point>)`
and ends by calling it, and the reference runs in under --max-seconds (measured inside the child,
without interpreter start-up). Prints one line per problem and a summary; exit status 1 on any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

FIELDS = {"task_id", "prompt", "declaration", "canonical_solution", "buggy_solution", "bug_type",
          "failure_symptoms", "entry_point", "import", "test_setup", "test", "example_test", "signature",
          "docstring", "instruction"}
EMPTY_FIELDS = ("import", "test_setup", "example_test")

# Runs in the child: the module alone first (in its own fresh namespace), then module + test.
CHILD = r"""
import json, sys, time
spec = json.loads(sys.stdin.read())
module, test = spec["module"], spec["test"]
try:
    compile(module + "\n" + test, "<program>", "exec")
except SyntaxError as e:
    print(json.dumps({"phase": "compile", "error": f"{type(e).__name__}: {e}"})); sys.exit(3)
try:
    exec(compile(module, "<module>", "exec"), {})
except BaseException as e:
    print(json.dumps({"phase": "module", "error": f"{type(e).__name__}: {e}"[:300]})); sys.exit(3)
t0 = time.perf_counter()
try:
    exec(compile(module + "\n" + test, "<program>", "exec"), {})
except BaseException as e:
    tb = e.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<program>":
            line = tb.tb_lineno
        tb = tb.tb_next
    print(json.dumps({"phase": "test", "error": f"{type(e).__name__}: {e}"[:300], "line": line,
                      "seconds": time.perf_counter() - t0}))
    sys.exit(1)
print(json.dumps({"phase": "done", "seconds": time.perf_counter() - t0}))
"""


def run_program(module: str, test: str, timeout: float) -> dict:
    """How the program went in a fresh interpreter: phase (compile/module/test/done/timeout), error, seconds."""
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", CHILD], input=json.dumps({"module": module, "test": test}),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"phase": "timeout", "error": f"no result within {timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return {"phase": "crash", "error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}


def row_problems(row: dict, seen: set[str]) -> list[str]:
    """Format problems of one row (no program is run)."""
    out = []
    missing, extra = FIELDS - set(row), set(row) - FIELDS
    if missing or extra:
        out.append(f"fields: missing {sorted(missing)}, unexpected {sorted(extra)}")
    bad = sorted(k for k in FIELDS & set(row) if not isinstance(row[k], str))
    if bad:
        out.append(f"non-string fields: {bad}")
        return out
    if row.get("task_id") in seen:
        out.append("duplicate task_id")
    ep = row.get("entry_point", "")
    if not ep.isidentifier():
        out.append(f"entry_point {ep!r} is not a name")
    if ep in sys.stdlib_module_names:
        out.append(f"entry_point {ep!r} is a standard-library module name (its file would shadow it)")
    test = row.get("test", "")
    if f"def check({ep}):" not in test or test.rstrip().splitlines()[-1:] != [f"check({ep})"]:
        out.append(f"test must define check({ep}) and end with check({ep})")
    if row.get("canonical_solution") == row.get("buggy_solution"):
        out.append("buggy_solution equals canonical_solution")
    if not row.get("prompt", "").startswith(row.get("declaration", "\0").rstrip("\n")):
        out.append("prompt does not start with the declaration")
    out += [f"field {k!r} should be empty" for k in EMPTY_FIELDS if row.get(k)]
    return out


def check_row(row: dict, timeout: float, max_seconds: float) -> tuple[list[str], float | None, str]:
    """Problems found when running the reference and the buggy program; the reference's seconds; how
    the buggy program failed."""
    problems = []
    head = row["import"] + row["declaration"]
    ref = run_program(head + row["canonical_solution"], row["test"], timeout)
    secs = ref.get("seconds") if ref["phase"] == "done" else None
    if ref["phase"] != "done":
        where = f" (line {ref['line']})" if ref.get("line") else ""
        problems.append(f"reference fails at {ref['phase']}{where}: {ref.get('error')}")
    elif isinstance(secs, float) and secs > max_seconds:
        problems.append(f"reference takes {secs:.2f} s (> {max_seconds:g} s)")
    bug = run_program(head + row["buggy_solution"], row["test"], timeout)
    if bug["phase"] == "done":
        problems.append("buggy version passes")
    elif bug["phase"] != "test":
        problems.append(f"buggy version fails at {bug['phase']}, not in the test: {bug.get('error')}")
    how = f"line {bug.get('line')}: {bug.get('error')}" if bug["phase"] == "test" else ""
    return problems, secs, how


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per program (default 10)")
    ap.add_argument("--max-seconds", type=float, default=1.0, help="slowest allowed reference test run (default 1)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also print a line per good task")
    args = ap.parse_args(argv)
    try:
        lines = args.dataset.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        print(f"{args.dataset}: cannot read: {e.strerror}", file=sys.stderr)
        return 2
    seen: set[str] = set()
    bad = 0
    times: list[tuple[float, str]] = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as e:
            print(f"line {n}: not JSON: {e}")
            bad += 1
            continue
        if not isinstance(row, dict):
            print(f"line {n}: not an object")
            bad += 1
            continue
        tid = str(row.get("task_id", f"line {n}"))
        problems = row_problems(row, seen)
        seen.add(tid)
        secs, how = None, ""
        if not problems:
            problems, secs, how = check_row(row, args.timeout, args.max_seconds)
        if secs is not None:
            times.append((secs, tid))
        for p in problems:
            print(f"{tid}: {p}")
        if problems:
            bad += 1
        elif args.verbose:
            print(f"{tid}: ok ({row['entry_point']}, reference {secs:.3f} s; buggy fails at {how})")
    slowest = max(times) if times else (0.0, "-")
    print(f"{len(seen)} tasks, {bad} with problems; slowest reference {slowest[0]:.3f} s ({slowest[1]})")
    return 1 if bad or not seen else 0


if __name__ == "__main__":
    raise SystemExit(main())
