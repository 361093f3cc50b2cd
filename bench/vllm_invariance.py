"""Does a seeded vLLM draw depend on what else the engine does? The default model on the vLLM backend
(its own `vllm serve`; a batch is that many requests sent at once):

1. batch size: the same seeded request alone, then as row 1 of batches of 2..6 other prompts;
2. prefix cache: each prompt (sharing a long system prompt) first cold, then again with its prefix cached.

Prints, per check and for sampled (T=0.8) and greedy decoding, how many draws differ. Usage:
    .venv/bin/python bench/vllm_invariance.py [float32|bfloat16]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    os.environ["AGENT_HARNESS_VLLM_DTYPE"] = sys.argv[1] if len(sys.argv) > 1 else "float32"
    from agent_harness.backends import load_backend
    from agent_harness.backends.loop import complete_all
    from agent_harness.registry import load_registry
    from agent_harness.types import Conversation, GenParams

    reg = load_registry()
    backend = load_backend(reg.resolve(None)[0], force="vllm")
    system = "You are a careful Python programmer. " * 40  # several KV blocks of shared prefix

    def conv(text: str, with_system: bool = False) -> Conversation:
        head = [{"role": "system", "content": system}] if with_system else []
        return [*head, {"role": "user", "content": text}]  # type: ignore[list-item]

    questions = ["Write a haiku about rivers.", "Name three prime numbers.", "Say hi in French.",
                 "Write a Python function that reverses a list.", "What is 17 * 23?", "List four colours."]
    print(f"backend {backend.info.used}, dtype {backend.info.details.get('dtype')}")
    try:
        for name, params in (("sampled T=0.8", GenParams(max_tokens=64, temperature=0.8, top_p=0.95)),
                             ("greedy", GenParams(max_tokens=64))):
            alone = complete_all(backend, [conv(questions[1])], params, seeds=[11])[0].text
            batch_diffs = 0
            for k in range(2, 7):
                seeds = [7 + i for i in range(k)]
                seeds[1] = 11
                together = complete_all(backend, [conv(q) for q in questions[:k]], params, seeds=seeds)
                batch_diffs += together[1].text != alone
            cache_diffs = 0
            for i, q in enumerate(questions):
                prompt = conv(f"{q} ({name})", with_system=True)
                cold, warm = (complete_all(backend, [prompt], params, seeds=[100 + i])[0] for _ in range(2))
                cache_diffs += cold.text != warm.text
            print(f"{name}: batch sizes 2-6 differ from alone in {batch_diffs}/5; "
                  f"cached prefix differs from cold in {cache_diffs}/{len(questions)}")
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
