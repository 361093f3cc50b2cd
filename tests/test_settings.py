"""AGENT_HARNESS_* variables: parsed once in settings.py, a bad value is one line naming it (exit 2 from the CLI)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.settings import PREFIX, VARIABLES, get_settings, parse

ROOT = Path(__file__).resolve().parent.parent

BAD = [
    ("AGENT_HARNESS_SANDBOX_UID", "nobody"), ("AGENT_HARNESS_SANDBOX_UID", "-1"),
    ("AGENT_HARNESS_SANDBOX", "lxc"), ("AGENT_HARNESS_HF_DTYPE", "fp8"),
    ("AGENT_HARNESS_HF_MAX_BATCH", "0"), ("AGENT_HARNESS_HF_MAX_BATCH_TOKENS", "many"),
    ("AGENT_HARNESS_HF_KV_REUSE", "maybe"), ("AGENT_HARNESS_HF_KV_CACHE_MB", "1.5"),
    ("AGENT_HARNESS_VLLM_DTYPE", "int4"), ("AGENT_HARNESS_VLLM_EAGER", "sometimes"),
    ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "20"), ("AGENT_HARNESS_VLLM_NGRAM", "40"),
    ("AGENT_HARNESS_VLLM_GPU_UTIL", "half"), ("AGENT_HARNESS_VLLM_GPU_UTIL", "1.5"),
    ("AGENT_HARNESS_OPENAI_BACKOFF_S", "-2"),
]


def test_defaults_and_values() -> None:
    s = parse({})
    assert (s.sandbox_uid, s.sandbox, s.hf_kv_reuse, s.cache, s.scenarios) == (65534, "auto", True, None, ())
    s = parse({"AGENT_HARNESS_SANDBOX_UID": "1234", "AGENT_HARNESS_HF_KV_REUSE": "0", "AGENT_HARNESS_CACHE": "~/c",
               "AGENT_HARNESS_SCENARIOS": f"/a{os.pathsep}/b", "AGENT_HARNESS_VLLM_EAGER": "yes",
               "AGENT_HARNESS_SANDBOX": " RLIMIT ", "AGENT_HARNESS_VLLM_GPU_UTIL": "0.9", "AGENT_HARNESS_HF_DTYPE": ""})
    got = (s.sandbox_uid, s.hf_kv_reuse, s.vllm_eager, s.sandbox, s.vllm_gpu_util)
    assert got == (1234, False, True, "rlimit", 0.9)
    assert s.cache == Path("~/c").expanduser().resolve() and s.scenarios == (Path("/a"), Path("/b"))
    assert s.hf_dtype is None  # empty is unset


@pytest.mark.parametrize("var,value", BAD)
def test_bad_value_is_one_line_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse({var: value})
    msg = str(err.value)
    assert msg.startswith(f"{var}={value!r}: expected ") and "\n" not in msg


def test_every_variable_the_code_reads_is_a_setting() -> None:
    code = "\n".join(p.read_text() for p in (ROOT / "agent_harness").rglob("*.py"))
    used = {v for v in re.findall(r"AGENT_HARNESS_[A-Z0-9_]+", code) if not v.endswith("_")}  # not "VLLM_*"
    known = {PREFIX + name.upper() for name in VARIABLES}
    assert used - known == set()  # the docs' table lists each one: tests/test_docs.py


def test_settings_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX_UID", "4321")
    assert get_settings().sandbox_uid == 4321
    from agent_harness.sandbox import SANDBOX_UID, sandbox_uid

    assert SANDBOX_UID == sandbox_uid() == 4321
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX_UID", "x")
    with pytest.raises(ConfigError, match="AGENT_HARNESS_SANDBOX_UID='x'"):
        get_settings()


@pytest.mark.parametrize("var,value", [("AGENT_HARNESS_SANDBOX_UID", "nobody"), ("AGENT_HARNESS_HF_MAX_BATCH", "0"),
                                       ("AGENT_HARNESS_OPENAI_BACKOFF_S", "soon"), ("AGENT_HARNESS_VLLM_NGRAM", "x")])
def test_cli_bad_value_exit_2_one_line(var: str, value: str, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", var: value}
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle", "--n", "1", "--out",
                        str(tmp_path / "t"), "--no-embed"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=env)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {var}={value!r}: expected "), line
    assert not (tmp_path / "t").exists()
