"""llama.cpp's own tools, the peer of the real-pair benchmark: built once from the sources inside
llama-cpp-python's sdist (pinned by size and sha256; downloaded with pip, never installed) into
build/llama_cpp, then run as subprocesses on the same GGUF files with their timings parsed.

    python bench/llama_cpp.py [--cache build/llama_cpp]     # builds (about 4 minutes) and lists the tools
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from spec_edge.manifest import files_sha256

SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SIZE = 76_589_250
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
TOOLS = ("llama-completion", "llama-speculative-simple", "llama-perplexity")


def sources(cache: Path) -> Path:
    """llama.cpp's source tree from the pinned sdist (downloaded once)."""
    tree = cache / "src" / SDIST.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    archive = cache / SDIST
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        "-d", str(cache), "llama-cpp-python==0.3.36"], check=True)
    size, digest = archive.stat().st_size, files_sha256([archive])
    if (size, digest) != (SDIST_SIZE, SDIST_SHA256):
        archive.unlink()
        raise SystemExit(f"{archive}: expected {SDIST_SIZE} bytes with sha256 {SDIST_SHA256}, got {size} bytes "
                         f"with {digest}; removed")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        tar.extractall(cache / "src", members=members, filter="data")
    return tree


def build(cache: Path = Path("build/llama_cpp")) -> dict[str, Path]:
    """The tools' paths, built once (CPU, this machine's ISA less AMX, no network code). The virtual
    machines this project measures on list AMX but fault on its first instruction (`ldtilecfg`,
    SIGSEGV in ggml's AMX matmul), so AMX is left out: GCC lets an explicit -mno- win over
    -march=native."""
    cache = cache.resolve()
    out = cache / "build-no-amx"
    paths = {name: out / "bin" / name for name in TOOLS}
    if all(p.is_file() for p in paths.values()):
        return paths
    tree = sources(cache)
    subprocess.run(["cmake", "-S", str(tree), "-B", str(out), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(out), "--target", *TOOLS], check=True, stdout=subprocess.DEVNULL)
    return paths


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    if found is None:
        raise RuntimeError(f"llama.cpp's output lacks /{pattern}/:\n{text[-2000:]}")
    return float(found.group(1))


def completion(tools: dict, model: Path, prompt: str, max_new: int, threads: int) -> dict:
    """Target-only greedy decoding: generated tokens/s (prompt excluded), ms per token and the CPU
    features its kernels use (as its system_info reports them)."""
    text = subprocess.run([str(tools["llama-completion"]), "-m", str(model), "-p", prompt, "-n", str(max_new),
                           "-t", str(threads), "--temp", "0", "-no-cnv", "--no-warmup", "-c", "2048"],
                          check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    output = text.stdout + text.stderr
    ms = _number(r"perf_print:\s+eval time =.*?\(\s*([\d.]+) ms per token", output)
    cpu = re.search(r"system_info:.*?CPU : (.*)", output)
    features = [name for name, on in re.findall(r"(\w+) = (\d+)", cpu.group(1) if cpu else "") if on != "0"]
    return {"tokens_per_second": 1e3 / ms, "ms_per_token": ms, "cpu_features": features}


def speculative(tools: dict, target: Path, draft: Path, prompt: str, max_new: int, threads: int,
                n_max: int) -> dict:
    """llama-speculative-simple, greedy: decoded tokens/s, acceptance, and where the decoding time
    went: the target's batched checks per round (its batched evaluation time less the prompt's
    encoding) and the rest (drafting and bookkeeping) per drafted token."""
    run = subprocess.run([str(tools["llama-speculative-simple"]), "-m", str(target), "-md", str(draft), "-p", prompt,
                          "-n", str(max_new), "-t", str(threads), "-td", str(threads), "--temp", "0",
                          "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max), "-c", "2048"],
                         check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    output = run.stdout + run.stderr
    decoded_s = _number(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", output)
    encoded_s = _number(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", output)
    predicted, drafted = _number(r"n_predict = (\d+)", output), _number(r"n_drafted = (\d+)", output)
    accepted = _number(r"n_accept  = (\d+)", output)
    # The target evaluates the prompt and every check as batches ("prompt eval" in its report).
    batches_s = _number(r"prompt eval time =\s+([\d.]+) ms", output.split("target:")[-1]) / 1e3
    check_s, rounds = batches_s - encoded_s, predicted - accepted  # a round emits its accepted tokens + 1
    return {"tokens_per_second": _number(r"decoded\s+\d+ tokens in .*speed:\s+([\d.]+) t/s", output),
            "acceptance": accepted / drafted if drafted else 0.0,
            "check_ms": 1e3 * check_s / rounds, "draft_ms": 1e3 * (decoded_s - check_s) / drafted if drafted else 0.0}


def perplexity(tools: dict, model: Path, text_file: Path, context: int, threads: int, chunks: int) -> float:
    """llama-perplexity's final estimate (each chunk of ``context`` tokens scores its second half)."""
    run = subprocess.run([str(tools["llama-perplexity"]), "-m", str(model), "-f", str(text_file), "-c", str(context),
                          "-b", str(context), "-t", str(threads), "--chunks", str(chunks)],
                         check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return _number(r"Final estimate: PPL = ([\d.]+)", run.stdout + run.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path("build/llama_cpp"))
    for name, path in build(parser.parse_args().cache).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
