"""One episode's fault never stops a run: set-up, agent step, prompt, trace writing and embedding faults.

The runner's real loop drives real workspaces and the scripted backend; the
faults come from what a backend or embedder can really hand the runner (a reply it cannot record,
a prompt the engine refuses, an embedder that breaks) and from a task whose files cannot be placed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import BackendUnavailable, StopRequested
from agent_harness.registry import ModelSpec
from agent_harness.run.runner import Job, ModelRun, RunConfig, model_jobs, plan_jobs
from agent_harness.run.summary import summarize
from agent_harness.traces.model import Trace
from agent_harness.traces.store import validate_trace
from agent_harness.types import Completion, Conversation, GenParams, RequestMeta


class _Unrecordable(Completion):
    """A reply whose token record raises while the episode takes it in."""

    def token_counts(self) -> dict[str, int]:
        raise RuntimeError("boom")


class FaultyBackend(ScriptedBackend):
    """The oracle, except for the tasks named in `faults`: what goes wrong for each one's replies."""

    def __init__(self, faults: dict[str, str], traces: dict[str, Path]) -> None:
        super().__init__("oracle")
        self.faults, self.traces = faults, traces

    def _fault(self, meta: RequestMeta | None) -> str | None:
        return self.faults.get(meta.task.id) if meta is not None else None

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        fault = self._fault(meta)
        if fault == "submit":
            raise RuntimeError("prompt refused by the engine")
        if fault == "plant" and meta is not None and meta.turn == 1:  # the trace's path swapped for a folder
            path = self.traces[meta.task.id]
            path.unlink()
            (path / "planted").mkdir(parents=True)
        c = await super().complete(conversation, params, meta)
        if fault == "advance":
            c = _Unrecordable(**dataclasses.asdict(c))
        elif fault == "trace":
            c = dataclasses.replace(c, latency_s=object())  # type: ignore[arg-type]  # no number, not JSON
        return c


class BrokenEmbedder:
    name, dim = "broken", 2

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("embedder out of memory")


def _jobs(cfg: RunConfig, spec: ModelSpec) -> list[Job]:
    [(_, _, jobs)] = list(plan_jobs(cfg))
    return model_jobs(cfg, spec, jobs)  # trace paths and fingerprints, as run() gives them


@pytest.fixture
def ws_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp folder of this test's own for the workspaces (readable by the sandbox user), to check clean-up."""
    from agent_harness import sandbox

    sandbox._etc_dir()  # the sandbox's per-process files stay in the usual temp folder
    d = Path(tempfile.mkdtemp(prefix="agent-harness-faults-"))
    d.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_episode_faults_end_only_their_episode(tmp_path: Path, ws_dir: Path) -> None:
    out = tmp_path / "traces"
    spec = ModelSpec(name="faulty", backend="scripted", script="oracle")
    cfg = RunConfig(models=[spec], out=out, n=6, concurrency=3, embed=False, strategy="react")
    jobs = _jobs(cfg, spec)
    jobs[0].task = dataclasses.replace(jobs[0].task, files={"../outside.py": ""})  # cannot be placed
    faults = {jobs[1].task.id: "advance", jobs[2].task.id: "trace", jobs[3].task.id: "submit",
              jobs[5].task.id: "plant"}
    backend = FaultyBackend(faults, {j.task.id: j.path for j in jobs})
    done: list[Trace] = []
    ModelRun(cfg, spec, backend, BrokenEmbedder(), done.append).run(jobs)
    assert len(done) == 6
    assert not list(ws_dir.glob("agent-harness-ws-*"))  # every workspace removed, the broken ones too
    planted = next(t for t in done if t.task_id == jobs[5].task.id)  # its trace could not be written
    assert planted.outcome.completed and planted.outcome.exit_reason == "error"
    assert (planted.outcome.error or "").startswith("writing the trace failed: UnsafePath")
    assert "a folder where a file of the harness's output belongs" in (planted.outcome.error or "")
    assert jobs[5].path.is_dir() and list(jobs[5].path.iterdir()) == [jobs[5].path / "planted"]
    on_disk = {j.task.id: json.loads(j.path.read_text()) for j in jobs[:5]}
    errors = {tid: t["outcome"]["error"] for tid, t in on_disk.items()}
    for tid, trace in on_disk.items():
        assert validate_trace(trace) == [], tid
        assert trace["outcome"]["completed"] and trace["outcome"]["exit_reason"] == "error", tid
        assert "embedding failed: RuntimeError: embedder out of memory" in errors[tid] or not trace["steps"], tid
    assert errors[jobs[0].task.id].startswith("starting the episode failed: ConfigError: task file '../outside.py'")
    assert on_disk[jobs[0].task.id]["outcome"]["passed"] is None
    assert errors[jobs[1].task.id].startswith("the agent step failed: RuntimeError: boom")
    # A reply the trace cannot hold (a latency that is no number) is refused as its step is made (steps.py).
    assert errors[jobs[2].task.id].startswith("the agent step failed: ValidationError: 1 validation error for Thought")
    assert all("\n" not in e for e in errors.values())  # one line each
    assert errors[jobs[3].task.id].startswith("sending the prompt failed: RuntimeError: prompt refused")
    assert on_disk[jobs[3].task.id]["outcome"]["passed"] is None  # the backend failed, not the model
    ok = on_disk[jobs[4].task.id]
    assert ok["outcome"]["passed"] is True and ok["embeddings"] is None  # a verdict survives the embedder fault
    summary = summarize(out)["faulty"]["humanevalfix"]
    assert summary["n_episodes"] == 5 and summary["unscored"] == 2  # the planted folder is no trace


class _DownForOne(ScriptedBackend):
    """The oracle, except that the first task's request finds the backend down; the others wait a while."""

    def __init__(self, down: str) -> None:
        super().__init__("oracle")
        self.down = down

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        if meta is not None and meta.task.id == self.down:
            raise BackendUnavailable("http://127.0.0.1:9/v1: gave up after 3 attempt(s)")
        await asyncio.sleep(2)
        return await super().complete(conversation, params, meta)


class _LateFault(ModelRun):
    """Lets the episode that met the backend fault reach the runner last (a thread scheduled late)."""

    def _episode(self, job: Job) -> Trace:
        try:
            return super()._episode(job)
        except BaseException as e:
            if not isinstance(e, StopRequested):
                time.sleep(1.5)
            raise


def test_a_backend_down_ends_the_run_with_its_error_whichever_episode_ends_first(tmp_path: Path,
                                                                                  ws_dir: Path) -> None:
    """The episodes a backend fault stopped (StopRequested) must not make the run look interrupted."""
    spec = ModelSpec(name="down", backend="scripted", script="oracle")
    cfg = RunConfig(models=[spec], out=tmp_path / "t", n=3, concurrency=3, embed=False, strategy="react")
    jobs = _jobs(cfg, spec)
    with pytest.raises(BackendUnavailable, match="gave up after 3 attempt"):
        _LateFault(cfg, spec, _DownForOne(jobs[0].task.id), BrokenEmbedder(), lambda t: None).run(jobs)
