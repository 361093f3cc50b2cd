"""The `vllm` backend's engine in process: vLLM's `AsyncLLM`, with its engine core in a child process.

Same engine flags, CPU environment, token-id prompts, context budget and stop handling as the served
path (`vllm_serve.engine_config`, `local.encode`, `stops`); replies are taken whole
(`RequestOutputKind.FINAL_ONLY`), so no per-token streaming and no API server share the cores with the
engine. The engine lives on an event loop of its own (`LoopThread`): `complete` may be awaited from any
loop, and the runner's, the tests' and the benchmarks' loops all reach the one engine.

Processes: vLLM spawns its engine core (multiprocessing, `spawn` on CPU). For that spawn the harness
swaps multiprocessing's executable for a launcher (`LAUNCHER`) that sets PR_SET_PDEATHSIG, moves the
core into a process group of its own (a Ctrl-C at the terminal reaches the harness, which stops the
engine itself) and sends its output to the engine log before it runs Python. So the core ends with
the thread that started it (this backend's loop thread) or with the harness, even under SIGKILL;
`close` shuts the engine down and kills whatever of it is left. The frontend's own log lines (the
stats every 10 s included) go to the same log through the `vllm` logger.

A dead engine core (EngineDeadError) is BackendUnavailable naming the cause from its log; a start that
fails is BackendUnavailable too, so `load_backend` falls back to transformers and the trace says why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, ConfigError
from ..types import Completion, Conversation, FinishReason, GenParams, RequestMeta
from .engine_process import children, root_cause
from .local import context_full, first_line, new_token_budget
from .loop import LoopThread
from .stops import cut_at_stop, stop_strings
from .vllm_serve import read_log

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 10.0
SHUTDOWN_S = 30.0

# Runs as `python -S -c LAUNCHER <log> <parent pid> <python> <multiprocessing's argv...>`.
LAUNCHER = r"""
import ctypes, os, signal, sys
log, parent, exe, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, kept across exec
if os.getppid() != parent:  # the starting thread ended before prctl took effect
    sys.exit(1)
os.setpgid(0, 0)
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
os.dup2(fd, 1)
os.dup2(fd, 2)
os.close(fd)
os.execv(exe, [exe, *argv])
"""


class InProcessEngine:
    """vLLM's AsyncLLM of `source` with `engine` arguments, its output to `log_path`; `generate`, `close`."""

    def __init__(self, source: str, engine: dict[str, Any], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log_start = log_path.stat().st_size if log_path.exists() else 0
        self._ids = itertools.count()
        self._loop = LoopThread("vllm-engine").__enter__()
        self._handlers: list[logging.Handler] = []
        self._core: list[psutil.Process] = []
        self._engine: Any = None
        self._stats: concurrent.futures.Future[None] | None = None
        os.environ.update(env)  # the spawned core reads its CPU variables from the environment
        before = set(children())
        try:
            self._engine = self._loop.call(self._start(source, engine))
        except BaseException:
            self._core = [p for pid, p in children().items() if pid not in before]
            self.close()
            raise
        self._core = [p for pid, p in children().items() if pid not in before]
        self._stats = self._loop.submit(self._log_stats())

    async def _start(self, source: str, engine: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.config.logging import LoggingConfig
        from vllm.v1.engine.async_llm import AsyncLLM

        self._log_to_file()
        folder = Path(tempfile.mkdtemp(prefix="agent-harness-vllm-"))
        launcher = folder / "launch"
        launcher.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in (
            sys.executable, "-S", "-c", LAUNCHER, str(self.log_path), str(os.getpid()), sys.executable)) + ' "$@"\n')
        launcher.chmod(0o700)
        multiprocessing.set_executable(str(launcher))
        try:  # the core is spawned, and its model loaded, inside this call
            # vLLM would re-apply its logging config (a stdout handler) here: keep `_log_to_file`'s
            args = AsyncEngineArgs(model=source, logging_config=LoggingConfig(configure_logging=False), **engine)
            return AsyncLLM.from_engine_args(args)
        finally:
            multiprocessing.set_executable(sys.executable)
            shutil.rmtree(folder, ignore_errors=True)

    def _log_to_file(self) -> None:
        """The `vllm` logger of this process writes to the engine log, not to the harness's stdout."""
        vllm_log = logging.getLogger("vllm")
        handler = logging.FileHandler(self.log_path, encoding="utf-8")
        formatter = next((h.formatter for h in vllm_log.handlers if h.formatter is not None), None)
        handler.setFormatter(formatter or logging.Formatter("%(levelname)s %(asctime)s %(name)s: %(message)s"))
        self._handlers = list(vllm_log.handlers)
        for h in self._handlers:
            vllm_log.removeHandler(h)
        vllm_log.addHandler(handler)
        vllm_log.propagate = False

    async def _log_stats(self) -> None:
        while self._engine is not None:
            await asyncio.sleep(STATS_INTERVAL_S)
            with contextlib.suppress(Exception):
                await self._engine.do_log_stats()

    @property
    def alive(self) -> bool:
        return self._engine is not None and not self._engine.errored

    def cause(self) -> str | None:
        """The last exception line in this engine's log: why it died, when it says."""
        return root_cause(read_log(self.log_path, self._log_start))

    async def generate(self, ids: list[int], params: Any) -> Any:
        """The final RequestOutput for prompt `ids` (awaitable from any loop); cancelling it aborts the request."""
        engine = self._engine
        if engine is None:
            raise BackendUnavailable("the vllm engine is closed")
        return await asyncio.wrap_future(self._loop.submit(self._one(engine, ids, params)))

    async def _one(self, engine: Any, ids: list[int], params: Any) -> Any:
        from vllm.inputs import TokensPrompt

        final = None
        async for out in engine.generate(TokensPrompt(prompt_token_ids=ids), params, f"h{next(self._ids)}"):
            final = out
        return final

    def close(self) -> None:
        """Shut the engine down, kill what is left of its core, stop its loop; idempotent."""
        engine, self._engine = self._engine, None
        try:
            if engine is not None:
                with contextlib.suppress(Exception):
                    engine.shutdown(timeout=SHUTDOWN_S)
        finally:
            self._loop.__exit__(None, None, None)
            self._kill_core()
            vllm_log = logging.getLogger("vllm")
            for h in list(vllm_log.handlers):
                if isinstance(h, logging.FileHandler) and Path(h.baseFilename) == self.log_path.absolute():
                    vllm_log.removeHandler(h)
                    h.close()
            for h in self._handlers:
                vllm_log.addHandler(h)
            self._handlers = []

    def _kill_core(self) -> None:
        import psutil

        alive = [p for p in self._core if p.is_running()]
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=10)
        self._core = []


async def complete(engine: InProcessEngine, encode: Any, context_length: int, name: str,
                   conversation: Conversation, params: GenParams, meta: RequestMeta | None = None) -> Completion:
    """One reply from the in-process engine, with the served path's semantics (see vllm_backend)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.exceptions import EngineDeadError

    if params.max_tokens < 1:
        raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
    if not engine.alive:
        raise BackendUnavailable(f"the vllm engine of '{name}' is gone: {engine.cause() or 'no error in its log'}")
    t0 = time.perf_counter()
    try:
        ids = encode(conversation, params.chat_template, params.tools)
    except Exception as e:  # the template refused this conversation, or cannot keep its text as text
        msg = f"cannot encode the prompt: {first_line(e)}"
        log.warning("%s", msg)
        return Completion("", None, None, "error", time.perf_counter() - t0, cached_tokens=None, error=msg)
    max_new = new_token_budget(len(ids), params.max_tokens, context_length)
    if not max_new:
        return context_full(len(ids))
    stops = stop_strings(params)
    sampling = SamplingParams(max_tokens=max_new, temperature=params.temperature, top_p=params.top_p,
                              seed=params.seed, stop=list(stops), output_kind=RequestOutputKind.FINAL_ONLY)
    try:
        out = await engine.generate(ids, sampling)
    except EngineDeadError:
        raise BackendUnavailable(f"the vllm engine of '{name}' died: "
                                 f"{engine.cause() or 'no error in its log'}") from None
    except (ValueError, TypeError) as e:  # the engine refused the request (vLLM's validation errors)
        msg = f"the vllm engine refused the request: {first_line(e)}"
        log.warning("%s", msg)
        return Completion("", len(ids), None, "error", time.perf_counter() - t0, cached_tokens=None, error=msg)
    choice = out.outputs[0] if out is not None and out.outputs else None
    if choice is None or choice.finish_reason not in ("stop", "length"):
        why = "no output" if choice is None else f"finish reason {choice.finish_reason!r}"
        return Completion("", len(ids), None, "error", time.perf_counter() - t0, cached_tokens=None,
                          error=f"the vllm engine gave no reply ({why})")
    text = choice.text
    finish: FinishReason = "length" if choice.finish_reason == "length" else "stop"
    cut = cut_at_stop(text, stops)
    if cut is not None:
        text, finish = cut, "stop"
    return Completion(text=text, prompt_tokens=len(ids), completion_tokens=len(choice.token_ids),
                      finish_reason=finish, latency_s=time.perf_counter() - t0,
                      cached_tokens=out.num_cached_tokens or 0)
