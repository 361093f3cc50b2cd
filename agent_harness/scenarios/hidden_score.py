"""Scoring a HumanEvalFix-shaped task: the dataset's hidden test against the final module, in the sandbox.

The test runs in a checker process that never imports the module; a worker process holds the module
and carries out what the test asks of it (the package hidden_check/, copied into the scoring folder).
The test's specification reaches the checker through a descriptor, never a file, so the code under
test cannot read it. The checker's names are the entry point and the helpers the task's reference
code defines, nothing from the module. A module that binds, at its top level, a name the test uses
(`abs`, `range`, a helper) cannot change what the test means; when such a module fails, a probe
runs the test the old way, with those names laid over the test's, and if it passes there the
episode is flagged *suspicious* (the names would have forged the pass).
"""

from __future__ import annotations

import ast
import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..tools.output import truncate
from ..types import ScoreResult
from . import verdict

if TYPE_CHECKING:
    from ..sandbox import SandboxSpec

HIDDEN_TIMEOUT_S = 10.0  # bigcode-evaluation-harness uses 10 s for Python
MAX_OUTPUT_CHARS = 4000
MAX_REASON = 300
# A folder no module can take: an entry point is an identifier, so its module never starts with a dot.
CHECKER_DIR = ".hidden"
CHECKER_PACKAGE = Path(__file__).with_name("hidden_check")
BOOT = ("import os, sys; sys.path.insert(0, os.path.abspath({folder!r})); "
        "from hidden_check.{part} import main; sys.exit(main(sys.argv[1:]))")


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def reference_helpers(reference: str, entry_point: str) -> str:
    """The reference module's top-level code other than the entry point's `def`: the imports and
    helpers (`poly`, `encode_cyclic`, ...) the hidden test may use. It comes from the dataset, so
    what the model's module defines never reaches the test. Empty when the reference does not parse."""
    tree = _parse(reference)
    if tree is None:
        return ""
    lines = reference.splitlines()
    keep = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            continue
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        keep.append("\n".join(lines[start - 1: node.end_lineno]))
    return "\n\n".join(keep) + "\n" if keep else ""


def _definitions(tree: ast.Module) -> dict[str, str]:
    """name -> the text of its top-level `def` or `class` (its AST, without positions)."""
    return {node.name: ast.dump(node) for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def shadowing_names(source: str, test: str, entry_point: str, helpers: str = "") -> list[str]:
    """Names the module binds at its top level that the test also uses (other than the entry point),
    except a definition identical to the reference's own (every fix carries the helper classes of its
    task: laying them over the test's changes nothing)."""
    mod, tst, ref = _parse(source), _parse(test), _parse(helpers)
    if mod is None or tst is None:
        return []
    used = {n.id for n in ast.walk(tst) if isinstance(n, ast.Name)}
    same = _definitions(ref) if ref is not None else {}
    bound: set[str] = set()
    for node in mod.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if same.get(node.name) != ast.dump(node):
                bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return sorted((bound & used) - {entry_point})


def hidden_spec(module: str, entry_point: str, test: str, helpers: str = "", names: list[str] | None = None) -> str:
    """What the checker runs: the dataset's test, with `helpers` and the entry point as its only
    names (and, for the probe, the module's `names` laid over them)."""
    return json.dumps({"module": module.removesuffix(".py"), "entry_point": entry_point, "helpers": helpers,
                       "test": test.strip() + "\n", "names": names or []})


def _spec_fd(spec: str) -> int:
    """A descriptor holding `spec` and nothing on disk: the checker reads it and closes it before the
    module is imported."""
    fd = os.memfd_create("hidden-spec", os.MFD_CLOEXEC)
    data = memoryview(spec.encode("utf-8"))
    while data:
        data = data[os.write(fd, data):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run(source: str, module: str, spec: str, part: str, timeout_s: float,
         sandbox: SandboxSpec | None = None) -> tuple[Any, bytes, str | None]:
    """Run the checker's `part` ("checker" or "probe") on `source` in a fresh folder, in the sandbox (under
    Docker a fresh container of the task's image: the spec reaches the checker on its stdin, the verdict
    leaves on its stdout, see docker_sandbox.py)."""
    from ..sandbox import Limits, run_sandboxed
    from ..sandbox.safefs import remove_tree
    from ..sandbox.tempdirs import owned_tempdir

    tmp = owned_tempdir("hidden")  # removed by a later run if this one is killed
    spec_fd = _spec_fd(spec)
    sources = {f"hidden_check/{f.name}": f.read_bytes() for f in CHECKER_PACKAGE.glob("*.py")}
    try:
        (tmp / module).write_text(source, encoding="utf-8")
        for rel, data in sources.items():
            (tmp / CHECKER_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / CHECKER_DIR / rel).write_bytes(data)
        limits = replace(Limits(), cpu_s=max(1, int(timeout_s)), wall_s=timeout_s)
        with verdict.channel() as (fd, got):
            boot = BOOT.format(folder=CHECKER_DIR, part=part)
            res = run_sandboxed(["python3", "-B", "-P", "-c", boot, str(fd), str(spec_fd)], tmp, limits=limits,
                                sandbox=sandbox, pass_fds=(fd, spec_fd))
        tampered = _tampered(tmp / CHECKER_DIR, sources)
    finally:
        os.close(spec_fd)
        remove_tree(tmp)
    return res, got[0], tampered


def _tampered(folder: Path, sources: dict[str, bytes]) -> str | None:
    """Why the checker's folder is no longer what the harness wrote there (the code under test wrote
    into it, or replaced it), or None. The checker never imports from it once it runs; a change is
    still a sign of an attempt."""
    from ..sandbox.safefs import TreeTooLarge, lstat_rel, read_node, walk

    st = lstat_rel(folder.parent, folder.name)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return "the code under test replaced the checker's folder"
    found: dict[str, bytes | None] = {}
    try:
        for node in walk(folder, max_entries=200):
            found[node.rel] = read_node(node, 1 << 20)
    except (TreeTooLarge, OSError):
        return "the code under test wrote into the checker's folder"
    changed = sorted(set(found) ^ set(sources) | {k for k in found.keys() & sources.keys() if found[k] != sources[k]})
    return f"the code under test wrote into the checker's folder ({', '.join(changed[:3])})" if changed else None


def _probe(source: str, module: str, entry_point: str, test: str, helpers: str, timeout_s: float,
           sandbox: SandboxSpec | None) -> str | None:
    """The suspicious reason when the test passes once the module's shadowing names are laid over its own."""
    names = shadowing_names(source, test, entry_point, helpers)
    if not names:
        return None
    res, got, _ = _run(source, module, hidden_spec(module, entry_point, test, helpers, names), "probe", timeout_s,
                       sandbox)
    report = verdict.parse_report(got) or {}
    laid = report.get("names")
    if report.get("passed") is not True or res.timed_out or type(laid) is not list or not laid:
        return None
    shown = ", ".join(f"`{str(n)[:40]}`" for n in laid[:5])
    return f"the hidden test passes only with the module's own {shown} in its namespace"[:MAX_REASON]


def run_hidden_test(source: str | None, module: str, entry_point: str, test: str,
                    timeout_s: float = HIDDEN_TIMEOUT_S, *, helpers: str = "",
                    sandbox: SandboxSpec | None = None) -> ScoreResult:
    """Run `test` against `source` (the module text) in a fresh temp dir, in the sandbox (`sandbox`: the
    workspace's kind and image; default: the sandbox a task without an image gets)."""
    if source is None:
        return ScoreResult(passed=False, output=f"{module} is missing or not a regular file",
                           details={"module": module, "reason": "missing"})
    res, got, tampered = _run(source, module, hidden_spec(module, entry_point, test, helpers), "checker", timeout_s,
                              sandbox)
    report = verdict.parse_report(got) or {}
    suspicious = report.get("suspicious") if isinstance(report.get("suspicious"), str) else tampered
    reported_pass = report.get("passed") is True
    if report and not reported_pass and not suspicious and not res.timed_out:
        suspicious = _probe(source, module, entry_point, test, helpers, timeout_s, sandbox)
    output = truncate((res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr).strip(), MAX_OUTPUT_CHARS)
    details: dict[str, Any] = {}
    if isinstance(report.get("failure"), str):
        details["failure"] = report["failure"][:MAX_REASON]
    if isinstance(report.get("private"), bool):  # the checker closed /proc/<pid>/fd and ptrace to the module
        details["checker_private"] = report["private"]
    if res.timed_out:
        why = res.killed_reason or "timeout"
        output = f"timed out after {timeout_s:g}s ({why})\n{output}"
    elif res.returncode == 0 and not report:
        suspicious = "the hidden test exited 0 before it reported"
        output = f"the tests did not run to completion (exit 0 before the end)\n{output}"
    if suspicious:
        details["suspicious"] = suspicious[:MAX_REASON]
        output = f"SUSPICIOUS {details['suspicious']}\n{output}"
    passed = res.returncode == 0 and not res.timed_out and reported_pass and not suspicious
    calls = report.get("calls")
    return ScoreResult(
        passed=passed,
        output=truncate(output.strip(), MAX_OUTPUT_CHARS) or ("hidden tests passed" if passed
                                                              else f"exit code {res.returncode}"),
        details={"module": module, "returncode": res.returncode, "timed_out": res.timed_out,
                 "killed_reason": res.killed_reason, "duration_s": round(res.duration_s, 3),
                 # completed: the test ran to its end (as in traces before the checker process); reported:
                 # the checker said how it went, pass or fail
                 "completed": reported_pass, "reported": bool(report), "calls": calls if type(calls) is int else None,
                 "sandbox": res.sandbox, **details},
    )
