"""The fused verify op's share of a target verify step through ExecuTorch, single thread.

Exports random-weight targets (and a draft) at V=32000, K=4 with XNNPACK -- a toy one and one of
realistic proportions for the vocabulary (dim 1024, 8 layers: 168M parameters, small for a
32000-token target) -- then times in one process: the target's `verify` method (model over K+1
tokens + the verify op), its `logits` method over the same K+1 tokens (the model alone), and the
verify op alone (`verify.pte`), greedy and sampled with the full filter chain. The share is
op / verify step.
Usage: python bench/bench_pte.py [--write docs/BENCHMARKS.md] [--dir CACHE_DIR]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

import torch

import spec_edge
from spec_edge.export import ModelConfig, build_model, export_pair
from spec_edge.runtime import PteSpeculativeDecoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import timeit_us, write_section  # noqa: E402

K, V = 4, 32000
TARGETS = [ModelConfig(dim=256, n_layers=4, n_heads=4, vocab_size=V, max_context_len=256),
           ModelConfig(dim=1024, n_layers=8, n_heads=16, vocab_size=V, max_context_len=256)]
DRAFT = ModelConfig(dim=64, n_layers=1, n_heads=2, vocab_size=V, max_context_len=256)


def target_label(config: ModelConfig) -> str:
    params = sum(p.numel() for p in build_model(config, seed=1).parameters())
    return f"dim {config.dim}, {config.n_layers} layers ({params / 1e6:.0f}M params)"


def measure(out: Path) -> list[tuple[str, float, float, float]]:
    """(mode, verify step us, model alone us, op alone us) for the programs in `out`."""
    dec = PteSpeculativeDecoder(out)
    from executorch.runtime import Runtime
    verify_program = Runtime.get().load_program((out / "verify.pte").read_bytes())  # outlives its method
    verify_only = verify_program.load_method("verify")
    # Worst case for the op's reads: every draft token accepted. The tokens follow the target's
    # own greedy choices and the draft logits equal the target's, so greedy and sampled
    # verification both keep all K and read all 2K+1 rows.
    pos = torch.tensor([8])
    tokens = torch.tensor([[7]])
    for _ in range(K):
        logits = dec.target_logits(tokens, pos)
        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], 1)
    target_logits = dec.target_logits(tokens, pos)
    draft_logits = target_logits[:, :K].contiguous()
    rows = []
    for label, T, f in [("greedy", 0.0, spec_edge.Filters()),
                        ("T 0.8, top-k 50, top-p 0.95, min-p 0.05, penalty 1.1", 0.8,
                         spec_edge.Filters(50, 0.95, 0.05, 1.1))]:
        sampling = dec.sampling_inputs(T, f, tokens[0].tolist() * 8, seed=1, offset=0)
        n = int(verify_only.execute([target_logits, draft_logits, tokens[:, 1:], *sampling])[0][0])
        assert n == K, f"expected every draft token accepted, got {n}"
        step = timeit_us(lambda: dec.target["verify"].execute([tokens, pos, draft_logits, *sampling]))
        model = timeit_us(lambda: dec.target_logits(tokens, pos))
        op = timeit_us(lambda: verify_only.execute([target_logits, draft_logits, tokens[:, 1:], *sampling]))
        rows.append((label, step, model, op))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--dir", type=Path, help="reuse/export the programs here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = args.dir or Path(tempfile.mkdtemp())
    rows = []
    for config in TARGETS:
        out = root / f"dim{config.dim}_layers{config.n_layers}"
        if not (out / "manifest.json").exists():
            export_pair(build_model(config, seed=1), config, build_model(DRAFT, seed=2), DRAFT, K, out)
        rows += [(target_label(config), *row) for row in measure(out)]
    lines = [
        f"## The fused verify step through ExecuTorch (`bench/bench_pte.py`)\n",
        f"Single thread, {platform.processor() or platform.machine()}, random-weight targets at V={V} "
        f"(XNNPACK, fp32), K={K}, every draft token accepted (the op reads all 2K+1 rows). Medians "
        "in microseconds. Real 32000-token targets (1B parameters and up) are larger still, so the "
        "share is smaller there.\n",
        "| target | mode | target verify step us | model alone (logits method) us | verify op alone (verify.pte) us | op share of the step |",
        "|---|---|---|---|---|---|",
    ]
    for target, label, step, model, op in rows:
        lines.append(f"| {target} | {label} | {step:.0f} | {model:.0f} | {op:.1f} | {100 * op / step:.2f}% |")
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_section(args.write, "bench_pte", body)


if __name__ == "__main__":
    main()
