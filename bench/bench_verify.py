"""Verification ops next to torch eager and the bytes-read bound, single thread, one process.

Each op runs on its worst case for reads (every draft token accepted, so all K+1 target rows
are read). The bound is a vectorized torch sum over exactly the bytes the op must read, timed
in the same run. Usage: python bench/bench_verify.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

import spec_edge


def timeit_us(fn, min_time: float = 0.2, repeats: int = 7) -> float:
    """Median over `repeats` of the mean time per call, in microseconds."""
    fn()
    n, elapsed = 1, 0.0
    while elapsed < min_time / repeats:
        n *= 2
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - t0
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


# ---- torch eager implementations of the same contracts ----------------------------------------

def greedy_eager(target, draft_tokens):
    am = target.argmax(-1)
    k = draft_tokens.shape[-1]
    n = int(torch.cumprod((am[:k] == draft_tokens).int(), 0).sum())
    return n, int(am[n])


def accept_eager(p, q, t, u):
    p = p / p.sum(-1, keepdim=True)
    q = q / q.sum(-1, keepdim=True)
    k = t.shape[0]
    idx = torch.arange(k)
    ok = u[:k] * q[idx, t] <= p[idx, t]
    n = int(torch.cumprod(ok.int(), 0).sum())
    dist = (p[n] - q[n]).clamp_min(0) if n < k else p[k]
    cdf = torch.cumsum(dist, 0)
    return n, int(torch.searchsorted(cdf, u[k:] * cdf[-1]).clamp_max(dist.numel() - 1))


def verify_eager(target_logits, draft_logits, draft_tokens, temperature, generator):
    p = torch.softmax(target_logits / temperature, -1)
    q = torch.softmax(draft_logits / temperature, -1)
    B, k = draft_tokens.shape
    u = torch.rand(B, k + 1, generator=generator)
    pt = p[:, :k].gather(-1, draft_tokens[..., None])[..., 0]
    qt = q.gather(-1, draft_tokens[..., None])[..., 0]
    ok = u[:, :k] * qt <= pt
    n = torch.cumprod(ok.int(), 1).sum(1)
    rows = torch.arange(B)
    pn = p[rows, n]
    qn = torch.cat([q, torch.zeros_like(q[:, :1])], 1)[rows, n]  # q at the bonus row is 0
    dist = (pn - qn).clamp_min(0)
    cdf = torch.cumsum(dist, -1)
    nxt = torch.searchsorted(cdf, (u[:, k:] * cdf[:, -1:]).contiguous()).clamp_max(dist.shape[-1] - 1)
    return n, nxt


# ---- cases -------------------------------------------------------------------------------------

def all_accepted_greedy(V, K, g):
    target = torch.randn(K + 1, V, generator=g).softmax(-1)
    return target, target[:K].argmax(-1)


def run(shapes_single, batches, V_batch, K_batch):
    g = torch.Generator().manual_seed(0)
    rows = []
    for V, K in shapes_single:
        target, tokens = all_accepted_greedy(V, K, g)
        assert spec_edge.verify_greedy(target, tokens) == greedy_eager(target, tokens)
        rows.append(("verify_greedy", f"V={V}, K={K}",
                     timeit_us(lambda: spec_edge.verify_greedy(target, tokens)),
                     timeit_us(lambda: greedy_eager(target, tokens)),
                     timeit_us(lambda: target.sum()), (K + 1) * V * 4))
        p = target
        q = target[:K].clone()  # p == q: every token is accepted
        u = torch.rand(K + 1, dtype=torch.float64, generator=g)
        assert int(spec_edge.accept_with_uniforms(p, q, tokens, u).n_accepted) == accept_eager(p, q, tokens, u)[0] == K
        both = torch.cat([p, q])
        rows.append(("accept", f"V={V}, K={K}",
                     timeit_us(lambda: spec_edge.accept_with_uniforms(p, q, tokens, u)),
                     timeit_us(lambda: accept_eager(p, q, tokens, u)),
                     timeit_us(lambda: both.sum()), (2 * K + 1) * V * 4))
    offsets = itertools.count()  # a new offset every call, as in a decoding loop
    for B in batches:
        V, K = V_batch, K_batch
        tl = torch.randn(B, K + 1, V, generator=g)
        dl = tl[:, :K].clone()  # identical draft: every token accepted
        tokens = dl.argmax(-1)
        both = torch.cat([tl, dl], 1)
        rows.append(("verify (T=1)", f"B={B}, V={V}, K={K}",
                     timeit_us(lambda: spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=1,
                                                        offset=next(offsets))),
                     timeit_us(lambda: verify_eager(tl, dl, tokens, 1.0, g)),
                     timeit_us(lambda: both.sum()), B * (2 * K + 1) * V * 4))
    for V in (50257, 128256):
        for B in (1, 8):
            logits = 3 * torch.randn(B, V, generator=g)
            temperature = torch.tensor(0.8)
            rows.append(("sample (unfiltered, T=0.8)", f"B={B}, V={V}",
                         timeit_us(lambda: spec_edge.sample(logits, temperature=temperature, seed=1)),
                         timeit_us(lambda: torch.multinomial(torch.softmax(logits / 0.8, -1), 1, generator=g)),
                         timeit_us(lambda: logits.sum()), B * V * 4))
    return rows


def table(rows) -> str:
    out = [
        f"Single thread (`torch.set_num_threads(1)`), ISA path `{spec_edge.active_isa()}`, "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}. Worst case for "
        "reads (all K draft tokens accepted); `verify` takes a new offset every call, so its times "
        "average over the uniforms. Bound: `torch.sum` over the bytes the op must read, "
        "same run. Times are medians, in microseconds, including the Python/dispatcher call.",
        "",
        "| op | shape | spec_edge us | torch eager us | bytes-read bound us (MB) | vs eager | vs bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for op, shape, ours, eager, bound, nbytes in rows:
        out.append(f"| {op} | {shape} | {ours:.1f} | {eager:.1f} | {bound:.1f} ({nbytes / 1e6:.2f}) | "
                   f"{eager / ours:.1f}x faster | {ours / bound:.2f}x |")
    return "\n".join(out)


def _markers(name: str) -> tuple[str, str]:
    """The comment lines that enclose section ``name`` in a markdown file."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _block(name: str, body: str) -> str:
    begin, end = _markers(name)
    return f"{begin}\n{body}\n{end}"


def read_section(text: str, name: str) -> str | None:
    """The body that write_section wrote under ``name`` in ``text`` (None: there is none)."""
    begin, end = _markers(name)
    if begin + "\n" not in text:
        return None
    return text.split(begin + "\n", 1)[1].split("\n" + end, 1)[0]


def write_subsections(path: Path, name: str, header: str, measured: dict[str, str], names) -> None:
    """Section ``name``: ``header``, then a subsection per name in ``names`` (in that order), each
    the ``measured`` body where there is one, else the one an earlier run wrote (if any)."""
    earlier = read_section(path.read_text() if path.exists() else "", name) or ""
    bodies = {sub: measured.get(sub, read_section(earlier, f"{name}/{sub}")) for sub in names}
    write_section(path, name, "\n".join([header] + [_block(f"{name}/{sub}", body)
                                                    for sub, body in bodies.items() if body is not None]))


def write_section(path: Path, name: str, body: str) -> None:
    begin, end = _markers(name)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = _block(name, body)
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="update this markdown file's sections")
    parser.add_argument("--core-bench", type=Path, help="the spec_edge_bench_core binary (C++ core, every path)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = run([(32000, 4), (128256, 5)], batches=[1, 8, 64], V_batch=32000, K_batch=4)
    sections = {"bench_verify": "## Verification ops through PyTorch (`bench/bench_verify.py`)\n\n" + table(rows)}
    if args.core_bench:
        core = subprocess.run([str(args.core_bench)], check=True, capture_output=True, text=True).stdout
        sections["bench_core"] = (
            "## The core on each CPU path, no framework (`bench/bench_core.cpp`)\n\n"
            "Same worst-case inputs, called directly in C++, and `verify` also with a draft that differs "
            "from the target (target + noise: about half the draft tokens accepted, so most calls "
            "reject and draw from the residual); `verify` takes a new offset every call. The bound is a "
            "float sum over the same bytes in four vectors of independent accumulators (vectorized by "
            "the compiler), same run.\n\n" + core.strip())
    for name, body in sections.items():
        print(body + "\n")
        if args.write:
            write_section(args.write, name, body)


if __name__ == "__main__":
    main()
