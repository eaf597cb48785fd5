"""Where a decode step's time goes: requests decoding together on the default engine
(one by default), each stage of ``LLMEngine.step`` timed by wrapping its call (C++
layers, LM head, host work)::

    python -m specdec.bench.step_phases [--batch 1] [--max-tokens 256] [--rounds 4] [--model M]

Times are means per step over the timed rounds (one untimed round first); a wrapper
costs ~1 µs. "host" is the step less the decoder layers and the LM head.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import Counter
from collections.abc import Callable

from specdec import SamplingParams, isa

LAYERS = "    decoder layers (C++)"  # the decoder_stack call: every layer of a decode step
STAGES = (  # (owner, method, label): the engine's, the runner's and the model's stages
    ("engine", "_share_cores", "share cores"),
    ("engine", "_propose", "propose"),
    ("engine", "_schedule", "schedule"),
    ("runner", "execute", "execute"),
    ("model", "forward", "  forward"),
    ("rotary", "forward", "    rotary"),
    ("runner", "_attention_groups", "  attention groups"),
    ("model", "compute_logits", "  LM head"),
    ("engine", "_apply_logits_plugins", "logits plugins"),
    ("sampler", "sample", "sample"),
    ("engine", "_postprocess", "postprocess"),
    ("engine", "_output", "outputs"),
)


class StageTimes:
    def __init__(self):
        self.seconds: Counter[str] = Counter()

    def wrap(self, owner, name: str, label: str) -> None:
        call: Callable = getattr(owner, name)

        @functools.wraps(call)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start

        setattr(owner, name, timed)


class KernelsView:
    """The kernels module seen through an object of its own, so that timing its
    ``decoder_stack`` (``StageTimes.wrap``) leaves the module itself untouched."""

    def __init__(self, kernels):
        self._kernels = kernels

    def __getattr__(self, name: str):
        return getattr(self._kernels, name)


def measure(llm, max_tokens: int, rounds: int,
            batch: int = 1) -> tuple[dict[str, float], int]:
    """Microseconds per step of each stage (the labels of STAGES, LAYERS, "step") over
    ``rounds`` greedy decodes of ``max_tokens`` by ``batch`` requests together, after one
    untimed; and the timed steps. The engine keeps the timing wrappers afterwards."""
    engine = llm.engine
    runner, model = engine.runner, engine.runner.model
    times = StageTimes()
    if runner.kernels is not None:
        runner.kernels = KernelsView(runner.kernels)
        times.wrap(runner.kernels, "decoder_stack", LAYERS)
    owners = {"engine": engine, "runner": runner, "model": model,
              "rotary": getattr(model, "rotary", None), "sampler": engine.sampler}
    for owner, name, label in STAGES:
        if owners[owner] is not None and hasattr(owners[owner], name):
            times.wrap(owners[owner], name, label)
    times.wrap(engine, "step", "step")
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    prompt = [f"Tell me a story about dragon number {i}." for i in range(batch)]
    llm.generate(prompt, params, use_tqdm=False)
    times.seconds.clear()
    steps_before = engine.counters["steps"]
    for _ in range(rounds):
        llm.generate(prompt, params, use_tqdm=False)
    steps = engine.counters["steps"] - steps_before
    return {label: s / steps * 1e6 for label, s in times.seconds.items()}, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="default: the bundled GGUF")
    parser.add_argument("--batch", type=int, default=1, help="requests decoding together")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if args.batch < 1 or args.max_tokens < 1 or args.rounds < 1:
        parser.error("--batch, --max-tokens and --rounds take positive counts")

    from specdec import LLM
    from specdec.bench.settle import settled

    llm = settled(LLM(model=args.model) if args.model else LLM())
    per_step, steps = measure(llm, args.max_tokens, args.rounds, args.batch)
    stats = llm.stats()
    print(f"{isa.describe()}; {stats['weight_layout']}, {stats['threads']} threads, "
          f"{steps} steps of {args.batch} request(s) decoding together")
    print(f"{'step':28s} {per_step['step']:8.1f} µs")
    for _, _, label in STAGES[:5] + (("", "", LAYERS),) + STAGES[5:]:
        if label in per_step:
            print(f"{label:28s} {per_step[label]:8.1f} µs")
    host = per_step["step"] - per_step.get(LAYERS, 0.0) - per_step.get("  LM head", 0.0)
    print(f"{'host (step - layers - head)':28s} {host:8.1f} µs")


if __name__ == "__main__":
    main()
