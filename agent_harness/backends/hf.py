"""Transformers backend: concurrent `complete` calls gathered into real batched generates.

A `Batcher` queues the requests that are in flight together and hands each group of one sampling
setting to `_generate`: conversations are rendered with the chat template (the spec's
`chat_template` wins), sorted by length and split into sub-batches (at most `max_batch` rows and
`max_batch_tokens` padded tokens), left-padded and generated together. Only `GenParams` steers
decoding: the model's own generation defaults (e.g. a repetition penalty) are dropped at load, so
transformers and vLLM runs of the same spec decode alike.

Token counts exclude padding and everything after a stop; `latency_s` is the wall time of the
sub-batch that produced the completion (rows of one sub-batch share it).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, BackendUnavailable, ConfigError, MissingExtraError
from ..settings import get_settings
from ..types import BackendInfo, Completion, Conversation, FinishReason, GenParams, RequestMeta, ToolSpec
from . import scoring
from .batching import Batcher
from .local import (
    Row,
    complete,
    compute_dtype,
    context_full,
    cpu_ids,
    encode,
    first_line,
    load_tokenizer,
    plan_rows,
    require_torch,
)
from .stops import cut_at_stop, stop_strings

if TYPE_CHECKING:
    import torch

    from ..registry import ModelSpec
    from .kv_reuse import PrefixStore

log = logging.getLogger(__name__)

# Sub-batch limits; override with AGENT_HARNESS_HF_MAX_BATCH / AGENT_HARNESS_HF_MAX_BATCH_TOKENS.
DEFAULT_MAX_BATCH = {"cpu": 32, "cuda": 64}
DEFAULT_MAX_BATCH_TOKENS = {"cpu": 48_000, "cuda": 400_000}
# KV-cache reuse across agent steps (kv_reuse.py): on unless AGENT_HARNESS_HF_KV_REUSE=0; the store's
# size in MiB is AGENT_HARNESS_HF_KV_CACHE_MB.
DEFAULT_KV_CACHE_MB = {"cpu": 2048, "cuda": 8192}
# Before a batch, wait for the last batch's callers for at most this share of its run time (batching.py).
GATHER = 0.25


def _failed(msg: str, prompt_tokens: int | None, t0: float) -> Completion:
    """No usable reply for this request: its episode ends with `msg`, the run goes on."""
    log.warning("%s", msg)
    return Completion("", prompt_tokens, None, "error", time.perf_counter() - t0, cached_tokens=None, error=msg)


class HFBackend:
    """A causal LM loaded with transformers; concurrent `complete` calls run as one batched generate."""

    def __init__(self, spec: ModelSpec) -> None:
        torch, transformers = require_torch("transformers")
        from .weights import folder_dtype, model_source

        self.spec = spec
        cuda = torch.cuda.is_available()
        self.device = "cuda" if cuda else "cpu"
        if spec.load_in_4bit and not cuda:
            raise BackendUnavailable(
                f"model '{spec.name}': load_in_4bit needs a CUDA GPU (bitsandbytes) and none is available; "
                "set load_in_4bit: false"
            )
        if not cuda and torch.backends.cpu.get_cpu_capability() == "AVX2":
            # MKL picks a slow generic sgemm path on some AVX2-only CPUs (AMD EPYC here); pinning
            # its AVX2 branch made batched decode 1.3-1.6x faster. Read at MKL's first call.
            os.environ.setdefault("MKL_CBWR", "AVX2")
        self.threads = len(cpu_ids())
        torch.set_num_threads(self.threads)
        weights_dtype = folder_dtype(spec.dtype)
        env = get_settings()
        self.torch_dtype = getattr(torch, compute_dtype(torch, weights_dtype, cuda, env.hf_dtype))
        dtype_name = str(self.torch_dtype).removeprefix("torch.")
        t0 = time.perf_counter()
        source = model_source(spec, weights_dtype)
        self.tokenizer = load_tokenizer(transformers, spec, source)
        self.tokenizer.padding_side = "left"
        kwargs: dict[str, Any] = {"dtype": self.torch_dtype}
        if spec.load_in_4bit:
            kwargs["quantization_config"] = self._bnb_config(transformers, self.torch_dtype)
            kwargs["device_map"] = {"": 0}
        try:
            self.model: Any = transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except (OSError, ValueError) as e:  # missing or unreadable weights: cannot start here
            raise BackendUnavailable(f"cannot load '{spec.name}' from {source}: {first_line(e)}") from e
        if not spec.load_in_4bit:
            self.model.to(self.device)
        self.model.eval()
        self.quantization = self._quantize(torch, spec)
        self.eos_ids = self._eos_ids()
        self.pad_id = self._pad_id()
        # Keep only token ids: the decoding parameters come from GenParams alone.
        self.model.generation_config = transformers.GenerationConfig(
            eos_token_id=sorted(self.eos_ids), pad_token_id=self.pad_id,
            bos_token_id=self.model.generation_config.bos_token_id,
        )
        self.load_s = time.perf_counter() - t0
        self.max_batch = env.hf_max_batch or DEFAULT_MAX_BATCH[self.device]
        self.max_batch_tokens = env.hf_max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS[self.device]
        self.kv_store: PrefixStore | None = None
        if env.hf_kv_reuse:
            from .kv_reuse import PrefixStore

            mb = env.hf_kv_cache_mb or DEFAULT_KV_CACHE_MB[self.device]
            self.kv_store = PrefixStore(budget_bytes=mb << 20)
        details: dict[str, Any] = {
            "model_dir": source, "dtype": dtype_name, "weights_dtype": weights_dtype,
            "load_s": round(self.load_s, 2),
            "max_batch": self.max_batch, "max_batch_tokens": self.max_batch_tokens,
            "kv_reuse": self.kv_store is not None, "quantization": self.quantization,
            "torch": torch.__version__, "transformers": transformers.__version__,
        }
        if cuda:
            details["gpu"] = torch.cuda.get_device_name(0)
            details["load_in_4bit"] = spec.load_in_4bit
        else:
            details["threads"] = self.threads
        self.info = BackendInfo(requested="transformers", used="transformers", device=self.device,
                                details=details)
        self._batcher = Batcher(self._generate, name=f"transformers {spec.name}", gather=GATHER)
        log.info("transformers: %s loaded from %s on %s (%s) in %.1f s",
                 spec.name, source, self.device, dtype_name, self.load_s)

    def _quantize(self, torch: Any, spec: ModelSpec) -> str:
        """Apply the spec's CPU quantization; returns what actually runs (recorded in traces)."""
        if spec.quantization == "none":
            return "none"
        if self.device != "cpu":
            log.warning("%s: quantization %s is CPU-only; running unquantized on %s",
                        spec.name, spec.quantization, self.device)
            return f"none ({spec.quantization} is CPU-only)"
        import warnings

        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        with warnings.catch_warnings():  # torch points users of this API at torchao; it still works
            warnings.simplefilter("ignore")
            # Per output channel: per-tensor scales visibly changed the 0.5B model's answers.
            self.model = quantize_dynamic(self.model, {torch.nn.Linear: per_channel_dynamic_qconfig})
        return spec.quantization

    @staticmethod
    def _bnb_config(transformers: Any, dtype: Any) -> Any:
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise MissingExtraError("load_in_4bit needs bitsandbytes: pip install bitsandbytes")
        return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=dtype)

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        cfg = self.model.generation_config.eos_token_id
        ids.update(cfg if isinstance(cfg, list) else [cfg] if cfg is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        if not ids:
            raise ConfigError(f"model '{self.spec.name}' defines no end-of-sequence token")
        return ids

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = min(self.eos_ids)
            self.tokenizer.pad_token_id = pad
        return int(pad)

    # -- generation --------------------------------------------------------------------------
    def encode(self, conv: Conversation, chat_template: str | None = None, tools: Sequence[ToolSpec] = ()) -> list[int]:
        return encode(self.tokenizer, conv, chat_template, tools)

    def _sub_batches(self, rows: list[Row]) -> list[list[Row]]:
        """Longest first, so each sub-batch is padded to its first row's length."""
        rows = sorted(rows, key=lambda r: len(r.ids), reverse=True)
        batches: list[list[Row]] = []
        for r in rows:
            cur = batches[-1] if batches else None
            if cur is not None and len(cur) < self.max_batch:
                width = len(cur[0].ids) + max(r.max_new, *(c.max_new for c in cur))
                if width * (len(cur) + 1) <= self.max_batch_tokens:
                    cur.append(r)
                    continue
            batches.append([r])
        return batches

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion:
        """The reply to one conversation, generated in a batch with the requests in flight beside it."""
        if self.model is None:
            raise BackendUnavailable(f"transformers backend for '{self.spec.name}' is closed")
        return await self._batcher.submit(conversation, params, meta)

    def stats(self) -> dict[str, float]:
        """Batches run and their mean number of rows (the run log records them)."""
        return self._batcher.stats()

    def _generate(self, conversations: list[Conversation], params: GenParams, seeds: list[int | None],
                  metas: list[RequestMeta | None]) -> list[Completion]:
        """The batch function: one Completion per conversation, in order, from batched generate calls.

        Sampled rows draw from their own generator seeded with their seed, so a row's reply does not
        depend on which rows share its sub-batch.
        """
        import torch

        if self.model is None:
            raise BackendUnavailable(f"transformers backend for '{self.spec.name}' is closed")
        if params.prompt_logprobs:
            return [self._score(c, params) for c in conversations]
        results, rows = plan_rows(lambda c: self.encode(c, params.chat_template, params.tools), conversations, params,
                                  seeds, self.spec.context_length)
        stops = stop_strings(params)
        pending = self._sub_batches(rows)
        while pending:
            batch = pending.pop(0)
            try:
                done = self._run(batch, params, stops)
            except torch.cuda.OutOfMemoryError:
                if len(batch) == 1:
                    raise
                torch.cuda.empty_cache()
                half = len(batch) // 2
                log.warning("CUDA out of memory at batch %d; splitting", len(batch))
                pending[:0] = [batch[:half], batch[half:]]
                continue
            for row, comp in zip(batch, done, strict=True):
                results[row.index] = comp
        return complete(results)

    def _score(self, conversation: Conversation, params: GenParams) -> Completion:
        """A scoring request: one forward pass over the prompt, the prefilled reply's tokens scored."""
        import torch

        t0 = time.perf_counter()
        scoring.check(conversation, params)
        try:
            ids, first = scoring.message_start(lambda c: self.encode(c, params.chat_template, params.tools),
                                               conversation)
        except Exception as e:
            return _failed(f"cannot encode the prompt: {first_line(e)}", None, t0)
        if len(ids) >= self.spec.context_length:
            return context_full(len(ids))
        assert self.model is not None
        start = max(first, 1)
        keep = len(ids) - start + 1  # only the logits that predict the message's tokens: a vocabulary per token is big
        with torch.inference_mode():
            logits = self.model(torch.tensor([ids], device=self.model.device), logits_to_keep=keep).logits[0]
        logp = torch.log_softmax(logits.float(), dim=-1)
        offset = len(ids) - logp.shape[0]  # logits row r predicts the token at r + offset + 1
        top = torch.topk(logp, params.prompt_logprobs, dim=-1)
        rows: list[dict[int, float] | None] = [None] * len(ids)
        for j in range(start, len(ids)):
            r = j - 1 - offset
            row = dict(zip(top.indices[r].tolist(), top.values[r].tolist(), strict=True))
            row[ids[j]] = float(logp[r, ids[j]])
            rows[j] = row
        try:
            scores = scoring.token_scores(scoring.decoder(self.tokenizer), ids, first, conversation[-1]["content"],
                                          rows, params.prompt_logprobs)
        except BackendError as e:
            return _failed(str(e), len(ids), t0)
        return Completion("", len(ids), 0, "stop", time.perf_counter() - t0, scores=scores)

    def _run(self, batch: list[Row], params: GenParams, stops: tuple[str, ...]) -> list[Completion]:
        # Sampling always takes our decode loop: transformers' generate draws every row from one global RNG.
        if self.kv_store is not None or not params.greedy:
            return self._run_reusing_kv(batch, params, stops)
        return self._run_generate(batch, params, stops)

    def _run_reusing_kv(self, batch: list[Row], params: GenParams,
                        stops: tuple[str, ...]) -> list[Completion]:
        """Our own decode loop: stored KV prefixes, chunked prefill, finished rows leave the batch."""
        import torch

        from .kv_reuse import DecodeRow, PrefixStore, decode

        store = self.kv_store if self.kv_store is not None else PrefixStore(budget_bytes=0)  # 0: keeps nothing
        ends = self.eos_ids | {self.pad_id}
        window = max((len(s) for s in stops), default=0) + 8  # tokens: one completes a stop ending in it
        detok = self.tokenizer.decode

        def is_done(toks: list[int], max_new: int) -> bool:
            if toks[-1] in ends or len(toks) >= max_new:
                return True
            return bool(stops) and any(s in detok(toks[-window:], skip_special_tokens=True) for s in stops)

        with torch.inference_mode():
            out = decode(self.model, [DecodeRow(r.ids, r.max_new, r.seed) for r in batch], params, store,
                         self.pad_id, is_done)
        return [self._finish(r, res.tokens, stops, res.latency_s, res.reused)
                for r, res in zip(batch, out, strict=True)]

    def _run_generate(self, batch: list[Row], params: GenParams, stops: tuple[str, ...]) -> list[Completion]:
        """transformers' `generate` on the left-padded batch (no reuse between calls)."""
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        width = max(len(r.ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for j, r in enumerate(batch):
            input_ids[j, width - len(r.ids):] = torch.tensor(r.ids)
            mask[j, width - len(r.ids):] = 1
        sampling: dict[str, Any] = (
            {"do_sample": False} if params.greedy
            else {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        )
        config = GenerationConfig(
            max_new_tokens=max(r.max_new for r in batch), eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id, **sampling,
        )
        criteria = StoppingCriteriaList([self._stop_criterion(width, stops)] if stops else [])
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                generation_config=config, stopping_criteria=criteria,
            )
        latency = time.perf_counter() - t0
        new = out[:, width:].tolist()
        return [self._finish(r, toks, stops, latency) for r, toks in zip(batch, new, strict=True)]

    def _stop_criterion(self, width: int, stops: tuple[str, ...]) -> Any:
        """Stops a row once its generated text holds a stop string.

        transformers' own `stop_strings` also match across the prompt boundary: with stop "\\n1",
        a prompt ending in a newline stops a reply that starts with "1". Here only new tokens count.
        """
        import torch
        from transformers import StoppingCriteria

        decode = self.tokenizer.batch_decode
        window = max(len(s) for s in stops) + 8  # tokens: one completes a stop that ends in it

        class StopOnStrings(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                tails = decode(input_ids[:, width:][:, -window:].tolist(), skip_special_tokens=True)
                return torch.tensor([any(s in t for s in stops) for t in tails], device=input_ids.device)

        return StopOnStrings()

    def _finish(self, row: Row, toks: list[int], stops: tuple[str, ...], latency: float,
                cached: int = 0) -> Completion:
        """Cut one row's new tokens at EOS / padding / its own budget / the first stop string."""
        finish: FinishReason = "length"
        end = next((k for k, t in enumerate(toks) if t in self.eos_ids or t == self.pad_id), None)
        if end is not None and end < row.max_new:
            toks, finish, counted = toks[:end], "stop", end + 1  # the EOS token was generated
        else:
            toks = toks[: row.max_new]
            counted = len(toks)
        text = self.tokenizer.decode(toks, skip_special_tokens=True)
        cut = cut_at_stop(text, stops)
        if cut is not None:
            text, finish, counted = cut, "stop", self._tokens_to_stop(toks, stops)
        return Completion(text=text, prompt_tokens=len(row.ids), completion_tokens=counted,
                          finish_reason=finish, latency_s=latency, cached_tokens=cached)

    def _tokens_to_stop(self, toks: list[int], stops: tuple[str, ...]) -> int:
        """The fewest leading tokens whose text already contains a stop string (binary search)."""
        lo, hi = 1, len(toks)
        while lo < hi:
            mid = (lo + hi) // 2
            text = self.tokenizer.decode(toks[:mid], skip_special_tokens=True)
            if any(s in text for s in stops):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def close(self) -> None:
        """Stop the request queue, then free the model (and the GPU cache); no `complete` afterwards."""
        if getattr(self, "model", None) is None:
            return
        self._batcher.close()
        self.model = None
        if self.kv_store is not None:
            self.kv_store.clear()
        gc.collect()
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()
