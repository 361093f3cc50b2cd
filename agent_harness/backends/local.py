"""What the local backends (transformers, vLLM) share: imports, the compute dtype, the tokenizer."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, BackendUnavailable, ConfigError, MissingExtraError
from ..types import Completion, Conversation, GenParams, ToolSpec, row_seeds

if TYPE_CHECKING:
    from ..registry import ModelSpec

log = logging.getLogger(__name__)


def first_line(e: BaseException) -> str:
    """`Type: first line of the message`, for one-line errors."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def require_torch(backend: str) -> tuple[Any, Any]:
    """torch and transformers, or MissingExtraError with the install command."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingExtraError(
            f"the {backend} backend needs torch and transformers ({e.name} missing): pip install 'agent-harness[hf]'"
        ) from None
    return torch, transformers


def cpu_ids() -> list[int]:
    """The cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return list(range(os.cpu_count() or 1))


def compute_dtype(torch: Any, name: str, cuda: bool, forced: str | None) -> str:
    """The dtype to run in: `name`, unless the hardware has no fast kernels for it.

    On a CPU without AVX-512 BF16 / AMX, bf16 matmuls are emulated and do not speed up with batch
    size (an AVX2 EPYC: transformers 10.7 tok/s at batch 16 in bf16 against 36.8 in fp32; vLLM 3
    against 28), so half precision runs in fp32 there (bf16 weights upcast exactly). `forced`
    (AGENT_HARNESS_HF_DTYPE / AGENT_HARNESS_VLLM_DTYPE, validated in settings.py) overrides the choice.
    """
    if forced:
        return forced
    if cuda:
        return "float16" if name == "bfloat16" and not torch.cuda.is_bf16_supported() else name
    native = {
        "bfloat16": getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
        or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)(),
        "float16": getattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)(),
        "float32": True,
    }
    return name if native[name] else "float32"


def load_tokenizer(transformers: Any, spec: ModelSpec, source: str) -> Any:
    """The model's tokenizer with the spec's chat template, if it sets one; a template is required."""
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:  # no or unreadable weights folder: this backend cannot start
        raise BackendUnavailable(f"cannot load the tokenizer of '{spec.name}' from {source}: {first_line(e)}") from e
    if spec.chat_template:
        tokenizer.chat_template = spec.chat_template
    if not tokenizer.chat_template:
        raise ConfigError(f"model '{spec.name}' has no chat template; set 'chat_template' in models.yaml")
    return tokenizer


def encode(tokenizer: Any, conv: Conversation, chat_template: str | None = None,
           tools: Sequence[ToolSpec] = ()) -> list[int]:
    """Token ids of the rendered prompt (chat template + generation prompt, no padding); a conversation
    that ends with an assistant message is continued from its content (a prefilled reply).
    `chat_template` (a request's `GenParams.chat_template`) renders it instead of the model's template;
    `tools` (a native-protocol request's `GenParams.tools`) are rendered by the template as it renders tools.

    Only the template's own text can become special (added) tokens: message contents (observations,
    files, task text) that spell `<|im_start|>` stay text, so data cannot forge turns and the ids
    decode to exactly the rendered messages the trace records. See `chat_ids`.
    """
    from ..protocol.native import tool_schemas
    from .chat_ids import chat_ids

    return chat_ids(tokenizer, conv, chat_template, tool_schemas(tools) if tools else None)


def new_token_budget(n_prompt: int, max_tokens: int, context_length: int) -> int:
    """Tokens a reply may have after an `n_prompt`-token prompt; 0 (logged) when it fills the context."""
    room = context_length - n_prompt
    if room <= 0:
        log.warning("prompt of %d tokens fills the context (%d); nothing generated", n_prompt, context_length)
        return 0
    return min(max_tokens, room)


@dataclass
class Row:
    """One conversation on its way through a local backend's batch."""

    index: int  # its place in the batch
    ids: list[int]  # the prompt's token ids
    max_new: int  # its token budget
    seed: int | None = None


def plan_rows(encode: Callable[[Conversation], list[int]], conversations: list[Conversation], params: GenParams,
              seeds: Sequence[int | None] | None, context_length: int) -> tuple[list[Completion | None], list[Row]]:
    """Each conversation encoded, with its token budget and seed; one that fills the context, or that the
    chat template cannot encode (a Completion with `error`: that episode ends, its batch-mates go on), is
    answered now.

    Returns (results, rows): `results[i]` is set for the conversations already answered, the rest are `rows`.
    """
    if params.max_tokens < 1:
        raise ConfigError(f"max_tokens must be >= 1, got {params.max_tokens}")
    results: list[Completion | None] = [None] * len(conversations)
    rows: list[Row] = []
    row_seed = row_seeds(params, len(conversations), seeds)
    for i, conv in enumerate(conversations):
        try:
            ids = encode(conv)
        except Exception as e:  # the template refused this conversation, or cannot keep its text as text
            msg = f"cannot encode the prompt: {first_line(e)}"
            log.warning("%s", msg)
            results[i] = Completion("", None, None, "error", 0.0, cached_tokens=None, error=msg)
            continue
        max_new = new_token_budget(len(ids), params.max_tokens, context_length)
        if max_new:
            rows.append(Row(i, ids, max_new, row_seed[i]))
        else:
            results[i] = context_full(len(ids))
    return results, rows


def context_full(n_prompt: int) -> Completion:
    """The reply to a prompt that leaves no room: nothing generated, finish_reason "length"."""
    return Completion("", n_prompt, 0, "length", 0.0)


def complete(results: list[Completion | None]) -> list[Completion]:
    """`results` as a list of completions, one per conversation; BackendError names the first row without one."""
    missing = [i for i, c in enumerate(results) if c is None]
    if missing:
        raise BackendError(f"no completion for conversation {missing[0]} of {len(results)} "
                           f"({len(missing)} missing)")
    return [c for c in results if c is not None]
