"""Building an fp32 ExecuTorch model from each real GGUF file of build/models (`make fetch-models`):
time and peak RSS of spec_edge's streamed load, of the same load through a whole state dict, and
of transformers' GGUF loader (the peer), each in a fresh process.

Usage: python bench/bench_gguf_load.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "export"))
from fetch_models import MODELS as PINNED  # noqa: E402

WAYS = {"streamed": "spec_edge, streamed (gguf_model)", "state dict": "spec_edge, whole state dict first",
        "transformers": "transformers (gguf_file=, fp32)"}


def load_once(way: str, path: Path) -> dict:
    """One load in this process: seconds, peak RSS, parameters."""
    import torch
    start = time.monotonic()
    if way == "streamed":
        from spec_edge.gguf_checkpoint import gguf_config, gguf_model
        model = gguf_model(path, gguf_config(path, 512))
    elif way == "state dict":
        from spec_edge.export import build_model
        from spec_edge.gguf_checkpoint import load_gguf
        model = build_model(*load_gguf(path, 512))
    else:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return {"seconds": time.monotonic() - start, "params": sum(p.numel() for p in model.parameters()),
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run() -> list[tuple[str, dict]]:
    rows = []
    for name, pin in PINNED.items():
        path = ROOT / "build" / "models" / pin.file
        if not path.is_file():
            print(f"{path}: absent (make fetch-models); skipped", file=sys.stderr)
            continue
        results = {}
        for way in WAYS:
            out = subprocess.run([sys.executable, __file__, "--one", way, str(path)], capture_output=True, text=True,
                                 check=True).stdout
            results[way] = json.loads(out.strip().splitlines()[-1])
            print(name, way, results[way], flush=True)
        rows.append((name, results))
    return rows


def table(rows) -> str:
    lines = ["## Building a model from a GGUF file (`bench/bench_gguf_load.py`)", "",
             "fp32 model of each real file, each load in a fresh process; seconds and the process's peak RSS "
             "(`ru_maxrss`). The streamed load dequantizes a block of rows at a time straight into the model.", "",
             "| file | parameters | " + " | ".join(WAYS.values()) + " |", "|---|---|" + "---|" * len(WAYS)]
    for name, results in rows:
        cells = [f"{r['seconds']:.0f} s, {r['peak_gib']:.2f} GiB" for r in results.values()]
        lines.append(f"| {name} | {results['streamed']['params'] / 1e9:.2f} B | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="update this markdown file's bench_gguf_load section")
    parser.add_argument("--one", nargs=2, metavar=("WAY", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(load_once(args.one[0], Path(args.one[1]))))
        return
    body = table(run())
    print(body)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_verify import write_section
        write_section(args.write, "bench_gguf_load", body)


if __name__ == "__main__":
    main()
