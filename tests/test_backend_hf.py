"""The transformers backend on the real embedded 0.5B model (offline), loaded once per session."""

from __future__ import annotations

import pytest
from backend_contract import CONVS, COUNT, batch_of_three, observation_stays_text, stop_string_cuts_generation

from agent_harness.backends import load_backend
from agent_harness.backends.hf import HFBackend
from agent_harness.backends.loop import complete_all
from agent_harness.errors import BackendUnavailable
from agent_harness.registry import ModelSpec
from agent_harness.types import Conversation, GenParams


def test_hub_only_model_offline_names_offline_models() -> None:
    spec = ModelSpec(name="hubonly", backend="transformers", hf_id="org/not-here")
    with pytest.raises(BackendUnavailable, match="unreachable.*qwen2.5-coder-0.5b"):
        load_backend(spec, force="transformers")


def test_4bit_needs_cuda(default_spec: ModelSpec) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    spec = default_spec.model_copy(update={"load_in_4bit": True})
    with pytest.raises(BackendUnavailable, match="load_in_4bit needs a CUDA GPU"):
        load_backend(spec, force="transformers")


@pytest.mark.model
def test_info(hf_backend: HFBackend) -> None:
    info = hf_backend.info
    assert (info.requested, info.used, info.fallback_reason) == ("transformers", "transformers", None)
    assert info.device in ("cpu", "cuda")
    assert {"model_dir", "dtype", "load_s"} <= info.details.keys()
    assert info.details["model_dir"].endswith("-bfloat16")


@pytest.mark.model
def test_batch_of_three_and_greedy_determinism(hf_backend: HFBackend) -> None:
    batch_of_three(hf_backend)


@pytest.mark.model
def test_stop_string_cuts_generation(hf_backend: HFBackend) -> None:
    stop_string_cuts_generation(hf_backend)


@pytest.mark.model
def test_stop_string_never_matches_across_the_prompt(hf_backend: HFBackend) -> None:
    """The prompt ends in "\n" and the reply starts with "1": "\n1" is not in the reply."""
    [free] = complete_all(hf_backend, [COUNT], GenParams(max_tokens=40))
    assert free.text.startswith("1")
    [out] = complete_all(hf_backend, [COUNT], GenParams(max_tokens=40, stop=("\n1",)))
    assert (out.text, out.completion_tokens, out.finish_reason) == (free.text, free.completion_tokens, "stop")


@pytest.mark.model
def test_sampling_is_reproducible_with_a_seed(hf_backend: HFBackend) -> None:
    params = GenParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=123)
    a = complete_all(hf_backend, CONVS[1:], params)
    b = complete_all(hf_backend, CONVS[1:], params)
    assert [c.text for c in a] == [c.text for c in b]
    assert all(c.text for c in a)


@pytest.mark.model
def test_sub_batches_keep_order(hf_backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three requests sent together are one batch of the queue, generated as two sub-batches."""
    monkeypatch.setattr(hf_backend, "max_batch", 2)
    before = hf_backend.stats()
    out = complete_all(hf_backend, CONVS, GenParams(max_tokens=4))
    assert [c.prompt_tokens for c in out] == [len(hf_backend.encode(c)) for c in CONVS]
    assert all(c.completion_tokens == 4 and c.finish_reason == "length" for c in out)
    after = hf_backend.stats()
    assert after["batches"] == before["batches"] + 1
    assert after["mean_batch"] * after["batches"] - before["mean_batch"] * before["batches"] == pytest.approx(3)


@pytest.mark.model
def test_context_length_clips_and_overflows(hf_backend: HFBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    n_prompt = len(hf_backend.encode(CONVS[1]))
    small = hf_backend.spec.model_copy(update={"context_length": n_prompt + 5})
    monkeypatch.setattr(hf_backend, "spec", small)
    long_conv: Conversation = [{"role": "user", "content": "word " * (n_prompt + 20)}]
    clipped, overflow = complete_all(hf_backend, [CONVS[1], long_conv], GenParams(max_tokens=40))
    assert clipped.prompt_tokens == n_prompt
    assert clipped.completion_tokens == 5 and clipped.finish_reason == "length" and clipped.text
    assert overflow.text == "" and overflow.finish_reason == "length" and overflow.completion_tokens == 0
    assert overflow.prompt_tokens > n_prompt + 5


@pytest.mark.model
def test_kv_reuse_matches_generate_and_hits_the_cache(hf_backend: HFBackend) -> None:
    """The reuse path (default) and transformers' generate agree on greedy text over two agent turns,
    and the second turn is served mostly from the stored prefix. Exact only in fp32 (the fixture's)."""
    assert hf_backend.info.details["dtype"] == "float32"
    store = hf_backend.kv_store
    assert store is not None
    store.clear()
    params = GenParams(max_tokens=20, stop=("\nOBSERVATION:",))
    convs: list[Conversation] = [CONVS[1], COUNT]
    first = complete_all(hf_backend, convs, params)
    nxt = [[*c, {"role": "assistant", "content": f.text}, {"role": "user", "content": "OBSERVATION:\nok. Go on."}]
           for c, f in zip(convs, first, strict=True)]
    hits_before, miss_before = store.hits_tokens, store.miss_tokens
    second = complete_all(hf_backend, nxt, params)
    reused = store.hits_tokens - hits_before
    computed = store.miss_tokens - miss_before
    assert reused >= sum(c.prompt_tokens for c in first), (reused, computed)  # whole first prompts reused
    assert [c.cached_tokens for c in first] == [0, 0] and sum(c.cached_tokens for c in second) == reused
    hf_backend.kv_store = None  # the generate() path, same weights
    try:
        ref_first = complete_all(hf_backend, convs, params)
        ref_second = complete_all(hf_backend, nxt, params)
    finally:
        hf_backend.kv_store = store
    assert [c.text for c in first] == [c.text for c in ref_first]
    assert [c.text for c in second] == [c.text for c in ref_second]
    assert [c.completion_tokens for c in second] == [c.completion_tokens for c in ref_second]
    assert [c.finish_reason for c in second] == [c.finish_reason for c in ref_second]


@pytest.mark.model
def test_observation_text_never_becomes_control_tokens(hf_backend: HFBackend) -> None:
    observation_stays_text(hf_backend)


def test_plan_rows_answers_full_prompts_and_keeps_order() -> None:
    """The row planning hf and vLLM share: budgets, seeds, and an empty "length" reply when the context is full."""
    from agent_harness.backends.local import Row, plan_rows
    from agent_harness.backends.stops import cut_at_stop, stop_strings

    def encode(conv: Conversation) -> list[int]:
        if "refused" in conv[0]["content"]:
            raise ValueError("the template refused it\nsecond line")
        return list(range(len(conv[0]["content"].split())))

    convs: list[Conversation] = [[{"role": "user", "content": " ".join(["w"] * n)}] for n in (3, 10, 6)]
    convs.append([{"role": "user", "content": "refused"}])
    results, rows = plan_rows(encode, convs, GenParams(max_tokens=5), [7, 8, 9, 10], context_length=10)
    assert rows == [Row(0, [0, 1, 2], 5, 7), Row(2, list(range(6)), 4, 9)]
    assert results[0] is None and results[2] is None
    assert results[1] is not None and (results[1].text, results[1].finish_reason) == ("", "length")
    refused = results[3]  # this row's episode ends with the error; its batch-mates go on
    assert refused is not None and (refused.text, refused.finish_reason) == ("", "error")
    assert refused.error == "cannot encode the prompt: ValueError: the template refused it"
    assert stop_strings(GenParams(stop=("", "\nX", "Y"))) == ("\nX", "Y")
    assert cut_at_stop("aY b\nX", ("\nX", "Y")) == "a"  # the earliest stop wins, whatever its place in the list
    assert cut_at_stop("Yab", ("ab", "Y")) == "" and cut_at_stop("abc", ("Z",)) is None
