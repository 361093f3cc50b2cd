"""A second vLLM engine that keeps the cores busy while a benchmark runs ("a loaded machine").

    with engine_load("qwen2.5-coder-0.5b", Path("out")) as load:
        ...                      # the measured work; load.replies counts what the loader generated

It serves the model's prepared folder with the harness's own engine flags on a port of its own and
keeps `streams` sampled chat requests of `max_tokens` each in flight until the block ends, so the
measured run shares the CPUs with a real engine decoding at batch `streams`, as it does when two sweeps
share a machine. Run alone (`python bench/load_engine.py --seconds 60`) it reports its own rate.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOPICS = ["a binary heap", "an LRU cache", "a trie", "Dijkstra's algorithm", "a tokenizer for arithmetic",
          "a rate limiter", "merge sort", "a ring buffer", "a JSON pretty-printer", "union-find"]


@dataclass
class Load:
    """What the loader did: replies finished and completion tokens generated while the block ran."""

    replies: int = 0
    completion_tokens: int = 0
    errors: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def tok_per_s(self) -> float:
        return self.completion_tokens / max(time.monotonic() - self.started, 1e-9)


def _stream(base_url: str, name: str, load: Load, stop: threading.Event, max_tokens: int, seed: int) -> None:
    import httpx

    with httpx.Client(timeout=600) as client:
        for i in itertools.count():
            if stop.is_set():
                return
            topic = TOPICS[(seed + i) % len(TOPICS)]
            body = {"model": name, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed * 1000 + i,
                    "messages": [{"role": "user", "content": f"Write {topic} in Python with tests."}]}
            try:
                r = client.post(f"{base_url}/chat/completions", json=body)
                r.raise_for_status()
                used = int(r.json()["usage"]["completion_tokens"])
            except Exception:  # the loader only loads; a failed request is counted and retried
                with load.lock:
                    load.errors += 1
                if stop.wait(1.0):
                    return
                continue
            with load.lock:
                load.replies += 1
                load.completion_tokens += used


@contextlib.contextmanager
def engine_load(model: str, out: Path, streams: int = 8, max_tokens: int = 256,
                cpus: list[int] | None = None) -> Iterator[Load]:
    """A `vllm serve` of `model` decoding `streams` requests at a time while the block runs; its log is
    `out/load-engine.log`. Yields once the engine has finished its first reply (it is then at full load).
    `cpus`: the cores the second engine is pinned to (default: every core this process may use). On a
    small machine an unpinned loader can take nearly all of it; pinned to some cores, it shares just
    those with the measured engine."""
    from vllm_server import VllmServer

    from agent_harness.registry import load_registry

    spec = load_registry(None).resolve(model)[0]
    out.mkdir(parents=True, exist_ok=True)
    srv = VllmServer.for_spec(spec, out / "load-engine.log", f"load-{spec.name}", cpus=cpus)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        srv.start()
        print(f"[load] second engine healthy after {srv.wait_healthy():.0f} s", file=sys.stderr, flush=True)
        load = Load()
        threads = [threading.Thread(target=_stream, args=(srv.base_url, srv.served_name, load, stop, max_tokens, k),
                                    daemon=True) for k in range(streams)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 600
        while load.replies == 0:  # a loader that never loads would make a "loaded" row a quiet one
            if not srv.alive or time.monotonic() > deadline:
                raise SystemExit(f"[load] the second engine gave no reply ({load.errors} failed requests): "
                                 f"{srv.cause() or 'see ' + str(srv.log)}")
            time.sleep(1)
        load.started, load.completion_tokens, load.replies = time.monotonic(), 0, 0
        yield load
    finally:
        stop.set()
        srv.stop()
        for t in threads:
            t.join(10)


def cpu_list(text: str) -> list[int]:
    """``"1"``, ``"0-1"``, ``"0,2-3"`` → the cores (argparse type)."""
    cpus: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a core list: {text!r} (e.g. 1 or 0-1)") from None
    if not cpus:
        raise argparse.ArgumentTypeError(f"not a core list: {text!r} (e.g. 1 or 0-1)")
    return cpus


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("/tmp/load-engine"))
    ap.add_argument("--cpus", type=cpu_list, default=None, help="pin the engine to these cores, e.g. 1 or 0-1")
    args = ap.parse_args()
    with engine_load(args.model, args.out, args.streams, cpus=args.cpus) as load:
        time.sleep(args.seconds)
        print(f"[load] {load.replies} replies, {load.completion_tokens} completion tokens, "
              f"{load.tok_per_s():.1f} tok/s, {load.errors} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
