"""Make the real-tool fixtures of tests/test_formats*.py: mini-swe-agent and Inspect, each run once on two
HumanEvalFix tasks (Python/0, Python/1), offline. See README.md here for what each file is.

    python tests/data/formats/make_fixtures.py [mini|inspect|all]

mini-swe-agent: its own `mini` command (LitellmModel, LocalEnvironment, the default mini.yaml) talks to a
scripted OpenAI-compatible server this script starts on 127.0.0.1; the replies fix Python/0 and leave
Python/1 broken (one reply with no tool call, which mini answers with its format error). Each task runs in a
git repository holding the task's files; the trajectory is saved as mini/<task slug>.traj.json. Verdicts:
this project's hidden test (`run_hidden_test`) on the module as each run left it, written as a SWE-bench
style report (mini/verdicts.json: resolved_ids / unresolved_ids), which is how mini's runs get verdicts.

Inspect: `inspect_ai.eval` with the `mockllm/model` provider (custom outputs chosen from the conversation)
and two tools (write_module, run_tests) that keep the module in the sample's store; the scorer is the same
hidden test. The log is inspect/<name>.eval.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from agent_harness.scenarios import TaskQuery, get_scenario  # noqa: E402
from agent_harness.scenarios.hidden_score import run_hidden_test  # noqa: E402
from agent_harness.traces.store import task_slug  # noqa: E402
from agent_harness.types import Task  # noqa: E402

TASKS = ("Python/0", "Python/1")
MODEL = "openai/scripted-fixer"


def tasks() -> list[Task]:
    return get_scenario("humanevalfix").load_tasks(TaskQuery(task_ids=TASKS))


def fixed(task: Task) -> str:
    return next(c["args"]["content"] for c in task.oracle if c["tool"] == "write_file")


def verdict(task: Task, module_text: str | None) -> bool:
    md = task.metadata
    return run_hidden_test(module_text, md["module"], md["entry_point"], md["hidden_test"],
                           helpers=str(md.get("helpers", ""))).passed


# -- mini-swe-agent --------------------------------------------------------------------------------------
def mini_script(task: Task) -> list[tuple[str, str | None]]:
    """(reply text, bash command or None) per model turn: Python/0 is fixed, Python/1 is not."""
    module, test = task.metadata["module"], task.metadata["test_file"]
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"
    if task.id == "Python/0":
        return [("I will read the module first.", f"cat {module}"),
                ("The distance must be absolute; I write the fixed module.",
                 f"cat > {module} <<'EOF'\n{fixed(task).rstrip()}\nEOF"),
                ("Now I run the tests.", f"python3 {test}"),
                ("The tests pass; I submit.", submit)]
    return [("I will read the module first.", f"cat {module}"),
            ("Let me run the tests.", f"python3 {test}"),
            ("The module looks right to me.", None),
            ("I submit as it is.", submit)]


class Scripted(BaseHTTPRequestHandler):
    scripts: dict[str, list[tuple[str, str | None]]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        task = next(t for t in self.scripts if f"Task {t}:" in json.dumps(messages))
        # a reply without a tool call is not kept as an assistant message: mini sends its format error as a user one
        turn = sum(m["role"] == "assistant" for m in messages) + sum(m["role"] == "user" for m in messages) - 1
        content, command = self.scripts[task][turn]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if command is not None:
            message["tool_calls"] = [{"id": f"call_{task_slug(task)}_{turn}", "type": "function",
                                      "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]
        prompt = sum(len(json.dumps(m)) for m in messages) // 4
        reply = {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 1767225600,
                 "model": "scripted-fixer",
                 "choices": [{"index": 0, "message": message,
                              "finish_reason": "tool_calls" if command is not None else "stop"}],
                 "usage": {"prompt_tokens": prompt, "completion_tokens": 8 + len(json.dumps(message)) // 4,
                           "total_tokens": prompt + 8 + len(json.dumps(message)) // 4,
                           "prompt_tokens_details": {"cached_tokens": 64 * turn}}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_mini(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    found = tasks()
    Scripted.scripts = {t.id: mini_script(t) for t in found}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mini = Path(sys.executable).with_name("mini")
    resolved, unresolved = [], []
    try:
        for task in found:
            with tempfile.TemporaryDirectory() as tmp:
                work, home = Path(tmp) / "repo", Path(tmp) / "home"
                work.mkdir()
                for name, content in task.files.items():
                    (work / name).write_text(content)
                git = ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@localhost"]
                subprocess.run([*git, "init", "-q"], cwd=work, check=True)
                subprocess.run([*git, "add", "-A"], cwd=work, check=True)
                subprocess.run([*git, "commit", "-qm", "task"], cwd=work, check=True)
                traj = out / f"{task_slug(task.id)}.traj.json"
                cmd = [str(mini), "-m", MODEL, "-c", "mini.yaml",
                       "-c", f"model.model_kwargs.api_base=http://127.0.0.1:{server.server_port}/v1",
                       "-c", f"environment.cwd={work}", "-c", "agent.step_limit=10",
                       "-t", task.statement, "-y", "--exit-immediately", "-o", str(traj)]
                env = {**os.environ, "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
                       "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": "fixture-not-a-key",
                       "MSWEA_GLOBAL_CONFIG_DIR": str(home), "MSWEA_SILENT_STARTUP": "1"}
                subprocess.run(cmd, env=env, check=True, timeout=300, stdout=subprocess.DEVNULL)
                module = work / task.metadata["module"]
                ok = verdict(task, module.read_text() if module.is_file() else None)
                (resolved if ok else unresolved).append(task.id)
                # the fixture keeps no trace of the temp folders' names
                text = traj.read_text().replace(str(work), "/repo").replace(tmp, "/tmp")
                traj.write_text(text.replace(str(ROOT), "."))  # its own output path, as from the repository
    finally:
        server.shutdown()
    report = {"resolved_ids": resolved, "unresolved_ids": unresolved}
    (out / "verdicts.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"mini: {report}")


# -- Inspect ---------------------------------------------------------------------------------------------
def make_inspect(out: Path) -> None:
    from inspect_ai import Task as InspectTask
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate, system_message, use_tools
    from inspect_ai.tool import tool
    from inspect_ai.util import store

    found = {t.id: t for t in tasks()}

    @tool
    def write_module():  # type: ignore[no-untyped-def]
        async def execute(content: str) -> str:
            """Replace the module's text.

            Args:
              content: the new text of the module
            """
            store().set("module", content)
            return f"Wrote the module ({len(content.splitlines())} lines)."
        return execute

    @tool
    def run_tests():  # type: ignore[no-untyped-def]
        async def execute() -> str:
            """Run the visible tests against the module."""
            task = found[store().get("task_id")]
            module = store().get("module", task.files[task.metadata["module"]])
            return "Tests PASSED." if verdict(task, module) else "Tests FAILED."
        return execute

    def outputs(messages: list[Any], *_: Any) -> ModelOutput:
        task_id = next(t for t in found if f"Task {t}:" in str(messages[1].content))
        turn = sum(m.role == "assistant" for m in messages)
        task = found[task_id]
        plan: list[tuple[str, str | None, dict[str, Any]]] = (
            [("The distance must be absolute.", "write_module", {"content": fixed(task)}),
             ("Checking.", "run_tests", {}), ("Fixed: the distance is absolute now.", None, {})]
            if task_id == "Python/0" else
            [("Checking the tests first.", "run_tests", {}), ("I could not find the bug.", None, {})])
        content, name, args = plan[min(turn, len(plan) - 1)]
        if name is None:
            result = ModelOutput.from_content(model="mockllm/model", content=content)
        else:
            result = ModelOutput.for_tool_call("mockllm/model", name, args, tool_call_id=f"{task_id}-{turn}",
                                               content=content)
        result.usage = ModelUsage(input_tokens=100 + 50 * turn, output_tokens=20, total_tokens=120 + 50 * turn)
        return result

    @scorer(metrics=[accuracy()])
    def hidden_test():  # type: ignore[no-untyped-def]
        async def score(state: TaskState, target: Target) -> Score:
            task = found[str(state.sample_id)]
            module = state.store.get("module", task.files[task.metadata["module"]])
            ok = verdict(task, module)
            return Score(value=CORRECT if ok else INCORRECT,
                         explanation="hidden tests " + ("passed" if ok else "failed"))
        return score

    async def remember_task(state: TaskState, generate_: Any) -> TaskState:
        state.store.set("task_id", str(state.sample_id))
        return state

    from inspect_ai.solver import solver

    @solver
    def setup():  # type: ignore[no-untyped-def]
        return remember_task

    dataset = MemoryDataset([Sample(id=t.id, input=t.statement + "\n\n" + t.files[t.metadata["module"]], target="")
                             for t in found.values()])
    humanevalfix = InspectTask(dataset=dataset, name="humanevalfix",
                               solver=[setup(), system_message("You fix bugs in Python functions."),
                                       use_tools(write_module(), run_tests()), generate()],
                               scorer=hidden_test())
    with tempfile.TemporaryDirectory() as tmp:
        [log] = inspect_eval(humanevalfix, model=get_model("mockllm/model", custom_outputs=outputs), log_dir=tmp,
                             log_format="eval", max_samples=1, display="none")
        out.mkdir(parents=True, exist_ok=True)
        src = Path(log.location)
        shutil.copy(src, out / src.name)
        print(f"inspect: {out / src.name} ({log.status})")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which in ("mini", "all"):
        make_mini(HERE / "mini")
    if which in ("inspect", "all"):
        make_inspect(HERE / "inspect")
