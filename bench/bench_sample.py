"""The sampling pipeline next to its CPU peers, single thread, one process.

At V in {50257, 128256} and B in {1, 8}: the full pipeline (repetition penalty 1.1 over 64
previous tokens, T 0.8, top-k 50, top-p 0.95, min-p 0.05), top-p 0.95 alone, and unfiltered
(T 0.8), each through
  - spec_edge.sample,
  - the transformers processor chain + torch.multinomial (what `generate()` runs),
  - llama.cpp's sampler chain with the same filters (llama-cpp-python; apply only: the candidate
    array is refilled outside the timed region),
  - a sort-based torch eager implementation,
and the bytes-read bound (a torch sum over the logits, same run). Logits are 3 * randn.
Usage: python bench/bench_sample.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import spec_edge

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import timeit_us, write_section  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from filter_ref import transformers_processors  # noqa: E402  (the chain the tests compare with)

T, TOP_K, TOP_P, MIN_P, PENALTY, HISTORY = 0.8, 50, 0.95, 0.05, 1.1, 64
PIPELINES = {
    "full pipeline": dict(top_k=TOP_K, top_p=TOP_P, min_p=MIN_P, penalty=PENALTY),
    "top-p 0.95": dict(top_k=0, top_p=TOP_P, min_p=0.0, penalty=1.0),
    "unfiltered": dict(top_k=0, top_p=1.0, min_p=0.0, penalty=1.0),
}


def transformers_sampler(cfg, prev):
    chain = transformers_processors(T, cfg["top_k"], cfg["top_p"], cfg["min_p"], cfg["penalty"])
    return lambda logits: torch.multinomial(torch.softmax(chain(prev, logits.clone()), -1), 1)


def sort_based_sampler(cfg, prev):
    """The textbook torch implementation: gather/scatter penalty, topk, sort + cumsum top-p."""
    def run(logits):
        x = logits.clone()
        if cfg["penalty"] != 1.0:
            s = x.gather(1, prev)
            x.scatter_(1, prev, torch.where(s < 0, s * cfg["penalty"], s / cfg["penalty"]))
        x = x / T
        if cfg["top_k"]:
            kth = torch.topk(x, cfg["top_k"], -1).values[:, -1:]
            x = x.masked_fill(x < kth, -float("inf"))
        if cfg["top_p"] < 1.0:
            sorted_x, order = torch.sort(x, descending=True)
            probs = sorted_x.softmax(-1)
            remove = probs.cumsum(-1) - probs >= cfg["top_p"]
            x = x.masked_fill(remove.scatter(1, order, remove), -float("inf"))
        probs = x.softmax(-1)
        if cfg["min_p"]:
            probs = probs.masked_fill(probs < cfg["min_p"] * probs.max(-1, keepdim=True).values, 0)
        return torch.multinomial(probs, 1)
    return run


class LlamaCppChain:
    """llama.cpp's sampler chain over a llama_token_data_array, one sequence at a time."""

    def __init__(self, L, cfg, prev_row, V):
        self.L, self.V = L, V
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        add = lambda s: L.llama_sampler_chain_add(self.chain, s)
        if cfg["penalty"] != 1.0:
            add(L.llama_sampler_init_penalties(V, HISTORY, cfg["penalty"], 0.0, 0.0))
        if cfg["top_k"]:
            add(L.llama_sampler_init_top_k(cfg["top_k"]))
        if cfg["top_p"] < 1.0:
            add(L.llama_sampler_init_top_p(cfg["top_p"], 1))
        if cfg["min_p"]:
            add(L.llama_sampler_init_min_p(cfg["min_p"], 1))
        add(L.llama_sampler_init_temp(T))
        add(L.llama_sampler_init_dist(1234))
        for t in prev_row:
            L.llama_sampler_accept(self.chain, int(t))
        self.array_type = L.llama_token_data * V
        self.buffer = self.array_type()
        self.cur = L.llama_token_data_array(ctypes.cast(self.buffer, ctypes.POINTER(L.llama_token_data)),
                                            V, -1, False)

    def candidates(self, row):
        return self.array_type(*[self.L.llama_token_data(i, float(v), 0.0) for i, v in enumerate(row.tolist())])

    def time_apply_us(self, templates, repeats=15) -> float:
        """Median over repeats of the apply time for all rows (refills untimed)."""
        samples = []
        for _ in range(repeats):
            total = 0.0
            for tmpl in templates:
                ctypes.memmove(self.buffer, tmpl, ctypes.sizeof(tmpl))
                self.cur.size, self.cur.selected, self.cur.sorted = self.V, -1, False
                t0 = time.perf_counter()
                self.L.llama_sampler_apply(self.chain, ctypes.byref(self.cur))
                total += time.perf_counter() - t0
            samples.append(total * 1e6)
        return statistics.median(samples)


def load_llama_cpp():
    try:
        import llama_cpp
        return llama_cpp
    except Exception as error:  # optional peer: installed by `make bench`
        print(f"llama.cpp peer skipped: {error}", file=sys.stderr)
        return None


def run():
    L = load_llama_cpp()
    g = torch.Generator().manual_seed(0)
    rows = []
    for V in (50257, 128256):
        for B in (1, 8):
            logits = 3 * torch.randn(B, V, generator=g)
            prev = torch.randint(0, V, (B, HISTORY), generator=g)
            templates = None
            for name, cfg in PIPELINES.items():
                filters = spec_edge.Filters(cfg["top_k"], cfg["top_p"], cfg["min_p"], cfg["penalty"], prev)
                args = (logits, torch.tensor(T), torch.tensor(1), torch.tensor(0), *filters.op_args())
                ours = timeit_us(lambda: torch.ops.spec_edge.sample(*args))
                hf = transformers_sampler(cfg, prev)
                theirs = timeit_us(lambda: hf(logits), min_time=0.5, repeats=5)
                sort_based = sort_based_sampler(cfg, prev)
                eager = timeit_us(lambda: sort_based(logits), min_time=0.5, repeats=5)
                llama = None
                if L is not None:
                    chains = [LlamaCppChain(L, cfg, prev[b].tolist(), V) for b in range(B)]
                    templates = templates or [chains[0].candidates(logits[b]) for b in range(B)]
                    llama = sum(c.time_apply_us([t], repeats=15) for c, t in zip(chains, templates))
                bound = timeit_us(lambda: logits.sum())
                rows.append((name, f"B={B}, V={V}", ours, theirs, llama, eager, bound, B * V * 4))
    return rows


def table(rows) -> str:
    out = [
        f"Single thread, ISA path `{spec_edge.active_isa()}`, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}. Medians in microseconds; spec_edge, transformers and the sort-based "
        "torch sampler include the Python/dispatcher call; llama.cpp is its `llama_sampler_apply` "
        "alone (candidate array refilled outside the timed region, one call per row). Full pipeline: "
        f"penalty {PENALTY} over {HISTORY} previous tokens, T {T}, top-k {TOP_K}, top-p {TOP_P}, "
        f"min-p {MIN_P}.",
        "",
        "| pipeline | shape | spec_edge us | transformers + multinomial us | llama.cpp apply us | "
        "sort-based torch us | bytes-read bound us | vs transformers | vs llama.cpp | vs bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, ours, theirs, llama, eager, bound, _ in rows:
        llama_s = f"{llama:.1f}" if llama is not None else "n/a"
        vs_llama = f"{llama / ours:.1f}x faster" if llama is not None else "n/a"
        out.append(f"| {name} | {shape} | {ours:.1f} | {theirs:.1f} | {llama_s} | {eager:.1f} | {bound:.1f} | "
                   f"{theirs / ours:.0f}x faster | {vs_llama} | {ours / bound:.1f}x |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="update this markdown file's bench_sample section")
    args = parser.parse_args()
    torch.set_num_threads(1)
    body = "## The sampling pipeline next to its peers (`bench/bench_sample.py`)\n\n" + table(run())
    print(body)
    if args.write:
        write_section(args.write, "bench_sample", body)


if __name__ == "__main__":
    main()
