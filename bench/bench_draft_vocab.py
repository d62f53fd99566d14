"""A real draft program with its whole vocabulary and with a frequency-ranked part of it
(spec_edge.draft_vocab, as FR-Spec): SmolLM2-135M from its GGUF file (`make fetch-models`),
exported as draft.pte with 8da4w linears and 4-bit token embeddings ('4,32'), once per
vocabulary; the program's size against the GGUF file, the export's time and peak RSS, and the
draft step's time (greedy, one token after a 16-token prefill, median of 40), both programs in
the same process, interleaved.

Usage: python bench/bench_draft_vocab.py [--write docs/BENCHMARKS.md] [--subset 8192] [--dir CACHE_DIR]
(the programs and their export figures are kept in CACHE_DIR, default build/bench_draft_vocab, and
reused by the next run)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GGUF = ROOT / "build" / "models" / "smollm2-135m-instruct-q4_1.gguf"
PROMPT = [1, 504, 3458, 28, 2280, 1351, 29, 198, 325, 1006, 1067, 4078, 275, 28, 2280, 1351]


def export_one(out: Path, subset: int | None) -> dict:
    """draft.pte of SmolLM2 into `out` (in a fresh process: its peak RSS is this export's)."""
    import resource
    from spec_edge.draft_vocab import frequent_token_ids, restrict_draft_vocab, stdlib_corpus
    from spec_edge.export import export_draft, quantize_model, quantize_token_embedding
    from spec_edge.gguf_checkpoint import gguf_config, gguf_model, save_gguf_tokenizer
    import spec_edge.executorch as se_executorch
    se_executorch.load()
    start = time.monotonic()
    config = gguf_config(GGUF, 512)
    model = gguf_model(GGUF, config)
    quantize_token_embedding(model, "4,32")
    if subset:
        with tempfile.TemporaryDirectory() as tmp:
            save_gguf_tokenizer(GGUF, tmp)
            ids = frequent_token_ids(Path(tmp) / "tokenizer.json", stdlib_corpus(), subset)
        restrict_draft_vocab(model, ids, config.vocab_size)
    quantize_model(model, "8da4w", 32)
    export_draft(model, config, out, 32)
    return {"seconds": time.monotonic() - start, "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "bytes": out.stat().st_size, "vocab": len(ids) if subset else config.vocab_size}


def step_times(programs: dict[str, Path], rounds: int = 40) -> dict[str, float]:
    """Median seconds of one greedy draft step per program, the programs interleaved."""
    import torch
    from executorch.runtime import Runtime
    import spec_edge.executorch as se_executorch
    se_executorch.load()
    sampling = [torch.tensor([0.0]), torch.tensor([0]), torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0]),
                torch.full((1, 512), -1, dtype=torch.long), torch.tensor([0]), torch.tensor([0])]
    methods = {}
    for name, path in programs.items():
        program = Runtime.get().load_program(path.read_bytes())
        methods[name] = (program, program.load_method("prefill"), program.load_method("draft_step"))
    times = {name: [] for name in programs}
    for name, (_, prefill, _) in methods.items():
        prefill.execute([torch.tensor([PROMPT[:-1]]), torch.tensor([0])])
    for r in range(rounds):
        for name, (_, _, step) in methods.items():
            start = time.perf_counter()
            step.execute([torch.tensor([[PROMPT[-1]]]), torch.tensor([len(PROMPT) - 1]), *sampling])
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="update this markdown file's bench_draft_vocab section")
    parser.add_argument("--subset", type=int, default=8192)
    parser.add_argument("--dir", type=Path, default=ROOT / "build" / "bench_draft_vocab")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(export_one(Path(args.one[0]), int(args.one[1]) or None)))
        return
    if not GGUF.is_file():
        sys.exit(f"{GGUF}: absent (make fetch-models)")
    args.dir.mkdir(parents=True, exist_ok=True)
    programs, exports = {}, {}
    for name, subset in (("whole vocabulary", 0), (f"{args.subset} frequent tokens", args.subset)):
        path, record = args.dir / f"draft-{subset}.pte", args.dir / f"draft-{subset}.json"
        if not (path.is_file() and record.is_file()):
            result = subprocess.run([sys.executable, __file__, "--one", str(path), str(subset)], capture_output=True,
                                    text=True)
            if result.returncode != 0:
                sys.exit(f"exporting {path.name} failed:\n{result.stderr[-3000:]}")
            record.write_text(result.stdout.strip().splitlines()[-1])
        exports[name], programs[name] = json.loads(record.read_text()), path
        print(name, exports[name], flush=True)
    steps = step_times(programs)
    gguf_bytes = GGUF.stat().st_size
    full = steps["whole vocabulary"]
    lines = ["## A draft over part of the vocabulary (`bench/bench_draft_vocab.py`)", "",
             f"SmolLM2-135M-Instruct from `{GGUF.name}` ({gguf_bytes / 2**20:.1f} MiB) as `draft.pte`: 8da4w linears, "
             "4-bit token embeddings (`4,32`), the tied output layer 8da4w; the subset ranked on the Python standard "
             "library's sources. Greedy draft step after a 16-token prefill, median of 40, the two programs "
             "interleaved in one process; export time and peak RSS each in a fresh process.", "",
             "| draft vocabulary | program | vs GGUF | export | peak RSS | draft step | vs whole |",
             "|---|---|---|---|---|---|---|"]
    for name, e in exports.items():
        lines.append(f"| {name} ({e['vocab']} ids) | {e['bytes'] / 2**20:.1f} MiB | {e['bytes'] / gguf_bytes:.2f}x | "
                     f"{e['seconds']:.0f} s | {e['peak_gib']:.2f} GiB | {steps[name] * 1e3:.2f} ms | "
                     f"{steps[name] / full:.2f} |")
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_verify import write_section
        write_section(args.write, "bench_draft_vocab", body)


if __name__ == "__main__":
    main()
