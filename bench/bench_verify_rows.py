"""Where the real target's verify step goes: its forward over 1..K+1 rows (the `logits` method of
the `make demo-real` target.pte, no sampling op) against one row, and one of its linears alone
(an 8da4w 1536 -> 8960 MLP projection, XNNPACK, exported here) over the same rows. A verify step
can cost no less than its forward over K+1 rows.

Usage: python bench/bench_verify_rows.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

import spec_edge
from spec_edge.demo_real import EXPORT, MODELS, describe_export, exported
from spec_edge.export import _lower, quantize_model
from spec_edge.runtime import PteSpeculativeDecoder

from bench_real_pair import long_text_ids  # noqa: E402  (bench/, this script's directory)
from bench_verify import write_section  # noqa: E402

ROWS = (1, 2, 3, 5, 8, 9)  # K+1: 8 rows at K=7, the real pair's best; 9 at the exported 8


def time_ms(call, repeat: int) -> float:
    """The median of ``repeat`` timed calls (after one untimed), in ms."""
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def linear_program(group_size: int):
    """(program, its `forward` method): one 8da4w linear 1536 -> 8960 over 1..16 rows. The
    method needs its program alive."""
    from executorch.runtime import Runtime
    linear = quantize_model(torch.nn.Sequential(torch.nn.Linear(1536, 8960, bias=False)), "8da4w", group_size)
    rows = torch.export.Dim("rows", min=1, max=16)
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        path = Path(tmp) / "linear.pte"
        program = torch.export.export(linear, (torch.randn(1, 2, 1536),), dynamic_shapes=({1: rows},), strict=False)
        _lower({"forward": program}, path, True, {})
        program = Runtime.get().load_program(path.read_bytes())
        return program, program.load_method("forward")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("build/real/qwen-coder"))
    args = parser.parse_args()
    out = exported(MODELS, args.cache)
    programs = PteSpeculativeDecoder(out)
    ids = long_text_ids(spec_edge.NativeTokenizer(out / "tokenizer.json"), 256 + max(ROWS))
    programs.target_logits(torch.tensor([ids[:9]]), torch.tensor([0]))
    _program, linear = linear_program(EXPORT["group_size"])
    table = ["| rows | target forward | / 1 row | one 8da4w linear 1536 -> 8960 | / 1 row |", "|---|---|---|---|---|"]
    base = {}
    for n in ROWS:
        # Every timed call writes the same cache positions (256..), so the context stays the same.
        model = time_ms(lambda: programs.target_logits(torch.tensor([ids[256:256 + n]]), torch.tensor([256])), 7)
        x = torch.randn(1, n, 1536)
        alone = time_ms(lambda: linear.execute([x]), 51)
        base = base or {"model": model, "linear": alone}
        table.append(f"| {n} | {model:.1f} ms | {model / base['model']:.2f} | {1e3 * alone:.0f} us | "
                     f"{alone / base['linear']:.2f} |")
    body = "\n".join(["## What a verify step's rows cost on the real target (`bench/bench_verify_rows.py`)\n",
                      f"The `make demo-real` target.pte ({describe_export()}), "
                      "its forward at 256 positions of context; the linear: one of its MLP projections' shape.\n",
                      *table])
    print(body)
    if args.write:
        write_section(args.write, "bench_verify_rows", body)


if __name__ == "__main__":
    main()
