"""The C++ runner against the Python loop, on the shipped default pair through ExecuTorch.

Three front ends over the same draft.pte / target.pte and kernels, prompt by prompt in turn (a
shared machine's speed drifts within a run): the Python loop (spec_edge.runtime.
PteSpeculativeDecoder over ExecuTorch's pybindings), spec_edge.NativeRunner (the C++ loop of
runtime_demo/ in this process) and the spec-edge-run CLI (its own process; its --stats-json
times exclude loading). Each decodes speculatively and target-only (--no-spec), greedy and
sampled. Reports tokens/s, the speedup, and the time per round outside the programs (the loop's
own overhead: total minus prefill, draft steps and target steps).
Usage: python bench/bench_runner.py [--write docs/BENCHMARKS.md] [--cache build/demo] [--k 6]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

import spec_edge
from spec_edge.runtime import PteSpeculativeDecoder
from spec_edge.stats import GenerationStats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pair import pair_workload  # noqa: E402
from bench_verify import write_section  # noqa: E402

CLI = Path(spec_edge.__file__).parent / "_lib" / "spec-edge-run"
MODES = {"greedy": {}, "sampled T 0.8, top-p 0.95": dict(temperature=0.8, filters=spec_edge.Filters(top_p=0.95),
                                                           seed=1)}


class Cli:
    """spec-edge-run as a decoder: one process per call, its stats from --stats-json."""

    def __init__(self, model_dir: Path, k: int):
        self.dir, self.k, self.stats = model_dir, k, GenerationStats()

    def generate(self, prompt, max_new, temperature=0.0, filters=spec_edge.Filters(), seed=0, speculative=True,
                 eos_token_id=None):
        with tempfile.TemporaryDirectory() as tmp:
            stats = Path(tmp) / "stats.json"
            flags = ["--model-dir", str(self.dir), "--prompt-ids", ",".join(map(str, prompt)), "--max-new",
                     str(max_new), "--k", str(self.k), "--temperature", str(temperature), "--top-p",
                     str(filters.top_p), "--seed", str(seed), "--stats-json", str(stats)]
            flags += ["--eos", str(eos_token_id)] if eos_token_id is not None else []
            out = subprocess.run([str(CLI), *flags, *([] if speculative else ["--no-spec"])], check=True,
                                 capture_output=True, text=True).stdout
            s = json.loads(stats.read_text())
        self.stats = GenerationStats(**{f: s[f] for f in GenerationStats.__dataclass_fields__})
        return [int(t) for t in out.split()]


def loop_us(s: GenerationStats) -> float:
    """The loop's own time per round (per step when target-only: no rounds)."""
    return 1e6 * (s.total_seconds - s.prefill_seconds - s.draft_seconds - s.target_seconds) / (s.rounds or s.new_tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=6)
    args, out, prompts, eos = pair_workload(parser)
    peers = {"Python loop (PteSpeculativeDecoder)": PteSpeculativeDecoder(out, k=args.k),
             "spec_edge.NativeRunner (C++ loop, in process)": spec_edge.NativeRunner(out, k=args.k),
             "spec-edge-run CLI": Cli(out, args.k)}
    lines = [
        "## The C++ runner against the Python loop (`bench/bench_runner.py`)\n",
        f"The default pair through the same programs and kernels, K={args.k}, {len(prompts)} held-out prompts x "
        f"{args.max_new} new tokens, the three front ends in turn prompt by prompt. Loop overhead: the time per "
        "round outside the programs' calls (building inputs, bookkeeping, streaming the tokens; the CLI "
        "writes them to a pipe), per step when target-only.\n",
        "| mode | front end | speculative tokens/s | target-only tokens/s | speedup | loop overhead per round "
        "(speculative / target-only step) |",
        "|---|---|---|---|---|---|",
    ]
    for mode, sampling in MODES.items():
        totals = {name: (GenerationStats(), GenerationStats()) for name in peers}
        tokens = {}
        for prompt in tqdm(prompts, desc=mode, unit="prompt"):
            for name, dec in peers.items():
                for speculative, total in zip((True, False), totals[name]):
                    got = dec.generate(prompt, args.max_new, speculative=speculative, eos_token_id=eos, **sampling)
                    total.add(dec.stats)
                    tokens.setdefault((tuple(prompt), speculative), got)
                    assert got == tokens[(tuple(prompt), speculative)], f"{name} gave other tokens"
        for name, (spec, base) in totals.items():
            lines.append(f"| {mode} | {name} | {spec.tokens_per_second:.0f} | {base.tokens_per_second:.0f} | "
                         f"{spec.tokens_per_second / base.tokens_per_second:.2f}x | {loop_us(spec):.0f} us / {loop_us(base):.0f} us |")
    lines.append("\nThe three front ends gave identical tokens for every prompt (checked while timing).")
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_section(args.write, "bench_runner", body)


if __name__ == "__main__":
    main()
