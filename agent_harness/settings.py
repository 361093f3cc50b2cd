"""Every ``AGENT_HARNESS_*`` environment variable, read and validated in one place.

`get_settings()` parses the environment into a frozen `Settings`; a bad value is a ConfigError
naming the variable (one line, exit 2 from the CLI). The result is cached until one of the
variables changes, so code reads settings freely and tests can still set variables.
`VARIABLES` describes each one; the docs' Environment variables page is generated from it (scripts/docs_hooks.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError

log = logging.getLogger(__name__)

PREFIX = "AGENT_HARNESS_"
Dtype = Literal["bfloat16", "float16", "float32"]
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

# field -> (what it does, the expected value in words); the variable is PREFIX + field.upper()
VARIABLES: dict[str, tuple[str, str]] = {
    "cache": ("model weights, converted folders and compile caches", "a folder (default <repo>/.cache)"),
    "scenarios": ("extra folders searched for <name>/scenario.yaml", "folders separated by ':'"),
    "sandbox": ("sandbox kind: bwrap or docker required, rlimit forced, or auto (docker only where an image is "
                "named, else bwrap, else rlimit)", "bwrap, docker, rlimit or auto"),
    "sandbox_image": ("the Docker image of tasks that name none (a task's or scenario's own comes first); never "
                      "pulled", "a local image name or id (default: the image `make setup` builds)"),
    "sandbox_uid": ("uid that commands run as when the harness runs as root", "an integer >= 0 (default 65534)"),
    "hf_dtype": ("transformers compute dtype, overriding the automatic choice", "bfloat16, float16 or float32"),
    "hf_max_batch": ("transformers: rows per sub-batch", "a positive integer (default 32 CPU, 64 CUDA)"),
    "hf_max_batch_tokens": ("transformers: padded tokens per sub-batch", "a positive integer"),
    "hf_kv_reuse": ("transformers: reuse KV caches across agent steps", "1 or 0 (default 1)"),
    "hf_kv_cache_mb": ("transformers: KV store size in MiB", "a positive integer (default 2048 CPU, 8192 CUDA)"),
    "vllm_dtype": ("vLLM compute dtype, overriding the automatic choice", "bfloat16, float16 or float32"),
    "vllm_eager": ("vLLM: skip graph compilation (default on CPU)", "1 or 0"),
    "vllm_block_size": ("vLLM KV block size (prefix cache granularity)", "a multiple of 16 (default 32 on CPU)"),
    "vllm_ngram": ("vLLM n-gram speculative decoding: draft tokens per step", "1 to 16 (default off)"),
    "vllm_gpu_util": ("vLLM gpu_memory_utilization (CUDA)", "a fraction in (0, 1]"),
    "vllm_stream_interval": ("a `vllm serve` a benchmark starts (bench/): tokens per streamed chunk",
                             "1 to 64 (default 1)"),
    "openai_backoff_s": ("openai backend: base delay between retries", "seconds >= 0 (default 1)"),
    "engine_log": ("vLLM's own log lines go to this file (the CLI sets <out>/engine.log)", "a file path"),
    "cgroup": ("bound a command's processes together with a memory cgroup (root only)", "1 or 0 (default 1)"),
    "cgroup_fs": ("where the cgroup file system is mounted", "a folder (default /sys/fs/cgroup)"),
    "no_vllm": ("scripts/setup.sh: do not install vLLM", "any non-empty value"),
    "no_1_5b": ("scripts/setup.sh: do not install and prepare the 1.5B offline model", "any non-empty value"),
    "no_chromium": ("scripts/setup.sh: do not install chromium (report screenshots)", "any non-empty value"),
    "no_docker": ("scripts/setup.sh: do not install Docker, start dockerd or build the sandbox image",
                  "any non-empty value"),
    "venv": ("scripts/install_vllm.sh: the virtualenv to install into", "a folder (default <repo>/.venv)"),
}


class Settings(BaseModel):
    """The parsed variables; None where unset (the code using it picks the default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cache: Path | None = None
    scenarios: tuple[Path, ...] = ()
    sandbox: Literal["auto", "bwrap", "docker", "rlimit"] = "auto"
    sandbox_image: str | None = None
    sandbox_uid: int = Field(65534, ge=0)
    hf_dtype: Dtype | None = None
    hf_max_batch: int | None = Field(None, ge=1)
    hf_max_batch_tokens: int | None = Field(None, ge=1)
    hf_kv_reuse: bool = True
    hf_kv_cache_mb: int | None = Field(None, ge=1)
    vllm_dtype: Dtype | None = None
    vllm_eager: bool | None = None
    vllm_block_size: int | None = Field(None, gt=0, multiple_of=16)
    vllm_ngram: int | None = Field(None, ge=1, le=16)
    vllm_gpu_util: float | None = Field(None, gt=0.0, le=1.0)
    vllm_stream_interval: int | None = Field(None, ge=1, le=64)
    openai_backoff_s: float | None = Field(None, ge=0.0)
    engine_log: Path | None = None
    cgroup: bool = True
    cgroup_fs: Path = Path("/sys/fs/cgroup")
    no_vllm: str | None = None
    no_1_5b: str | None = None
    no_chromium: str | None = None
    no_docker: str | None = None
    venv: Path | None = None

    @field_validator("hf_kv_reuse", "vllm_eager", "cgroup", mode="before")
    @classmethod
    def _flag(cls, v: object) -> object:
        if isinstance(v, str):
            low = v.strip().lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            raise ValueError("expected 1 or 0")
        return v

    @field_validator("sandbox", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("cache", mode="after")
    @classmethod
    def _resolve(cls, v: Path | None) -> Path | None:
        return v.expanduser().resolve() if v is not None else None


def _raw(environ: dict[str, str]) -> dict[str, object]:
    """The variables that are set (non-empty), by field name."""
    values: dict[str, object] = {}
    for name in VARIABLES:
        raw = environ.get(PREFIX + name.upper(), "").strip()
        if raw:
            values[name] = tuple(Path(p) for p in raw.split(os.pathsep) if p) if name == "scenarios" else raw
    return values


def parse(environ: dict[str, str]) -> Settings:
    """Validate the AGENT_HARNESS_* variables of `environ`; ConfigError (one line) on the first bad one."""
    unknown = sorted(k for k in environ if k.startswith(PREFIX) and k[len(PREFIX):].lower() not in VARIABLES)
    for k in unknown:
        log.warning("%s is not a setting of the harness (ignored); known: see the docs' Environment variables page", k)
    values = _raw(environ)
    try:
        return Settings(**values)  # type: ignore[arg-type]
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        var = PREFIX + name.upper()
        expected = VARIABLES.get(name, ("", "a valid value"))[1]
        raise ConfigError(f"{var}={environ.get(var, '')!r}: expected {expected}") from None


_cache: tuple[tuple[tuple[str, str], ...], Settings] | None = None


def get_settings() -> Settings:
    """The settings of the current environment (parsed again only when an AGENT_HARNESS_* variable changed)."""
    global _cache
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX)))
    if _cache is None or _cache[0] != key:
        _cache = (key, parse(dict(os.environ)))
    return _cache[1]


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs (for code that reads them, or a child it starts
    then), each variable restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
