"""How close the exported 4-bit target is to the model the user brought: perplexity and top-1
agreement on held-out text (Python standard library sources and prose), for

- the source model: transformers on the dequantized GGUF file (fp32),
- llama.cpp on the GGUF file itself (`llama-perplexity`, bench/llama_cpp.py builds it),
- spec_edge's target.pte (the `make demo-real` export: 8da4w, 4-bit embeddings), through ExecuTorch.

All three score the same tokens the way `llama-perplexity` does: the text in chunks of --context
tokens, each chunk scoring its second half (every scored token sees at least half a chunk).

Usage: python bench/bench_quality.py [--write docs/BENCHMARKS.md] [--chunks 8] [--context 512]
           [--requantize | --eight-bit-output --cache DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import sysconfig
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

import spec_edge
from spec_edge.demo_real import MODELS, TARGET, describe_export, exported
from spec_edge.runtime import PteSpeculativeDecoder

import llama_cpp  # noqa: E402  (bench/, this script's directory)
from bench_verify import write_section  # noqa: E402

TEXTS = ("argparse.py", "LICENSE.txt")  # code and prose
VARIANTS = {  # option: (its section's suffix, the export's settings)
    "requantize": ("_requantized", dict(keep_gguf_precision=False, four_bit_output=False)),
    "eight_bit_output": ("_eight_bit_output", dict(four_bit_output=False))}


def held_out(tokenizer, tokens: int) -> tuple[str, list[int]]:
    """Text of at least ``tokens`` tokens, and its first ``tokens`` ids."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((stdlib / name).read_text() for name in TEXTS)
    ids = tokenizer.encode(text)
    if len(ids) < tokens:
        raise SystemExit(f"the held-out text has {len(ids)} tokens, fewer than {tokens}")
    return text, ids[:tokens]


def scored(logits: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(negative log-likelihoods, argmax) of the chunk's second half, as llama-perplexity scores it."""
    first = len(chunk) // 2
    rows = logits[first:-1].double().log_softmax(-1)
    return -rows.gather(1, chunk[first + 1:, None])[:, 0], rows.argmax(-1)


def pte_logits(decoder: PteSpeculativeDecoder, chunk: torch.Tensor) -> torch.Tensor:
    """The target program's logits over the chunk, K+1 rows per call through its `logits` method."""
    rows = decoder.max_k + 1
    parts = [decoder.target_logits(chunk[None, i:i + rows], torch.tensor([i]))[0] for i in range(0, len(chunk), rows)]
    return torch.cat(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("build/real/qwen-coder"))
    parser.add_argument("--llama-cpp", type=Path, default=Path("build/llama_cpp"))
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--requantize", action="store_true",
                         help="measure a target whose 4-bit weights are quantized again, 8da4w "
                         "(give it its own --cache)")
    variant.add_argument("--eight-bit-output", action="store_true",
                         help="measure a target whose output layer is 8-bit, as the file keeps it above 5 bits "
                         "(give it its own --cache)")
    args = parser.parse_args()
    chosen = next((name for name in VARIANTS if getattr(args, name)), None)
    suffix, settings = VARIANTS[chosen] if chosen else ("", {})
    flag = f" --{chosen.replace('_', '-')}" if chosen else ""
    out = exported(MODELS, args.cache, **settings)
    tokenizer = spec_edge.NativeTokenizer(out / "tokenizer.json")
    text, ids = held_out(tokenizer, args.chunks * args.context)
    chunks = torch.tensor(ids).view(args.chunks, args.context)

    from transformers import AutoModelForCausalLM
    source = AutoModelForCausalLM.from_pretrained(str(MODELS), gguf_file=TARGET, dtype=torch.float32).eval()
    programs = PteSpeculativeDecoder(out)
    nll = {"transformers": [], "spec_edge": []}
    agree = []
    for chunk in tqdm(chunks, desc="chunks"):
        with torch.no_grad():
            want, want_top = scored(source(input_ids=chunk[None]).logits[0], chunk)
        got, got_top = scored(pte_logits(programs, chunk), chunk)
        nll["transformers"].append(want)
        nll["spec_edge"].append(got)
        agree.append((want_top == got_top).double())
    del source
    ppl = {name: math.exp(torch.cat(v).mean().item()) for name, v in nll.items()}
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        ppl["llama.cpp"] = llama_cpp.perplexity(llama_cpp.build(args.llama_cpp), MODELS / TARGET, Path(f.name),
                                                args.context, args.threads, args.chunks)
    top1 = torch.cat(agree).mean().item()
    base = ppl["transformers"]
    body = "\n".join([
        f"## The exported target against its source (`bench/bench_quality.py{flag}`)\n",
        f"`{TARGET}`: perplexity on {args.chunks} chunks x {args.context} tokens of held-out text "
        f"(the Python standard library's {' and '.join(TEXTS)}), each chunk scoring its second half as "
        f"`llama-perplexity` does. target.pte is {'a' if flag else 'the'} `make demo-real` export "
        f"({describe_export(**settings)}).\n",
        "| model | perplexity | against transformers |", "|---|---|---|",
        *(f"| {name} | {value:.4f} | {value / base - 1:+.2%} |" for name, value in
          (("transformers, dequantized GGUF (fp32): the source", base), ("llama.cpp on the GGUF file", ppl["llama.cpp"]),
           ("spec_edge target.pte", ppl["spec_edge"]))),
        "",
        f"Top-1 agreement of target.pte with the source on the scored tokens: {top1:.4f}. target.pte against "
        f"llama.cpp: {ppl['spec_edge'] / ppl['llama.cpp'] - 1:+.2%}.",
    ])
    print(body)
    if args.write:
        write_section(args.write, "bench_quality" + suffix, body)


if __name__ == "__main__":
    main()
