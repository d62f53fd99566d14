"""End-to-end speculative decoding on the shipped default pair through ExecuTorch.

One process: the default draft/target checkpoints exported once (the demo's cache), held-out
code prompts completed target-only (target.pte's decode_step) and speculatively (draft.pte's
draft_step, target.pte's fused verify step) for K = 1..8, greedy; then sampled (T 0.8, top-p
0.95) at the best K. The loop is the C++ runner's (spec_edge.NativeRunner, what runs on the
device; --python-loop: spec_edge.runtime.PteSpeculativeDecoder). Reports tokens/s, the speedup over target-only decoding through the same
target.pte, the acceptance per draft token, and the share of a round spent in spec_edge's ops
(the verify op and the K sample ops, timed alone on the same shapes through the same kernels).
Usage: python bench/bench_pair.py [--write docs/BENCHMARKS.md] [--cache build/demo] [--python-loop]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tqdm import tqdm

import spec_edge
from spec_edge.demo import DEFAULT_PAIR, MAX_K, exported_pair, per_token_acceptance, precision, run
from spec_edge.runtime import PteSpeculativeDecoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import timeit_us, write_section  # noqa: E402

SAMPLED = dict(temperature=0.8, filters=spec_edge.Filters(top_p=0.95), seed=1)


def op_us_per_round(dec: PteSpeculativeDecoder, prompt: list[int], k: int, sampling: dict) -> float:
    """The verify op over [K+1, V] target rows and the K sample ops of the draft steps, on real
    logits of the pair, called as the programs call them (torch.ops over the same C++ core, with
    the programs' <sampling> tensors; no Python wrapper in the timed call)."""
    logits = dec.target_logits(torch.tensor([prompt[:k + 1]]), torch.tensor([0]))
    draft = logits[:, :k].contiguous()
    row = draft[:, 0].contiguous()
    tokens = torch.tensor([prompt[1:k + 1]])
    T, top_k, top_p, min_p, penalty, prev, seed, offset = dec.sampling_inputs(
        sampling.get("temperature", 0.0), sampling.get("filters", spec_edge.Filters()), prompt, 1, 0)
    ops = torch.ops.spec_edge
    verify = timeit_us(lambda: ops.verify(logits, draft, tokens, T, seed, offset, None, top_k, top_p, min_p,
                                          penalty, prev))
    sample = timeit_us(lambda: ops.sample(row, T, seed, offset, top_k, top_p, min_p, penalty, prev))
    return verify + k * sample


def pair_workload(parser: argparse.ArgumentParser):
    """The end-to-end benchmarks' common arguments and workload: (args, the exported default
    pair's directory, held-out prompts as ids, the end-of-text id)."""
    parser.add_argument("--write", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("build/demo"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=128)
    args = parser.parse_args()
    out = exported_pair(DEFAULT_PAIR, args.cache)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    prompts = [tokenizer.encode(t).ids for t in json.loads((DEFAULT_PAIR / "prompts.json").read_text())]
    return args, out, prompts[:args.prompts], tokenizer.token_to_id("<|endoftext|>")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python-loop", action="store_true", help="the Python .pte loop, not the C++ runner")
    args, out, prompts, eos = pair_workload(parser)
    decoder = PteSpeculativeDecoder if args.python_loop else spec_edge.NativeRunner
    programs = PteSpeculativeDecoder(out)  # the pair's logits for timing the ops alone
    rows = []
    for k in tqdm(range(1, MAX_K + 1), desc="K sweep (greedy)"):
        dec = decoder(out, k=k)
        # Target-only decoding alternates with speculative decoding prompt by prompt, at every K,
        # so both see the same machine (a shared machine's speed drifts within a run).
        _, spec, base = run(dec, prompts, args.max_new, eos, f"K={k}")
        share = op_us_per_round(programs, prompts[0], k, {}) * 1e-6 * spec.rounds / (spec.draft_seconds + spec.target_seconds)
        rows.append((k, spec, base, share))
    best = max(rows, key=lambda r: r[1].tokens_per_second / r[2].tokens_per_second)
    k = best[0]
    dec = decoder(out, k=k)
    _, sspec, sbase = run(dec, prompts, args.max_new, eos, f"sampled K={k}", **SAMPLED)
    sshare = (op_us_per_round(programs, prompts[0], k, SAMPLED) * 1e-6 * sspec.rounds
              / (sspec.draft_seconds + sspec.target_seconds))
    training = json.loads((DEFAULT_PAIR / "training.json").read_text())

    def row(mode, k, spec, base, share):
        return (f"| {mode} | {k} | {per_token_acceptance(spec.accepted_histogram):.3f} | "
                f"{spec.new_tokens / spec.rounds:.2f} | {spec.tokens_per_second:.0f} | {base.tokens_per_second:.0f} | "
                f"**{spec.tokens_per_second / base.tokens_per_second:.2f}x** | {100 * share:.2f}% |")

    lines = [
        "## End to end on the default pair through ExecuTorch (`bench/bench_pair.py`)\n",
        f"{platform.processor() or platform.machine()}, ExecuTorch {_et_version()} + XNNPACK ({precision(out)}); "
        f"target {training['target_params'] / 1e6:.1f}M params ({4 * training['target_params'] / 2**20:.0f} MiB "
        f"of fp32 weights), draft {training['draft_params'] / 1e6:.2f}M distilled, V={dec.vocab_size}; "
        f"{len(prompts)} held-out stdlib prompts x {args.max_new} new tokens; the loop: "
        f"{'the Python .pte loop' if args.python_loop else 'the C++ runner (spec_edge.NativeRunner)'}. "
        "Speculative and target-only "
        "decoding run through the same target.pte (verify step vs decode_step). Acceptance: per draft "
        "token (accepted / (accepted + rejections)). Op share: the verify op plus the K draft-side sample "
        "ops, timed alone on the pair's logits, over the measured round time.\n",
        "| mode | K | acceptance | tokens per round | speculative tokens/s | target-only tokens/s | speedup "
        "| spec_edge ops share of a round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [row("greedy", *r) for r in rows]
    lines.append(row("sampled T 0.8, top-p 0.95", k, sspec, sbase, sshare))
    lines.append(f"\nBest K (greedy): {k}.")
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_section(args.write, "bench_pair", body)


def _et_version() -> str:
    from importlib.metadata import version
    return version("executorch")


if __name__ == "__main__":
    main()
