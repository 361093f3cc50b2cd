"""models.yaml validation: every bad input is one line naming the file and key, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.registry import DEFAULT_REGISTRY, load_registry

ROOT = Path(__file__).resolve().parent.parent

GOOD = """
default: a
models:
  - name: a
    backend: scripted
    script: oracle
    aliases: [alpha]
  - name: b
    backend: transformers
    hf_id: some/model
    temperature: 0.7
"""

BAD = {
    "unknown_key": ("models:\n  - name: a\n    backend: scripted\n    script: oracle\n    colour: red\n",
                    "models[a].colour: unknown key"),
    "wrong_type": ("models:\n  - name: a\n    backend: transformers\n    hf_id: x\n    max_tokens: lots\n",
                   "models[a].max_tokens"),
    "unknown_backend": ("models:\n  - name: a\n    backend: llamafile\n    hf_id: x\n", "models[a].backend"),
    "duplicate_name": ("models:\n  - {name: a, backend: scripted, script: oracle}\n"
                       "  - {name: a, backend: scripted, script: 'null'}\n", "'a' already used"),
    "duplicate_alias": ("models:\n  - {name: a, backend: scripted, script: oracle, aliases: [x]}\n"
                        "  - {name: b, backend: scripted, script: 'null', aliases: [x]}\n", "'x' already used"),
    "missing_hf_id": ("models:\n  - name: a\n    backend: vllm\n", "needs 'hf_id' or 'offline'"),
    "bad_yaml": ("models: [\n", "invalid YAML"),
    "not_mapping": ("- a\n- b\n", "top level must be a mapping"),
    "bad_temperature": ("models:\n  - {name: a, backend: transformers, hf_id: x, temperature: -1}\n",
                        "models[a].temperature"),
    "bad_default": ("default: zzz\nmodels:\n  - {name: a, backend: scripted, script: oracle}\n", "default"),
    "bad_sha": ("models:\n  - name: a\n    backend: transformers\n    offline: {packages: [p], sha256: abc, "
                "filename: f.gguf}\n", "models[a].offline.sha256"),
    "zero_in_flight": ("models:\n  - {name: a, backend: vllm, hf_id: x, in_flight: {vllm: 0}}\n",
                       "models[a].in_flight.vllm"),
    "in_flight_unknown_backend": ("models:\n  - {name: a, backend: vllm, hf_id: x, in_flight: {gpu: 8}}\n",
                                  "models[a].in_flight.gpu"),
}


def test_shipped_registry_is_valid() -> None:
    reg = load_registry(DEFAULT_REGISTRY)
    assert reg.default == "qwen2.5-coder-0.5b"
    assert {"oracle", "null", "qwen2.5-coder-0.5b", "deepseek-coder-1.3b"} <= set(reg.names())
    assert reg.get("default").name == "qwen2.5-coder-0.5b"


def test_resolve_names_and_aliases(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(GOOD)
    reg = load_registry(p)
    assert [m.name for m in reg.resolve("alpha, b")] == ["a", "b"]
    assert [m.name for m in reg.resolve(None)] == ["a"]
    assert reg.get("b").gen_params().temperature == 0.7
    with pytest.raises(ConfigError, match="unknown model 'c'.*valid: a, b"):
        reg.resolve("c")


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_registry_one_line(tmp_path: Path, case: str) -> None:
    text, expected = BAD[case]
    p = tmp_path / f"{case}.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_registry(p)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(p) in msg
    assert expected in msg


def test_registry_not_utf8_one_line(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_bytes(b"models:\n  - name: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"m.yaml: cannot read the registry file: 'utf-8' codec") as err:
        load_registry(p)
    assert "\n" not in str(err.value)


def test_temperature_schedule() -> None:
    from agent_harness.registry import ModelSpec

    spec = ModelSpec(name="s", backend="scripted", script="oracle", temperature_schedule=[0.0, 0.5])
    assert [spec.gen_params(step=i).temperature for i in range(3)] == [0.0, 0.5, 0.5]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("case", ["unknown_key", "unknown_backend", "duplicate_alias", "bad_yaml"])
def test_cli_bad_registry_exit_2(tmp_path: Path, case: str) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(BAD[case][0])
    r = _cli("--registry", str(p), "--models", "a", "--n", "1")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: ") and str(p) in r.stderr


def test_cli_unknown_model_lists_valid() -> None:
    r = _cli("--models", "nope", "--n", "1")
    assert r.returncode == 2
    assert "unknown model 'nope'" in r.stderr and "oracle" in r.stderr


def test_cli_list_models() -> None:
    r = _cli("--list-models")
    assert r.returncode == 0, r.stderr
    assert "qwen2.5-coder-0.5b" in r.stdout and "oracle" in r.stdout and "scripted" in r.stdout
