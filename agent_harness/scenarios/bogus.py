"""`bogus`: HumanEvalFix-shaped tasks that no implementation can pass, as a scorer sanity check.

Each hidden test contradicts itself (a plain int that must equal both 1 and 2, a list that must
be sorted both ways, ...), fails unconditionally, or never ends. The oracle makes the most
sensible edit anyway; it must score 0 here, and any model scoring above 0 points at a scorer
that can be fooled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..types import Task
from .humanevalfix import HumanEvalFix, build_task, select_rows

if TYPE_CHECKING:
    from .base import TaskQuery

TIMEOUT_S = 3.0

# Rows in the HumanEvalFix format; `canonical_solution` is the oracle's best-effort edit.
ROWS: list[dict[str, str]] = [
    {
        "task_id": "Bogus/0",
        "entry_point": "one_and_two",
        "declaration": "def one_and_two() -> int:\n",
        "buggy_solution": "    return 0\n",
        "canonical_solution": "    return 1\n",
        "test": (
            "def check(one_and_two):\n"
            "    value = one_and_two()\n"
            "    assert type(value) is int\n"
            "    assert value == 1\n"
            "    assert value == 2\n\n"
            "check(one_and_two)\n"
        ),
        "bug_type": "impossible",
        "failure_symptoms": "contradictory assertions",
    },
    {
        "task_id": "Bogus/1",
        "entry_point": "sort_both_ways",
        "declaration": "def sort_both_ways(xs: list) -> list:\n",
        "buggy_solution": "    return xs\n",
        "canonical_solution": "    return sorted(xs)\n",
        "test": (
            "def check(sort_both_ways):\n"
            "    out = sort_both_ways([2, 1])\n"
            "    assert type(out) is list and [type(v) for v in out] == [int, int]\n"
            "    assert out == [1, 2]\n"
            "    assert out == [2, 1]\n\n"
            "check(sort_both_ways)\n"
        ),
        "bug_type": "impossible",
        "failure_symptoms": "contradictory assertions",
    },
    {
        "task_id": "Bogus/2",
        "entry_point": "add",
        "declaration": "def add(a: int, b: int) -> int:\n",
        "buggy_solution": "    return a - b\n",
        "canonical_solution": "    return a + b\n",
        "test": (
            "def check(add):\n"
            "    assert add(2, 3) == 5\n"
            "    raise AssertionError('this check always fails after the real assertions')\n\n"
            "check(add)\n"
        ),
        "bug_type": "impossible",
        "failure_symptoms": "unconditional failure",
    },
    {
        "task_id": "Bogus/3",
        "entry_point": "parity",
        "declaration": "def parity(n: int) -> int:\n",
        "buggy_solution": "    return n % 3\n",
        "canonical_solution": "    return n % 2\n",
        "test": (
            "def check(parity):\n"
            "    p = parity(7)\n"
            "    assert type(p) is int\n"
            "    assert p % 2 == 0\n"
            "    assert p % 2 == 1\n\n"
            "check(parity)\n"
        ),
        "bug_type": "impossible",
        "failure_symptoms": "contradictory assertions",
    },
    {
        "task_id": "Bogus/4",
        "entry_point": "identity",
        "declaration": "def identity(x):\n",
        "buggy_solution": "    return None\n",
        "canonical_solution": "    return x\n",
        "test": (
            "def check(identity):\n"
            "    assert identity(3) == 3\n"
            "    while True:  # the check never ends: the scorer must time out\n"
            "        pass\n\n"
            "check(identity)\n"
        ),
        "bug_type": "impossible",
        "failure_symptoms": "infinite loop",
    },
]


@dataclass
class Bogus(HumanEvalFix):
    """Impossible tasks, scored exactly like HumanEvalFix: a pass here means the scorer is broken."""

    name: str = "bogus"
    description: str = "Sanity check: tasks no implementation can pass; the oracle must score 0"
    labels: tuple[str, ...] = ("gold",)
    timeout_s: float = TIMEOUT_S

    def load_tasks(self, query: TaskQuery) -> list[Task]:
        if query.label not in self.labels:
            raise ConfigError(f"{self.name}: unknown label '{query.label}'; valid: {', '.join(self.labels)}")
        if query.dataset_path is not None or query.options.get("hub"):
            raise ConfigError(f"{self.name}: has built-in tasks only; it takes no dataset")
        return [build_task(row, i, self.name, query.label, self.timeout_s)
                for i, row in select_rows(ROWS, tuple(query.task_ids), query.n, self.name)]


SCENARIO = Bogus()
