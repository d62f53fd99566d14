"""Drafters side by side: target-only decoding, the draft model, prompt lookup and the hybrid, each
with a fixed K, an adaptive K under the default costs and one under the costs measured on this
machine (what `spec-edge-run --calibrate` prints), on three workloads: continuing code
(held-out prompts, as `make demo`), editing code (the prompt holds a function and asks for it
again with one name changed: most of the output repeats the prompt; the real pair, an instruct
model, is asked in its chat template) and free text. The C++ runner (NativeRunner), greedy;
each setting decodes every prompt speculatively and target-only in turn, so that its ratio
compares like with like on a shared machine.

Usage: python bench/bench_drafters.py [--pair default|real] [--k K] [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from tqdm import tqdm

import spec_edge
from spec_edge.demo import DEFAULT_PAIR, exported_pair
from spec_edge.drafters import Drafting
from spec_edge.stats import GenerationStats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import write_section  # noqa: E402

# K per drafter: fixed; adaptive with the default costs; adaptive with the costs measured here
# (NativeRunner.measure_step_costs, what spec-edge-run --calibrate prints)
DEFAULT_COSTS = Drafting()
K_CHOICES = ("fixed", "adaptive", "adaptive, measured costs")
SETTINGS = [(drafter, k) for drafter in ("model", "lookup", "hybrid") for k in K_CHOICES]
FUNCTIONS = [
    ('def mean_and_spread(values):\n    """The mean of `values` and their largest distance from it."""\n'
     '    total = 0.0\n    for value in values:\n        total += value\n    mean = total / len(values)\n'
     '    spread = max(abs(value - mean) for value in values)\n    return mean, spread\n', "values", "samples"),
    ('def read_records(path, separator=","):\n    """The lines of the file at `path`, split at `separator`."""\n'
     '    records = []\n    with open(path) as handle:\n        for line in handle:\n'
     '            line = line.strip()\n            if line:\n                records.append(line.split(separator))\n'
     '    return records\n', "records", "rows"),
    ('class Counter:\n    """Counts how often each key was added."""\n\n    def __init__(self):\n'
     '        self.counts = {}\n\n    def add(self, key):\n        self.counts[key] = self.counts.get(key, 0) + 1\n\n'
     '    def most_common(self):\n        return max(self.counts, key=self.counts.get)\n', "counts", "tally"),
]
TEXT = [
    "The printing press changed how knowledge spread across Europe. Before it, books were copied by hand,",
    "A good error message says what went wrong, where it happened and what the reader can do about it.",
    "Rivers carve valleys over millions of years, carrying sand and stones from the mountains to the sea.",
]


def edit_prompt(source: str, old: str, new: str) -> str:
    """The function, then a request for it again with one name changed, and the start of the answer."""
    header = source.split("\n", 1)[0].replace(old, new)
    return f"{source}\n\n# The same code with `{old}` renamed to `{new}`:\n{header}\n"


def chat_edit_prompt(chat_template, source: str, old: str, new: str) -> str:
    """The same request in an instruct model's chat template (transformers' tokenizer of the pair)."""
    request = f"Rename `{old}` to `{new}` in this code. Reply with the whole code only.\n\n```python\n{source}```"
    return chat_template.apply_chat_template([{"role": "user", "content": request}], tokenize=False,
                                             add_generation_prompt=True)


def workloads(pair: str, out: Path, tokenizer) -> dict[str, list[list[int]]]:
    if pair == "real":
        from transformers import AutoTokenizer
        from spec_edge.demo_real import PROMPTS
        code = PROMPTS
        chat = AutoTokenizer.from_pretrained(out)
        edits = [chat_edit_prompt(chat, *f) for f in FUNCTIONS]
    else:
        code = json.loads((DEFAULT_PAIR / "prompts.json").read_text())[:4]
        edits = [edit_prompt(*f) for f in FUNCTIONS]
    return {"continuing code": [tokenizer.encode(t) for t in code],
            "editing code": [tokenizer.encode(t) for t in edits],
            "free text": [tokenizer.encode(t) for t in TEXT]}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pair", choices=["default", "real"], default="default")
    parser.add_argument("--max-new", type=int, default=128)
    parser.add_argument("--k", type=int, help="K, and adaptive K's most (default: the exported K)")
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    if args.pair == "real":
        from spec_edge.demo_real import exported
        out = exported()
    else:
        out = exported_pair(DEFAULT_PAIR, Path("build/demo"))
    tokenizer = spec_edge.NativeTokenizer(out / "tokenizer.json")
    prompts = workloads(args.pair, out, tokenizer)
    eos = tokenizer.eos_ids
    measured = spec_edge.NativeRunner(out, k=args.k).measure_step_costs()
    rows = []
    for drafter, k_choice in tqdm(SETTINGS, desc="settings"):
        costs = {} if k_choice != K_CHOICES[2] else dict(draft_step_cost=measured["draft_step_cost"],
                                                          verify_costs=measured["verify_costs"])
        runner = spec_edge.NativeRunner(out, k=args.k, drafter=drafter, adaptive_k=k_choice != "fixed", **costs)
        for workload, ids in prompts.items():
            spec, base = GenerationStats(accepted_histogram=[0] * (runner.k + 1)), GenerationStats()
            for prompt in ids:
                max_new = min(args.max_new, runner.max_context_len - len(prompt) - runner.k - 1)
                got = runner.generate(prompt, max_new, eos_token_id=eos)
                spec.add(runner.stats)
                want = runner.generate(prompt, max_new, speculative=False, eos_token_id=eos)
                base.add(runner.stats)
                assert got == want, f"{drafter}: greedy output differs from target-only decoding"
            rows.append((workload, drafter, k_choice, spec, base))
        k, max_k = runner.k, runner.max_k
        del runner
        gc.collect()
    table = ["| workload | drafter | K | tokens/s | target-only tokens/s | speedup | acceptance | "
             "rounds: model / lookup / target alone |", "|---|---|---|---|---|---|---|---|"]
    for workload, drafter, k_choice, spec, base in sorted(rows, key=lambda r: list(prompts).index(r[0])):
        table.append(f"| {workload} | {drafter} | {k_choice} | {spec.tokens_per_second:.1f} | "
                     f"{base.tokens_per_second:.1f} | {spec.tokens_per_second / base.tokens_per_second:.2f}x | "
                     f"{spec.acceptance_rate:.2f} | {spec.model_rounds} / {spec.lookup_rounds} / {spec.plain_steps} |")
    name = "the shipped default pair" if args.pair == "default" else "the Qwen2.5-Coder pair of `make demo-real`"
    body = "\n".join([f"## Drafters on {name} (`bench/bench_drafters.py --pair {args.pair}`)\n",
                      f"The C++ runner, greedy, up to {args.max_new} new tokens per prompt (fewer where the context ends "
                      f"or the model does), K {k} (fixed, and adaptive K's most; the programs were exported for "
                      f"{max_k}); every output identical to target-only decoding (checked). Adaptive K's "
                      f"default costs: a draft step {DEFAULT_COSTS.draft_step_cost}, the verify step 1 + "
                      f"{DEFAULT_COSTS.verify_row_cost} K decode steps; measured here, at {measured['context']} "
                      f"positions of context: a draft step {measured['draft_step_cost']:.3f}, the verify step with "
                      f"K = 1..{k} proposals {', '.join(f'{c:.2f}' for c in measured['verify_costs'])}.\n", *table])
    print(body)
    if args.write:
        write_section(args.write, f"bench_drafters_{args.pair}", body)


if __name__ == "__main__":
    main()
