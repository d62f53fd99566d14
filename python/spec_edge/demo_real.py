"""`make demo-real`: speculative decoding of a real pair, Qwen2.5-Coder 0.5B drafting for 1.5B.

The GGUF files come from `make fetch-models` (build/models, checked against pinned hashes). They
are exported once to 4-bit programs (8-bit dynamic activations, 4-bit weights in groups of 32,
the target's as its file has them, 4-bit token embeddings; cached: a program made from the
same file with the same settings is reused), then code prompts are completed through the C++
runner (spec_edge.NativeRunner), the text encoded and decoded by the runner's own tokenizer. Prints the same report as `make demo`:
the text, identity with target-only decoding through the same target.pte, tokens/s of both,
acceptance and the time split, greedy and sampled, at the best K of a greedy sweep.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from .demo import quiet_dependencies, report, run
from .ops import Filters

MODELS = Path("build/models")
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct.gguf"
# The export the demo and bench/bench_real_pair.py share (one set of programs in the cache): the
# target keeps the file's 4-bit weights (perplexity +0.84% from the source where re-quantizing
# them costs +6.8%) and puts its output layer in 4 bits too (+0.95%, but 8% faster speculative
# decoding); the draft keeps the whole vocabulary: one over the 49,152 tokens most frequent in
# Python sources ran 5-15% faster beside it on the code prompts, but its K sweep's speedup was
# no higher (the verify step sets it) and it suits code only. Its weights stay 4-bit in groups
# of 32: groups of 64 or 128 shorten its step by 18-29% but lose as much in acceptance (no size
# won in all three runs), and 8-bit weights make it slower (docs/BENCHMARKS.md). Its caches stay
# float32, as every real-pair figure was measured, until bench-real measures float16's (the
# GGUF default).
EXPORT = dict(k=8, max_context_len=2048, quantize="8da4w", group_size=32, quantize_embedding="4,32",
              keep_gguf_precision=True, four_bit_output=True, draft_vocab=None, kv_cache="fp32")
PROMPTS = [
    'def quicksort(items):\n    """Sort a list of numbers with quicksort and return a new list."""\n',
    'import json\n\n\ndef load_config(path, defaults):\n    """Read a JSON config file and fill in missing '
    'keys from defaults."""\n',
    'class LRUCache:\n    """A least-recently-used cache holding at most `capacity` items."""\n\n'
    '    def __init__(self, capacity):\n',
    "#include <vector>\n\n// Index of `target` in the sorted vector `v`, or -1 when it is absent.\n"
    "int binary_search(const std::vector<int>& v, int target) {\n",
]
SAMPLED = dict(temperature=0.8, filters=Filters(top_p=0.95), seed=1)


def exported(models: Path = MODELS, out: Path = Path("build/real/qwen-coder"), reuse_target: Path | None = None,
             **settings) -> Path:
    """The pair's programs in ``out``: exported once, reused while the files and settings match.
    ``settings`` override EXPORT's (``draft_vocab=None``: a draft over the whole vocabulary;
    ``four_bit_output=False``: the target's output layer 8-bit, as the file keeps it above 5 bits;
    that and ``keep_gguf_precision=False``: the target's weights quantized again); ``reuse_target``:
    a directory whose target.pte (same file, same settings) is linked in rather than exported again."""
    from .gguf_checkpoint import export_gguf_pair
    missing = [name for name in (TARGET, DRAFT) if not (models / name).is_file()]
    if missing:
        raise SystemExit(f"{models}: {', '.join(missing)} absent; `make fetch-models` downloads them")
    if reuse_target is not None and not (out / "manifest.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        for name in ("target.pte", "manifest.json"):  # export_pair checks both before it reuses the program
            (out / name).unlink(missing_ok=True)
            os.link(reuse_target / name, out / name)
    with quiet_dependencies():
        return export_gguf_pair(models / TARGET, models / DRAFT, out_dir=out, **{**EXPORT, **settings})


def describe_export(**settings) -> str:
    """EXPORT (with ``settings`` over it) in words, for reports."""
    e = {**EXPORT, **settings}
    words = [f"{e['quantize']}, group {e['group_size']}, embeddings {e['quantize_embedding']}"]
    if e["keep_gguf_precision"]:
        words.append(f"the target's 4-bit weights as the file has them, its output layer "
                     f"{'4' if e['four_bit_output'] else '8'}-bit")
    if e["draft_vocab"]:
        words.append(f"a draft over {e['draft_vocab']:,} frequent tokens")
    return ", ".join(words) + f", context {e['max_context_len']}"


def runner(out: Path, k: int):
    from .native_runner import NativeRunner
    start = time.monotonic()
    with quiet_dependencies():
        decoder = NativeRunner(out, k=k)
    return decoder, time.monotonic() - start


def best_k(out: Path, prompts: list[list[int]], max_new: int, eos: list[int]) -> int:
    """The K (1..the exported one) with the most greedy speculative tokens/s over ``prompts``."""
    speeds = {}
    for k in range(1, EXPORT["k"] + 1):
        decoder, _ = runner(out, k)
        _, spec, _ = run(decoder, prompts, max_new, eos, f"K={k}", target_only=False)
        speeds[k] = spec.tokens_per_second
        del decoder
    print("greedy K sweep, speculative tokens/s: " + ", ".join(f"K={k} {v:.1f}" for k, v in speeds.items()))
    return max(speeds, key=speeds.get)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=Path, default=MODELS, help="where `make fetch-models` put the GGUF files")
    parser.add_argument("--cache", type=Path, default=Path("build/real/qwen-coder"), help="where the programs go")
    parser.add_argument("--k", type=int, help=f"draft tokens per round (default: the best of 1..{EXPORT['k']})")
    parser.add_argument("--max-new", type=int, default=96)
    args = parser.parse_args(argv)
    from . import NativeTokenizer, __version__, active_isa

    out = exported(args.models, args.cache)
    tokenizer = NativeTokenizer(out / "tokenizer.json")
    eos = tokenizer.eos_ids
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    k = args.k or best_k(out, prompts, args.max_new, eos)
    decoder, load_s = runner(out, k)
    print(f"spec_edge {__version__} real-pair demo: {TARGET} drafted by {DRAFT}, exported to 4-bit programs "
          f"({describe_export()}), "
          f"K={k}, spec_edge ops on '{active_isa()}', the C++ runner (loaded in {load_s:.1f} s)")

    greedy_outputs, spec, base = run(decoder, prompts, args.max_new, eos, "greedy")
    for text, (completion, _) in list(zip(PROMPTS, greedy_outputs))[:2]:
        print("\n" + "-" * 72 + f"\n{text}\033[1m{tokenizer.decode(completion)}\033[0m")
    print("-" * 72)
    identical = all(s == b for s, b in greedy_outputs)
    print(f"greedy speculative output identical to target-only decoding: {'yes' if identical else 'NO'}")
    report("greedy", spec, base, k)
    _, sspec, sbase = run(decoder, prompts, args.max_new, eos, "sampled", **SAMPLED)
    report("sampled (T=0.8, top-p 0.95)", sspec, sbase, k)
    if not identical:
        raise SystemExit("greedy speculative output differs from target-only decoding")


if __name__ == "__main__":
    main()
