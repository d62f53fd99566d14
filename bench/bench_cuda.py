"""The CUDA build next to torch eager and the transformers chain on the same GPU, one process.

At V=128256, K=4 and B in {1, 8, 64}, float32 logits 3 * randn, T 0.8:
  - verify (sampled, unfiltered) against a torch eager speculative-sampling verify (softmax of
    both sides, the ratio test, the residual, torch.multinomial);
  - verify_greedy against torch's argmax;
  - sample, unfiltered, against softmax + torch.multinomial;
  - sample with the full pipeline (penalty 1.1 over 64 previous tokens, T 0.8, top-k 50, top-p
    0.95, min-p 0.05) against the transformers chain + multinomial on the same GPU;
  - the bytes-read bound: the logits' bytes at the bandwidth of a device copy measured in the run.
Every call is timed to its result on the host (a decode step needs the tokens there): spec_edge's
calls include their checks, the upload of the small inputs and the wait for the error report;
the peers end with a synchronize. Medians of wall-clock repeats.
Usage: python bench/bench_cuda.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import spec_edge

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import write_section  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from filter_ref import transformers_processors  # noqa: E402

V, K, T = 128256, 4, 0.8
BATCHES = [1, 8, 64]


def timeit_us(fn, repeats: int = 7, min_time: float = 0.05) -> float:
    """Median over `repeats` of the mean time per call (each ending in a synchronize), in us."""
    fn()
    torch.cuda.synchronize()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            torch.cuda.synchronize()
        if time.perf_counter() - t0 > min_time / repeats:
            break
        n *= 2
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(samples)[len(samples) // 2]


def copy_bandwidth() -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    us = timeit_us(lambda: b.copy_(a))
    return 2 * a.numel() * 4 / (us * 1e-6)


def eager_verify(t, d, tokens, g):
    """Speculative sampling in torch, the textbook way."""
    p, q = torch.softmax(t / T, -1), torch.softmax(d / T, -1)
    B = t.shape[0]
    rows = torch.arange(B, device=t.device)
    pt = p[:, :K].gather(-1, tokens[..., None])[..., 0]
    qt = q.gather(-1, tokens[..., None])[..., 0]
    u = torch.rand(B, K, device=t.device, generator=g)
    n = (u * qt <= pt).int().cumprod(-1).sum(-1)
    at = n.clamp(max=K - 1)
    residual = (p[rows, at] - q[rows, at]).clamp(min=0)
    residual = torch.where((n == K)[:, None], p[:, K], residual)
    return n, torch.multinomial(residual, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="update this markdown file's section")
    args = parser.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    bandwidth = copy_bandwidth()
    name = torch.cuda.get_device_name()
    lines = [
        "## The CUDA build on a GPU (`bench/bench_cuda.py`, run by `bench/gpu_check.sh`)\n",
        f"{name}, torch {torch.__version__}; V={V}, K={K}, float32 logits, T={T}. Times in us per call, "
        "each to its result on the host (spec_edge's include the argument checks, the upload of the "
        f"small inputs and the wait for the error report). Bound: the logits' bytes at the device copy's "
        f"{bandwidth / 1e12:.2f} TB/s, same run.\n",
        "| op | B | spec_edge | peer | peer / spec_edge | bound |",
        "|---|---|---|---|---|---|",
    ]
    for B in BATCHES:
        t = 3 * torch.randn(B, K + 1, V, device="cuda", generator=g)
        d = t[:, :K] + 0.5 * torch.randn(B, K, V, device="cuda", generator=g)
        tokens = d.argmax(-1)
        x = t[:, 0].contiguous()
        prev = torch.randint(0, V, (B, 64), device="cuda", generator=g)
        chain = transformers_processors(T, 50, 0.95, 0.05, 1.1)
        bound = lambda n_bytes: n_bytes / bandwidth * 1e6  # noqa: E731
        filters = spec_edge.Filters(top_k=50, top_p=0.95, min_p=0.05, repetition_penalty=1.1, prev_tokens=prev)
        cases = [
            ("verify (vs torch eager)", lambda: spec_edge.verify(t, d, tokens, T, 1, 0),
             lambda: eager_verify(t, d, tokens, g), (2 * K + 1) * B * V * 4),
            ("verify_greedy (vs torch argmax)", lambda: spec_edge.verify_greedy(t, tokens),
             lambda: t.argmax(-1), (K + 1) * B * V * 4),
            ("sample, unfiltered (vs softmax + multinomial)", lambda: spec_edge.sample(x, T, seed=1, offset=0),
             lambda: torch.multinomial(torch.softmax(x / T, -1), 1, generator=g), B * V * 4),
            ("sample, full pipeline (vs transformers chain + multinomial)",
             lambda: spec_edge.sample(x, T, seed=1, offset=0, filters=filters),
             lambda: torch.multinomial(torch.softmax(chain(prev, x.clone()), -1), 1, generator=g), B * V * 4),
        ]
        for op, ours, peer, n_bytes in cases:
            a, e = timeit_us(ours), timeit_us(peer)
            lines.append(f"| {op} | {B} | {a:.1f} | {e:.1f} | {e / a:.2f}x | {bound(n_bytes):.1f} |")
            print(lines[-1], flush=True)
    body = "\n".join(lines)
    print(body)
    if args.write:
        write_section(args.write, "bench_cuda", body)


if __name__ == "__main__":
    main()
