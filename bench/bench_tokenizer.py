"""Encode throughput of the on-device C++ tokenizer (spec_edge.NativeTokenizer, the code the C++
runner and the Android API use) next to Hugging Face `tokenizers` (Rust, single thread), per
family structure (tests/tokenizer_families.py, trained here on a small corpus, so with small
vocabularies) and on the real checkpoints' tokenizers when `make fetch-models` has run, on 1 MB of
Python code and 1 MB of mixed-script prose, in one process; ids checked equal.
The prose is built from sentences in twelve scripts, shuffled word by word (seeded): this machine
has no large multilingual corpus, so its words repeat more than real prose does (both tokenizers
cache words).
Usage: python bench/bench_tokenizer.py [--write docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402

import spec_edge  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_verify import write_section  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tokenizer_families import FAMILIES, training_corpus, write_family  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from fetch_models import MODELS as PINNED  # noqa: E402

MB = 1 << 20


def code_megabyte() -> str:
    text = ""
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        text += f.read_text(errors="replace")
        if len(text.encode()) >= MB:
            break
    return text.encode()[:MB].decode(errors="ignore")


def prose_megabyte() -> str:
    words = " ".join(training_corpus()[-12:]).split()
    rng = random.Random(0)
    out, size = [], 0
    while size < MB:
        line = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 25))) + ".\n"
        out.append(line)
        size += len(line.encode())
    return "".join(out).encode()[:MB].decode(errors="ignore")


def best_seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def tokenizer_files(tmp: Path) -> dict[str, Path]:
    """Each family structure trained here, and the real checkpoints' tokenizers (as transformers
    makes them from the GGUF files of `make fetch-models`) when build/models holds them."""
    files = {family: write_family(family, tmp / family, vocab_size=8000) for family in sorted(FAMILIES)}
    models = Path(__file__).resolve().parents[1] / "build" / "models"
    for name, pin in sorted(PINNED.items()):
        if (models / pin.file).is_file():
            from transformers import AutoTokenizer
            path = tmp / name / "tokenizer.json"
            path.parent.mkdir()
            AutoTokenizer.from_pretrained(str(models), gguf_file=pin.file).backend_tokenizer.save(str(path))
            files[f"{name} (real, from its GGUF)"] = path
    return files


def run() -> list[tuple]:
    rows = []
    texts = {"code": code_megabyte(), "prose": prose_megabyte()}
    with tempfile.TemporaryDirectory() as tmp:
        for family, path in tokenizer_files(Path(tmp)).items():
            ref, native = tokenizers.Tokenizer.from_file(str(path)), spec_edge.NativeTokenizer(path)
            for name, text in texts.items():
                assert native.encode(text) == ref.encode(text).ids, (family, name)
                ours = best_seconds(lambda: native.encode(text))
                peer = best_seconds(lambda: ref.encode(text))
                rows.append((family, native.vocab_size, name, len(ref.encode(text).ids), MB / ours / 1e6,
                             MB / peer / 1e6))
                print(f"{family:30s} {name:5s} ours {MB / ours / 1e6:6.2f} MB/s  tokenizers {MB / peer / 1e6:6.2f} MB/s",
                      flush=True)
    return rows


def table(rows) -> str:
    lines = ["## The on-device tokenizer next to `tokenizers` (`bench/bench_tokenizer.py`)", "",
             f"Encode throughput, one thread, {platform.processor() or platform.machine()}, tokenizers "
             f"{tokenizers.__version__}; 1 MB of text per row, best of 3; ids identical.", "",
             "| tokenizer | V | text | tokens | C++ tokenizer MB/s | tokenizers MB/s | ratio |",
             "|---|---|---|---|---|---|---|"]
    for family, vocab, name, n, ours, peer in rows:
        lines.append(f"| {family} | {vocab} | {name} | {n} | {ours:.2f} | {peer:.2f} | {ours / peer:.2f}x |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="update this markdown file's bench_tokenizer section")
    args = parser.parse_args()
    body = table(run())
    print(body)
    if args.write:
        write_section(args.write, "bench_tokenizer", body)


if __name__ == "__main__":
    main()
