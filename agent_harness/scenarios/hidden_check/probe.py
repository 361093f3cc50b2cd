"""The probe: the test run the old way, for a module that failed the check (see hidden_score.py).

The module is imported here, its top-level `names` (those bound to something other than the test's
own) laid over the helpers, and the entry point called directly. When the test passes with them and
fails without, it reports the names it cannot do without. It never decides a pass; it only shows
that those names would bend the test.
"""

from __future__ import annotations

import builtins
import os
from typing import Any

from .checker import compile_source, read_spec
from .wire import send
from .worker import load


def main(argv: list[str]) -> int:
    """``probe VERDICT_FD SPEC_FD``."""
    verdict_fd = int(argv[0])
    os.set_inheritable(verdict_fd, False)
    spec = read_spec(int(argv[1]))
    mod = load(spec["module"])
    helpers = compile_source(spec["helpers"], "<reference helpers>")
    test = compile_source(spec["test"], "<hidden test>")

    def passes(names: list[str]) -> bool:
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        exec(helpers, namespace)
        namespace.update({k: getattr(mod, k) for k in names})
        namespace[spec["entry_point"]] = getattr(mod, spec["entry_point"])
        try:
            exec(test, namespace)
        except Exception:
            return False
        return True

    reference: dict[str, Any] = {"__builtins__": builtins}
    exec(helpers, reference)
    missing = object()
    laid = [k for k in spec["names"] if hasattr(mod, k)
            and reference.get(k, getattr(builtins, k, missing)) is not getattr(mod, k)]
    if not laid or passes([]) or not passes(laid):
        return 1
    needed = [k for k in laid if not passes([m for m in laid if m != k])]
    send(verdict_fd, {"passed": True, "names": needed or laid})
    return 0
