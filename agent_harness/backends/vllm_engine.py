"""The `vllm` backend's engine: vLLM's `AsyncLLM` in the harness process, its engine core in a child.

The engine lives on an event loop of its own (`LoopThread`): `generate` may be awaited from any loop,
and the runner's, the tests' and the benchmarks' loops all reach the one engine.

Processes: vLLM spawns its engine core (multiprocessing, `spawn` on CPU). For that spawn the harness
swaps multiprocessing's executable for a launcher (`LAUNCHER`) that sets PR_SET_PDEATHSIG, moves the
core into a process group of its own (a Ctrl-C at the terminal reaches the harness, which stops the
engine itself) and sends its output to the engine log before it runs Python. So the core ends with
the thread that started it (this backend's loop thread) or with the harness, even under SIGKILL;
`close` shuts the engine down and kills whatever of it is left. The frontend's own log lines (the
stats every 10 s included) go to the same log through the `vllm` logger.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import itertools
import json
import logging
import multiprocessing
import os
import shlex
import shutil
import signal
import sys
from multiprocessing import resource_tracker, spawn
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable
from ..sandbox.tempdirs import owned_tempdir
from ..settings import scoped_environ
from .engine_process import children, read_log, root_cause
from .loop import LoopThread

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
        before = set(children())
        try:  # the variables are read by the engine's configuration and by the core it spawns, not after
            with scoped_environ(env):
                self._engine = self._loop.call(self._start(source, engine))
        except BaseException:
            self._core = self._new_children(before)
            self.close()
            raise
        self._core = self._new_children(before)
        self._stats = self._loop.submit(self._log_stats())

    @staticmethod
    def _new_children(before: set[int]) -> list[psutil.Process]:
        """The engine's processes: children started since `before` (multiprocessing's shared resource
        tracker left out)."""
        import psutil

        new = []
        for pid, p in children().items():
            try:
                tracker = "resource_tracker" in " ".join(p.cmdline())
            except psutil.Error:  # a core that died while starting (a zombie): still ours to reap
                tracker = False
            if pid not in before and not tracker:
                new.append(p)
        return new

    async def _start(self, source: str, engine: dict[str, Any]) -> Any:
        self._log_to_file()  # first: importing vllm logs too
        from vllm import AsyncEngineArgs
        from vllm.config.logging import LoggingConfig
        from vllm.v1.engine.async_llm import AsyncLLM

        folder = owned_tempdir("vllm")
        launcher = folder / "launch"
        launcher.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in (
            sys.executable, "-S", "-c", LAUNCHER, str(self.log_path), str(os.getpid()), sys.executable)) + ' "$@"\n')
        launcher.chmod(0o700)
        # multiprocessing's shared resource tracker is started (lazily) from the same executable: start it
        # now, plainly, or it would go through the launcher and die with this loop's thread
        resource_tracker.ensure_running()
        executable = spawn.get_executable()
        multiprocessing.set_executable(str(launcher))
        try:  # the core is spawned, and its model loaded, inside this call
            config = LoggingConfig(pylogging_config_file=str(self._logging_config(folder / "logging.json")))
            return AsyncLLM.from_engine_args(AsyncEngineArgs(model=source, logging_config=config, **engine))
        finally:
            multiprocessing.set_executable(executable)
            shutil.rmtree(folder, ignore_errors=True)

    def _logging_config(self, path: Path) -> Path:
        """vLLM's own logging config with its handler writing to the engine log, for the frontend here and
        the core it spawns (each applies it; vLLM's default is a stdout handler)."""
        import vllm.logger

        config = copy.deepcopy(vllm.logger.DEFAULT_LOGGING_CONFIG)
        config["formatters"].pop("vllm_color", None)
        level = config["handlers"]["vllm"]["level"]
        config["handlers"]["vllm"] = {"class": "logging.FileHandler", "filename": str(self.log_path),
                                      "encoding": "utf-8", "formatter": "vllm", "level": level}
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    def _log_to_file(self) -> None:
        """The `vllm` logger of this process writes to the engine log, not to the harness's stdout (until
        the engine applies `_logging_config`, which does the same)."""
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
            self._kill_core()  # first: a start cut short still blocks the loop until its core is gone
            self._loop.__exit__(None, None, None)
            vllm_log = logging.getLogger("vllm")
            for h in list(vllm_log.handlers):
                if isinstance(h, logging.FileHandler) and Path(h.baseFilename) == self.log_path.absolute():
                    vllm_log.removeHandler(h)
                    h.close()
            for h in self._handlers:
                vllm_log.addHandler(h)
            self._handlers = []

    def _kill_core(self) -> None:
        """Kill what is left of the engine: its core and the core's process group (its worker)."""
        import psutil

        alive = [p for p in self._core if p.is_running()]
        for p in alive:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) == p.pid:  # the launcher made it a group leader
                    os.killpg(p.pid, signal.SIGKILL)
                p.kill()
        psutil.wait_procs(alive, timeout=10)
        self._core = []
