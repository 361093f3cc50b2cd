"""Write the synthetic HumanEvalPack-format datasets under tests/data/ from their task sources.

    python tests/data/make_datasets.py          # rewrites valuekinds/ and heldout/ (python.jsonl, README.md)

Each task source (valuekinds_tasks.py, heldout_tasks.py) lists tasks as dicts: the module's imports
and helpers, the entry point's `def` line, its docstring, the correct body, the bug as one
(old, new) text replacement in that body, and the test. This script turns them into rows with
exactly HumanEvalFix's fields. Standard library only; the output is deterministic.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIELDS = ("task_id", "prompt", "declaration", "canonical_solution", "buggy_solution", "bug_type",
          "failure_symptoms", "entry_point", "import", "test_setup", "test", "example_test", "signature",
          "docstring", "instruction")


def _block(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _body(text: str) -> str:
    return textwrap.indent(_block(text), "    ") + "\n"


def row(prefix: str, index: int, task: dict[str, Any]) -> dict[str, str]:
    """One dataset row (HumanEvalFix's fields, in its order) from one task source."""
    sig = task["sig"].strip()
    if not (sig.startswith("def ") and sig.endswith(":")):
        raise ValueError(f"{prefix}/{index}: sig must be a def line: {sig!r}")
    entry = sig[4:].split("(", 1)[0]
    head_parts = [p for p in (_block(task.get("imports", "")), _block(task.get("helpers", ""))) if p]
    head = "\n\n\n".join(head_parts) + ("\n\n\n" if head_parts else "")
    doc = _block(task["doc"])
    first, *rest = doc.splitlines()
    doc_block = '    """ ' + first + "\n" + "".join(f"    {line}\n" if line else "\n" for line in rest) + '    """\n'
    canonical = _body(task["body"])
    old, new = task["bug"]
    if canonical.count(old) != 1:
        raise ValueError(f"{prefix}/{index} ({entry}): bug text {old!r} occurs {canonical.count(old)} times")
    buggy = canonical.replace(old, new)
    test = _block(task["test"])
    if f"def check({entry}):" not in test:
        raise ValueError(f"{prefix}/{index} ({entry}): the test has no 'def check({entry}):'")
    signature = sig[4:-1]
    return {
        "task_id": f"{prefix}/{index}",
        "prompt": head + sig + "\n" + doc_block,
        "declaration": head + sig + "\n",
        "canonical_solution": canonical,
        "buggy_solution": buggy,
        "bug_type": task["bug_type"],
        "failure_symptoms": task.get("symptoms", "incorrect output"),
        "entry_point": entry,
        "import": "",
        "test_setup": "",
        "test": "\n\n\n\n\n" + test + f"\n\ncheck({entry})",
        "example_test": "",
        "signature": signature,
        "docstring": doc,
        "instruction": f"Write a Python function `{signature}` to solve the following problem:\n{doc}",
    }


def readme(title: str, intro: str, prefix: str, tasks: list[dict[str, Any]]) -> str:
    lines = [f"# {title}", "", _block(intro), "", "| task_id | entry point | probes | bug |", "|---|---|---|---|"]
    for i, t in enumerate(tasks):
        entry = t["sig"].strip()[4:].split("(", 1)[0]
        lines.append(f"| {prefix}/{i} | `{entry}` | {t['case']} | {t['bug_type']}: {t['bug_note']} |")
    return "\n".join(lines) + "\n"


def write(folder: str, prefix: str, title: str, intro: str, tasks: list[dict[str, Any]]) -> int:
    rows = [row(prefix, i, t) for i, t in enumerate(tasks)]
    out = HERE / folder
    out.mkdir(exist_ok=True)
    text = "".join(json.dumps({k: r[k] for k in FIELDS}, ensure_ascii=False) + "\n" for r in rows)
    (out / "python.jsonl").write_text(text, encoding="utf-8")
    (out / "README.md").write_text(readme(title, intro, prefix, tasks), encoding="utf-8")
    return len(rows)


def main() -> int:
    sys.path.insert(0, str(HERE))
    import heldout_tasks
    import valuekinds_tasks

    for mod, folder, prefix in ((valuekinds_tasks, "valuekinds", "Values"), (heldout_tasks, "heldout", "Heldout")):
        n = write(folder, prefix, mod.TITLE, mod.INTRO, mod.TASKS)
        print(f"{folder}/python.jsonl: {n} tasks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
