"""Batched decoding for the transformers backend that reuses KV caches across agent steps.

An agent's prompt at step t+1 is its prompt at step t plus the reply plus an observation, and
every episode shares the system prompt. Recomputing all of that each step makes prefill the
dominant cost on a CPU. `PrefixStore` keeps the K/V tensors of recent sequences (LRU, bounded in
bytes); `decode` feeds each row only the tokens past its longest stored prefix, prefills in
chunks, and drops rows from the batch the moment they finish (transformers' `generate` keeps
computing finished rows until the longest one is done).

Batch layout: row j is ``[pad | cached_j | pad | new_j]``. The 2-D attention mask marks the pads
and the position ids are its cumulative sum, so each row sees positions 0..n-1 exactly as in a
full recompute; only floating-point rounding differs (as it does with any change of batch shape).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from ..errors import BackendError
from ..types import GenParams

PREFILL_CHUNK = 512  # tokens per prefill forward: bounds the attention scores' memory


@dataclass(eq=False)  # entries are compared by identity (their ids are numpy arrays)
class _Entry:
    ids: np.ndarray  # token ids whose K/V are stored
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values as [heads, len, head_dim]
    tick: int
    nbytes: int


@dataclass
class PrefixStore:
    """Recent sequences' KV caches, looked up by longest common token prefix."""

    budget_bytes: int
    entries: list[_Entry] = field(default_factory=list)
    hits_tokens: int = 0  # prompt tokens served from the store
    miss_tokens: int = 0  # prompt tokens computed
    _tick: int = 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def match(self, ids: np.ndarray) -> tuple[_Entry | None, int]:
        best, best_n = None, 0
        for e in self.entries:
            n = min(len(e.ids), len(ids))
            if n <= best_n:
                continue
            eq = e.ids[:n] == ids[:n]
            k = n if bool(eq.all()) else int(np.argmin(eq))
            if k > best_n:
                best, best_n = e, k
        if best is not None:
            self._tick += 1
            best.tick = self._tick
        return best, best_n

    def add(self, ids: np.ndarray, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        nbytes = sum(k.nbytes + v.nbytes for k, v in kv)
        if nbytes > self.budget_bytes:
            return
        self._tick += 1
        self.entries.append(_Entry(ids, kv, self._tick, nbytes))
        total = self.nbytes
        while total > self.budget_bytes:
            oldest = min(self.entries, key=lambda e: e.tick)
            self.entries.remove(oldest)
            total -= oldest.nbytes

    def discard(self, entry: _Entry) -> None:
        if entry in self.entries:
            self.entries.remove(entry)

    def clear(self) -> None:
        self.entries.clear()


@dataclass
class DecodeRow:
    ids: list[int]  # the whole prompt
    max_new: int
    seed: int | None = None  # this row's own random stream when sampling (None: torch's global one)


@dataclass
class DecodeResult:
    tokens: list[int]  # generated ids (EOS included when it was generated)
    latency_s: float  # from the start of the batch to this row's last token
    reused: int = 0  # prompt tokens whose KV came from the store


def _sample(logits: torch.Tensor, params: GenParams, gens: list[torch.Generator | None]) -> torch.Tensor:
    """One token per row; row i draws from `gens[i]`, so its draw does not depend on the other rows."""
    if params.greedy:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(gens)])


def _generator(seed: int | None, device: Any) -> torch.Generator | None:
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)


def _batch_cache(model: Any, parts: list[tuple[_Entry | None, int]], width: int) -> DynamicCache:
    """A DynamicCache of `width` columns with each row's stored prefix right-aligned."""
    cache = DynamicCache(config=model.config)
    if width == 0:
        return cache
    template = next(e for e, k in parts if e is not None and k > 0).kv
    for layer, (k0, v0) in enumerate(template):
        heads, _, dim = k0.shape
        keys = k0.new_zeros((len(parts), heads, width, dim))
        values = v0.new_zeros((len(parts), heads, width, dim))
        for j, (entry, k) in enumerate(parts):
            if entry is not None and k > 0:
                keys[j, :, width - k :] = entry.kv[layer][0][:, :k]
                values[j, :, width - k :] = entry.kv[layer][1][:, :k]
        cache.update(keys, values, layer)
    return cache


def _row_kv(cache: DynamicCache, b: int, cols: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys[b, :, cols].clone(), layer.values[b, :, cols].clone()) for layer in cache.layers]


def decode(
    model: Any,
    rows: list[DecodeRow],
    params: GenParams,
    store: PrefixStore,
    pad_id: int,
    is_done: Callable[[list[int], int], bool],
) -> list[DecodeResult]:
    """Generate for every row; `is_done(tokens, max_new)` says when a row stops (EOS, stop string, budget)."""
    t0 = time.perf_counter()
    arrays = [np.asarray(r.ids, dtype=np.int64) for r in rows]
    parts: list[tuple[_Entry | None, int]] = []
    superseded: list[_Entry] = []
    for ids in arrays:
        entry, k = store.match(ids)
        if entry is not None and k == len(entry.ids):  # this conversation's previous step
            superseded.append(entry)
        parts.append((entry, min(k, len(ids) - 1)))  # at least one new token, for the first logits
    width = max(k for _, k in parts)
    new = [a[k:] for a, (_, k) in zip(arrays, parts, strict=True)]
    span = max(len(s) for s in new)
    store.hits_tokens += sum(k for _, k in parts)
    store.miss_tokens += sum(len(s) for s in new)

    cache = _batch_cache(model, parts, width)
    for entry in superseded:
        store.discard(entry)
    b = len(rows)
    input_ids = torch.full((b, span), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width + span), dtype=torch.long)
    for j, ((_, k), s) in enumerate(zip(parts, new, strict=True)):
        mask[j, width - k : width] = 1
        input_ids[j, span - len(s) :] = torch.from_numpy(s)
        mask[j, width + span - len(s) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    device = model.device
    input_ids, mask, pos = input_ids.to(device), mask.to(device), pos.to(device)

    for c0 in range(0, span, PREFILL_CHUNK):
        c1 = min(span, c0 + PREFILL_CHUNK)
        out = model(input_ids=input_ids[:, c0:c1], attention_mask=mask[:, : width + c1],
                    position_ids=pos[:, width + c0 : width + c1], past_key_values=cache, use_cache=True,
                    logits_to_keep=1)
    logits = out.logits[:, -1, :]
    last_pos = pos[:, -1].clone()

    alive = list(range(b))
    gens = [None if params.greedy else _generator(r.seed, device) for r in rows]
    gen: list[list[int]] = [[] for _ in rows]
    results: list[DecodeResult | None] = [None] * b
    while alive:
        nxt = _sample(logits, params, [gens[r] for r in alive])
        keep: list[int] = []
        for i, r in enumerate(alive):
            gen[r].append(int(nxt[i]))
            if is_done(gen[r], rows[r].max_new):
                results[r] = DecodeResult(gen[r], time.perf_counter() - t0, parts[r][1])
                cols = mask[i].nonzero().squeeze(-1)  # everything fed so far: prompt + gen[:-1]
                store.add(np.concatenate([arrays[r], np.asarray(gen[r][:-1], dtype=np.int64)]),
                          _row_kv(cache, i, cols))
            else:
                keep.append(i)
        if not keep:
            break
        if len(keep) < len(alive):
            idx = torch.tensor(keep, device=device)
            cache.batch_select_indices(idx)
            mask, last_pos, nxt = mask[idx], last_pos[idx], nxt[idx]
            alive = [alive[i] for i in keep]
            lead = int((mask.sum(0) > 0).nonzero()[0])  # columns that are padding in every row left
            if lead:
                mask = mask[:, lead:]
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]
        mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :]
    missing = [j for j, r in enumerate(results) if r is None]
    if missing:
        raise BackendError(f"decode: row {missing[0]} of {b} ended without a result")
    return [r for r in results if r is not None]
