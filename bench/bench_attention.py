"""spec_edge's attention op through ExecuTorch on one thread and on the runtime's pool (the threads
XNNPACK's kernels run on), in one process: the real target's 28 layers of attention (12 query
heads over 2 KV heads of 128, each layer its own cache) over 1, 5 and 9 rows (a decode step, a
verify step at K=4 and at K=8) as the context grows to 8,192 positions. The pool splits the
query heads between its threads; each head is computed alone, so the outputs are the same bits
(checked). Beside it: the bytes of cache the call must read against this machine's copy
bandwidth (measured here), the same program with float16 caches, and PyTorch's eager
scaled_dot_product_attention over the same caches on the same threads.

Usage: python bench/bench_attention.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch

import spec_edge  # noqa: F401  (registers the ops)
from spec_edge.export import _export, _lower

from bench_verify import write_section  # noqa: E402  (bench/, this script's directory)
from bench_verify_rows import time_ms  # noqa: E402

LAYERS, HEADS, KV_HEADS, DIM = 28, 12, 2, 128  # Qwen2.5-Coder-1.5B's attention
CONTEXTS, ROWS = (128, 512, 2048, 8192), (1, 5, 9)
ops = torch.ops.spec_edge


class Attention(torch.nn.Module):
    """Each layer writes the new rows' keys and values into its cache and attends over it."""

    def __init__(self, max_context: int, dtype: torch.dtype):
        super().__init__()
        for layer in range(LAYERS):
            for name in ("k", "v"):
                self.register_buffer(f"{name}{layer}", torch.zeros(1, max_context, KV_HEADS, DIM, dtype=dtype))

    def forward(self, q, kv, input_pos):
        start = input_pos[0].item()
        out = q
        for layer in range(LAYERS):
            ops.update_cache(kv, getattr(self, f"k{layer}"), start)
            ops.update_cache(kv, getattr(self, f"v{layer}"), start)
            out = ops.attention(out, getattr(self, f"k{layer}"), getattr(self, f"v{layer}"), start)
        return out


def copy_bandwidth() -> float:
    """Bytes per second of a 512 MiB copy (read + write counted), the median of 5."""
    src = torch.ones(64 << 20, dtype=torch.float64)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 8 / (time_ms(lambda: dst.copy_(src), 5) / 1e3)


def sdpa_ms(context: int, n: int, caches: list[torch.Tensor], q: torch.Tensor) -> float:
    """Eager torch SDPA (grouped-query, causal over the rows) over the same 28 layers' caches."""
    end = context + n
    mask = torch.arange(end)[None, :] <= (context + torch.arange(n))[:, None]
    qh = q.transpose(1, 2)

    def run():
        for layer in range(LAYERS):
            k, v = (c[:, :end].transpose(1, 2) for c in caches[2 * layer:2 * layer + 2])
            torch.nn.functional.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True)
    return time_ms(run, 10)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    from spec_edge.executorch import load
    load()
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    max_context = max(CONTEXTS) + max(ROWS)
    rows = torch.export.Dim("rows", min=1, max=max(ROWS))
    example = (torch.zeros(1, 2, HEADS, DIM), torch.zeros(1, 2, KV_HEADS, DIM), torch.tensor([0]))
    programs, methods = [], {}
    for dtype in (torch.float32, torch.float16):  # the programs' caches: float32 and float16
        exported = _export(Attention(max_context, dtype), example, ({1: rows}, {1: rows}, None))
        with tempfile.TemporaryDirectory() as tmp:
            programs.append(Runtime.get().load_program(_lower({"forward": exported}, Path(tmp) / "a.pte", False, {})))
        methods[dtype] = programs[-1].load_method("forward")
    method = methods[torch.float32]
    pool = portable_lib._threadpool_get_thread_count()
    bandwidth = copy_bandwidth()
    torch.set_num_threads(pool)
    caches = [torch.randn(1, max_context, KV_HEADS, DIM) for _ in range(2 * LAYERS)]
    g = torch.Generator().manual_seed(0)
    table = [f"| context | rows | one thread | the pool ({pool} threads) | speedup | cache bytes | bound at "
             f"{bandwidth / 1e9:.0f} GB/s | pool / bound | float16 caches (pool) | float32 / float16 | "
             f"eager SDPA ({pool} threads) | SDPA / pool |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for context in CONTEXTS:
        for n in ROWS:
            inputs = [torch.randn(1, n, HEADS, DIM, generator=g), torch.randn(1, n, KV_HEADS, DIM, generator=g),
                      torch.tensor([context])]
            ms, outputs = {}, {}
            for threads in (1, pool):
                portable_lib._unsafe_reset_threadpool(threads)
                outputs[threads] = method.execute(inputs)[0]
                ms[threads] = time_ms(lambda: method.execute(inputs), 20)
            assert torch.equal(outputs[1], outputs[pool]), "the pool changed the bits"
            half = time_ms(lambda: methods[torch.float16].execute(inputs), 20)
            cache_bytes = LAYERS * 2 * (context + n) * KV_HEADS * DIM * 4
            bound = 1e3 * cache_bytes / bandwidth
            peer = sdpa_ms(context, n, caches, inputs[0])
            table.append(f"| {context} | {n} | {ms[1]:.1f} ms | {ms[pool]:.1f} ms | {ms[1] / ms[pool]:.2f}x | "
                         f"{cache_bytes / 2**20:.0f} MiB | {bound:.1f} ms | {ms[pool] / bound:.1f} | {half:.1f} ms | "
                         f"{ms[pool] / half:.2f}x | {peer:.1f} ms | {peer / ms[pool]:.1f}x |")
    portable_lib._unsafe_reset_threadpool(pool)
    body = "\n".join([
        "## Attention on the runtime's threads (`bench/bench_attention.py`)\n",
        f"spec_edge's `attention` op through ExecuTorch, the real target's {LAYERS} layers ({HEADS} query heads "
        f"over {KV_HEADS} KV heads of {DIM}, each layer its own cache, zeros but for the rows the settings "
        f"before wrote: the arithmetic does not depend on the values), median of 20 calls; the same bits on one "
        f"thread and on the pool (checked). {os.cpu_count()} cores. The bound is the float32 caches' bytes "
        f"(keys and values, every layer, up to the last row's position) over the bandwidth of a 512 MiB copy "
        f"measured in the same process; the float16 column is the same program with float16 caches (half "
        f"the bytes); eager SDPA is PyTorch's grouped-query "
        f"`scaled_dot_product_attention` over the same caches with the causal mask of the rows, median of "
        f"10.\n", *table])
    print(body)
    if args.write:
        write_section(args.write, "bench_attention", body)


if __name__ == "__main__":
    main()
