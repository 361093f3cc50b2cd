"""The request queue inside the transformers and scripted backends: what goes in one batch, who gets what.

Each test counts the batch function's calls and rows; nothing is timed. Threads stand in for the
runner's worker threads and for `complete_all` calls, each thread with an event loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import pytest

from agent_harness.backends.batching import Batcher
from agent_harness.errors import BackendError
from agent_harness.types import Completion, Conversation, GenParams, RequestMeta

pytestmark = pytest.mark.timeout(60)  # a hang fails here, never stalls the suite

GREEDY = GenParams(max_tokens=8)
SAMPLED = GenParams(max_tokens=8, temperature=0.7)


def conv(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


class Engine:
    """A batch function that records its calls; `gate` (if set) holds its first call until released."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[list[str], GenParams, list[int | None]]] = []
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, convs: list[Conversation], params: GenParams, seeds: list[int | None],
                 metas: list[RequestMeta | None]) -> list[Completion]:
        texts = [c[0]["content"] for c in convs]
        self.calls.append((texts, params, seeds))
        self.started.set()
        if self.gate is not None and len(self.calls) == 1:
            assert self.gate.wait(50)
        if any(t.startswith("boom") for t in texts):
            raise ValueError("the engine broke on this batch")
        n = len(texts) - 1 if "short" in texts else len(texts)
        return [Completion(f"{t}|{s}", 1, 1, "stop", 0.0) for t, s in zip(texts[:n], seeds, strict=False)]

    @property
    def sizes(self) -> list[int]:
        return [len(texts) for texts, _, _ in self.calls]


def send(batcher: Batcher, requests: Sequence[tuple[str, GenParams]]) -> list[Completion | BaseException]:
    """All `requests` from one new event loop in one turn (as `complete_all` sends them)."""
    async def go() -> list[Completion | BaseException]:
        return list(await asyncio.gather(*(batcher.submit(conv(t), p) for t, p in requests), return_exceptions=True))

    return asyncio.run(go())


def in_threads(pool: ThreadPoolExecutor, batcher: Batcher, requests: Sequence[tuple[str, GenParams]]
               ) -> list[Future[list[Completion | BaseException]]]:
    """Each request from a thread and an event loop of its own, started one after another."""
    return [pool.submit(send, batcher, [r]) for r in requests]


def text(outcome: Completion | BaseException) -> str:
    assert isinstance(outcome, Completion), outcome
    return outcome.text


def wait_until(cond: Callable[[], bool]) -> None:
    while not cond():  # bounded by the module's timeout
        time.sleep(0.001)


def test_requests_sent_together_run_as_one_batch_in_order() -> None:
    engine = Engine()
    batcher = Batcher(engine)
    out = send(batcher, [(f"q{i}", GREEDY) for i in range(8)])
    assert [text(c) for c in out] == [f"q{i}|None" for i in range(8)]
    assert engine.sizes == [8] and batcher.stats() == {"batches": 1, "mean_batch": 8.0}
    batcher.close()


def test_the_requests_of_one_loop_turn_arrive_together() -> None:
    """Even when the loop's thread lets the worker run between two of them (here: it blocks, bounded)."""
    engine = Engine()
    batcher = Batcher(engine)

    async def go() -> list[Completion]:
        async def second() -> Completion:
            engine.started.wait(0.5)  # holds this turn; a worker given the first request alone would start now
            return await batcher.submit(conv("b"), GREEDY)

        return list(await asyncio.gather(batcher.submit(conv("a"), GREEDY), second()))

    assert [c.text for c in asyncio.run(go())] == ["a|None", "b|None"]
    assert engine.sizes == [2]
    batcher.close()


def test_requests_arriving_while_a_batch_runs_go_together_next() -> None:
    gate = threading.Event()
    engine = Engine(gate)
    batcher = Batcher(engine, gather=0)
    with ThreadPoolExecutor(8) as pool:
        first = in_threads(pool, batcher, [("first", GREEDY)])
        assert engine.started.wait(50)
        later = in_threads(pool, batcher, [(f"q{i}", GREEDY) for i in range(5)])
        wait_until(lambda: batcher._queue.qsize() == 5)  # five separate arrivals, queued behind the gate
        gate.set()
        texts = [text(f.result()[0]) for f in first + later]
    assert texts == ["first|None"] + [f"q{i}|None" for i in range(5)]
    assert engine.sizes == [1, 5] and batcher.stats()["mean_batch"] == 3.0
    batcher.close()


def test_the_next_batch_waits_for_the_last_batchs_callers_one_by_one() -> None:
    """Six callers come back one by one, each on its own loop and thread: they still go as one batch,
    and each row keeps its own seed (the batch's params carry none)."""
    engine = Engine()
    batcher = Batcher(engine, gather=1e9)  # bounded by the module's timeout, never reached
    send(batcher, [(f"a{i}", GREEDY) for i in range(6)])
    with ThreadPoolExecutor(6) as pool:
        back = in_threads(pool, batcher, [(f"b{i}", replace(SAMPLED, seed=100 + i)) for i in range(6)])
        texts = [text(f.result()[0]) for f in back]
    assert texts == [f"b{i}|{100 + i}" for i in range(6)]
    assert engine.sizes == [6, 6]
    _, params, seeds = engine.calls[1]
    assert params.seed is None and sorted(s for s in seeds if s is not None) == list(range(100, 106))
    batcher.close()


def test_sampling_settings_never_share_a_batch_and_seeds_reach_their_rows() -> None:
    engine = Engine()
    batcher = Batcher(engine)
    stop = replace(GREEDY, stop=("\n",))
    requests = [("g0", GREEDY), ("s0", replace(SAMPLED, seed=7)), ("t0", stop), ("s1", replace(SAMPLED, seed=8)),
                ("g1", GREEDY), ("s2", replace(SAMPLED, seed=7))]
    out = send(batcher, requests)
    assert [text(c) for c in out] == ["g0|None", "s0|7", "t0|None", "s1|8", "g1|None", "s2|7"]
    assert sorted((texts, p) for texts, p, _ in engine.calls) == sorted(
        [(["g0", "g1"], GREEDY), (["s0", "s1", "s2"], SAMPLED), (["t0"], stop)])
    assert batcher.stats() == {"batches": 3, "mean_batch": 2.0}
    batcher.close()


def test_a_failing_batch_fails_only_its_own_callers() -> None:
    engine = Engine()
    batcher = Batcher(engine)
    out = send(batcher, [("boom", SAMPLED), ("fine", GREEDY), ("also boom", SAMPLED)])
    assert isinstance(out[0], ValueError) and out[2] is out[0] and "broke" in str(out[0])
    assert text(out[1]) == "fine|None"
    short = send(batcher, [("short", GREEDY), ("x", GREEDY)])  # the engine answers one row of two
    assert all(isinstance(e, BackendError) and "1 completions for a batch of 2 requests" in str(e) for e in short)
    [after] = send(batcher, [("after", GREEDY)])  # the worker goes on
    assert text(after) == "after|None"
    batcher.close()


def test_close_fails_queued_requests_at_once_and_finishes_the_running_batch() -> None:
    gate = threading.Event()
    engine = Engine(gate)
    batcher = Batcher(engine, gather=0)
    with ThreadPoolExecutor(8) as pool:
        [running] = in_threads(pool, batcher, [("running", GREEDY)])
        assert engine.started.wait(50)
        queued = in_threads(pool, batcher, [(f"q{i}", GREEDY) for i in range(3)])
        wait_until(lambda: batcher._queue.qsize() == 3)
        closing = pool.submit(batcher.close)
        for f in queued:  # failed while the running batch is still held at the gate
            [err] = f.result()
            assert isinstance(err, BackendError) and "stopped before this request was answered" in str(err)
        assert not running.done() and not closing.done()
        gate.set()
        closing.result()
        assert [text(c) for c in running.result()] == ["running|None"]
    [late] = send(batcher, [("late", GREEDY)])
    assert isinstance(late, BackendError) and "closed" in str(late)
    assert engine.sizes == [1]


def test_a_caller_that_gave_up_is_not_run() -> None:
    gate = threading.Event()
    engine = Engine(gate)
    batcher = Batcher(engine, gather=0)

    async def go() -> str:
        first = asyncio.ensure_future(batcher.submit(conv("first"), GREEDY))
        await asyncio.to_thread(engine.started.wait, 50)
        gone = asyncio.ensure_future(batcher.submit(conv("gone"), GREEDY))
        await asyncio.sleep(0)  # staged
        await asyncio.sleep(0)  # queued
        assert batcher._queue.qsize() == 1
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        gate.set()
        await first
        return (await batcher.submit(conv("next"), GREEDY)).text

    assert asyncio.run(go()) == "next|None"
    assert [texts for texts, _, _ in engine.calls] == [["first"], ["next"]]
    batcher.close()
