"""The real pair end to end: Qwen2.5-Coder 0.5B drafting for 1.5B (`make fetch-models`), exported
as `make demo-real` exports it, through the C++ runner (spec_edge.NativeRunner), next to
llama.cpp's own speculative decoding on the same GGUF files (bench/llama_cpp.py builds it).

Sections: a K sweep (1..8, greedy and sampled at T 0.8 / top-p 0.95; speculative and target-only
decoding through the same target.pte alternate prompt by prompt), the draft and verify steps'
cost in target decode steps, the runner's load time and peak RSS, the verify step's time as the
context grows (128..2048 positions), other drafts for the same target (over part of the
vocabulary; 4-bit weights in larger groups, 8-bit weights), and spec_edge beside llama.cpp prompt by prompt
(greedy, the same thread count, llama.cpp at its best draft length).

Usage: python bench/bench_real_pair.py [--write docs/BENCHMARKS.md] [--max-new 64] [--threads 2]
           [--sections sweep memory context draft-vocab draft-quantization llama.cpp] [--k K] [--passes 3]
--write keeps the sections of an earlier run that this one does not measure.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from statistics import median

from tqdm import tqdm

import spec_edge
from spec_edge.demo import run
from spec_edge.demo_real import DRAFT, EXPORT, MODELS, PROMPTS, SAMPLED, TARGET, describe_export, exported, runner
from spec_edge.stats import GenerationStats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_cpp  # noqa: E402
from bench_verify import write_subsections  # noqa: E402

CLI = Path(spec_edge.__file__).parent / "_lib" / "spec-edge-run"
MODES = {"greedy": {}, "sampled": SAMPLED}
CONTEXTS = (128, 512, 1024, 2048)
LLAMA_N_MAX = (2, 3, 4, 6, 8)  # llama.cpp's draft lengths tried: its best one is the peer


def step_ms(s: GenerationStats) -> dict:
    """Per-step times: draft step and verify step per round (speculative), decode step (target-only)."""
    return {"draft": 1e3 * s.draft_seconds / s.proposed if s.proposed else 0.0,
            "verify": 1e3 * s.target_seconds / s.rounds if s.rounds else 0.0,
            "decode": 1e3 * s.target_seconds / s.new_tokens if s.new_tokens else 0.0}


def k_sweep(out: Path, prompts, max_new: int, eos) -> tuple[list[str], dict]:
    rows = ["| K | mode | speculative tokens/s | target-only tokens/s | speedup | acceptance | tokens per round | "
            "draft step (decode steps) | verify step (decode steps) |", "|---|---|---|---|---|---|---|---|---|"]
    best = {}
    for k in range(1, EXPORT["k"] + 1):
        decoder, _ = runner(out, k)
        for mode, sampling in MODES.items():
            _, spec, base = run(decoder, prompts, max_new, eos, f"K={k} {mode}", **sampling)
            speedup = spec.tokens_per_second / base.tokens_per_second
            s, b = step_ms(spec), step_ms(base)
            rows.append(f"| {k} | {mode} | {spec.tokens_per_second:.1f} | {base.tokens_per_second:.1f} | {speedup:.2f}x | "
                        f"{spec.acceptance_rate:.3f} | {spec.new_tokens / spec.rounds:.2f} | "
                        f"{s['draft']:.1f} ms ({s['draft'] / b['decode']:.2f}) | "
                        f"{s['verify']:.1f} ms ({s['verify'] / b['decode']:.2f}) |")
            if speedup > best.get(mode, (0, 0))[1]:
                best[mode] = (k, speedup)
        del decoder
    return rows, best


def compare_drafts(out: Path, variants: dict[str, tuple[str, dict]], prompts, max_new: int, eos, k: int,
                   modes: tuple[str, ...]) -> list[str]:
    """The pair's draft (``variants``' first name, settings {}) against drafts exported with other
    settings (name: (directory suffix, settings)) for the same target.pte, prompt by prompt,
    twice over the prompts; they take turns to go first, as the one measured first has run
    slower."""
    directories = {name: exported(MODELS, out.parent / f"{out.name}-{suffix}", reuse_target=out, **settings)
                   if settings else out for name, (suffix, settings) in variants.items()}
    rows = ["| draft | mode | draft.pte | draft step | / target decode step | acceptance | speculative tokens/s | "
            "speedup |", "|---|---|---|---|---|---|---|---|"]
    decoders = {name: runner(directory, k)[0] for name, directory in directories.items()}
    names = list(decoders)
    for mode in modes:
        totals = {name: (GenerationStats(), GenerationStats()) for name in names}
        for i, prompt in enumerate(tqdm(prompts * 2, desc=f"drafts, {mode}")):
            for name in names[i % len(names):] + names[:i % len(names)]:
                for speculative, total in zip((True, False), totals[name]):
                    decoders[name].generate(prompt, max_new, speculative=speculative, eos_token_id=eos,
                                            **MODES[mode])
                    total.add(decoders[name].stats)
        for name, (spec, base) in totals.items():
            s, b = step_ms(spec), step_ms(base)
            rows.append(f"| {name} | {mode} | {(directories[name] / 'draft.pte').stat().st_size / 2**20:.1f} MiB | "
                        f"{s['draft']:.1f} ms | {s['draft'] / b['decode']:.2f} | {spec.acceptance_rate:.3f} | "
                        f"{spec.tokens_per_second:.1f} | {spec.tokens_per_second / base.tokens_per_second:.2f}x |")
    return rows


def cli_load_and_memory(out: Path, k: int, max_new: int) -> str:
    """spec-edge-run in its own process, text in and out: wall time (loading included) and peak
    RSS (the largest child so far: run before llama.cpp's tools)."""
    start = time.monotonic()
    run_ = subprocess.run([str(CLI), "--model-dir", str(out), "--prompt", PROMPTS[0], "--max-new", str(max_new),
                           "--k", str(k)], check=True, capture_output=True, text=True)
    wall = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    decode = [line for line in run_.stderr.splitlines() if "tokens/s" in line][-1]
    return (f"`spec-edge-run --prompt ... --max-new {max_new} --k {k}` (text in, text out): {wall:.1f} s wall, "
            f"peak RSS {peak:.2f} GiB; its report: {decode}")


def long_text_ids(tokenizer, n: int) -> list[int]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "".join((stdlib / name).read_text() for name in ("textwrap.py", "heapq.py", "json/decoder.py", "bisect.py"))
    ids = tokenizer.encode(text)
    assert len(ids) >= n, (len(ids), n)
    return ids[:n]


def context_growth(out: Path, tokenizer, k: int = 4, max_new: int = 24) -> list[str]:
    """Verify and decode steps with the context near each length (the prompt fills it)."""
    decoder, _ = runner(out, k)
    rows = ["| context (positions) | verify step, K+1 = 5 | target decode step | verify / decode |",
            "|---|---|---|---|"]
    for context in tqdm(CONTEXTS, desc="context growth"):
        prompt = long_text_ids(tokenizer, context - max_new - k - 1)
        decoder.generate(prompt, max_new, speculative=True)
        spec = step_ms(decoder.stats)
        decoder.generate(prompt, max_new, speculative=False)
        base = step_ms(decoder.stats)
        rows.append(f"| {context} | {spec['verify']:.1f} ms | {base['decode']:.1f} ms | "
                    f"{spec['verify'] / base['decode']:.2f} |")
    return rows


def _medians(runs: list[dict]) -> dict:
    """Each numeric field's median over ``runs``."""
    return {key: median(r[key] for r in runs) for key, value in runs[0].items() if isinstance(value, (int, float))}


def _one_pass(decoder, tools, text: str, ids, max_new: int, threads: int) -> dict:
    """One prompt on both systems: spec_edge speculative and target-only, llama.cpp target-only and
    speculative at each n_max in LLAMA_N_MAX; tokens/s and per-step times."""
    decoder.generate(ids, max_new, speculative=True)
    spec = decoder.stats
    decoder.generate(ids, max_new, speculative=False)
    base = decoder.stats
    s, b = step_ms(spec), step_ms(base)
    return {"spec": spec.tokens_per_second, "base": base.tokens_per_second, "acceptance": spec.acceptance_rate,
            "draft": s["draft"], "verify": s["verify"], "decode": b["decode"],
            "llama": llama_cpp.completion(tools, MODELS / TARGET, text, max_new, threads),
            "llama_spec": {n: llama_cpp.speculative(tools, MODELS / TARGET, MODELS / DRAFT, text, max_new, threads, n)
                           for n in LLAMA_N_MAX}}


def side_by_side(out: Path, prompts, max_new: int, k: int, threads: int, cache: Path, passes: int) -> list[str]:
    """Both systems prompt by prompt, ``passes`` times over the prompts: each figure is the median
    of its passes, llama.cpp's best n_max the one with the highest median, and each ratio's range
    over the passes (its best n_max in that pass) is shown beside it, as this machine's speed
    drifts between runs."""
    tools = llama_cpp.build(cache)
    decoder, _ = runner(out, k)
    runs = [[] for _ in prompts]
    for p in range(passes):
        for i, (text, ids) in enumerate(tqdm(list(zip(PROMPTS, prompts)), desc=f"beside llama.cpp, pass {p + 1}")):
            runs[i].append(_one_pass(decoder, tools, text, ids, max_new, threads))
    rows = [f"| prompt | spec_edge target-only | spec_edge speculative (K={k}) | llama.cpp target-only | "
            "llama.cpp best speculative | spec_edge spec. / llama.cpp best spec. | "
            "spec_edge spec. / llama.cpp target-only |", "|---|---|---|---|---|---|---|"]
    where = []
    for i, prompt_runs in enumerate(runs):
        m, ll_base = _medians(prompt_runs), _medians([r["llama"] for r in prompt_runs])
        ll_spec = {n: _medians([r["llama_spec"][n] for r in prompt_runs]) for n in LLAMA_N_MAX}
        n_best = max(ll_spec, key=lambda n: ll_spec[n]["tokens_per_second"])
        best = ll_spec[n_best]
        to_best = [r["spec"] / max(v["tokens_per_second"] for v in r["llama_spec"].values()) for r in prompt_runs]
        to_base = [r["spec"] / r["llama"]["tokens_per_second"] for r in prompt_runs]
        rows.append(f"| {i + 1} | {m['base']:.1f} | {m['spec']:.1f} (acc. {m['acceptance']:.2f}) | "
                    f"{ll_base['tokens_per_second']:.1f} | {best['tokens_per_second']:.1f} "
                    f"(n_max {n_best}, acc. {best['acceptance']:.2f}) | "
                    f"{m['spec'] / best['tokens_per_second']:.2f}x ({min(to_best):.2f}-{max(to_best):.2f}) | "
                    f"{m['spec'] / ll_base['tokens_per_second']:.2f}x ({min(to_base):.2f}-{max(to_base):.2f}) |")
        where.append(f"- prompt {i + 1}: spec_edge: decode step {m['decode']:.1f} ms, draft step {m['draft']:.1f} ms, "
                     f"verify step {m['verify']:.1f} ms; llama.cpp: decode {ll_base['ms_per_token']:.1f} ms per token; "
                     f"n_max {n_best}: draft {best['draft_ms']:.1f} ms per drafted token, check {best['check_ms']:.1f} "
                     "ms per round; tokens/s by n_max: "
                     + ", ".join(f"{n}: {v['tokens_per_second']:.1f}" for n, v in ll_spec.items()))
    features = runs[0][0]["llama"]["cpu_features"]
    return rows + ["", f"Medians of {passes} passes over the prompts; in brackets, the ratio's range over the passes.",
                   "", f"llama.cpp's CPU backend used {', '.join(features)} (its system_info).", "",
                   "Where the time goes (medians):", ""] + where


SECTIONS = ("sweep", "memory", "context", "draft-vocab", "draft-quantization", "llama.cpp")
# The draft-quantization section's drafts beside the pair's (name: (directory suffix, settings)).
DRAFT_QUANTIZATIONS = {"4-bit, groups of 64": ("draft-g64", {"draft_group_size": 64}),
                       "4-bit, groups of 128": ("draft-g128", {"draft_group_size": 128}),
                       "8-bit (8da8w)": ("draft-8da8w", {"quantize_draft": "8da8w"})}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("build/real/qwen-coder"))
    parser.add_argument("--llama-cpp", type=Path, default=Path("build/llama_cpp"))
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--draft-vocab", type=int, default=49152, help="the draft-vocabulary variant's size")
    parser.add_argument("--k", type=int, help="K of the sections after the sweep (default: the sweep's best greedy K)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--passes", type=int, default=3, help="passes over the prompts beside llama.cpp")
    args = parser.parse_args()
    if args.passes < 1:
        parser.error(f"--passes: expected at least 1, got {args.passes}")
    out = exported(MODELS, args.cache)
    tokenizer = spec_edge.NativeTokenizer(out / "tokenizer.json")
    prompts = [tokenizer.encode(t) for t in PROMPTS]
    eos = tokenizer.eos_ids
    load_s = runner(out, EXPORT["k"])[1]
    header = "\n".join(["## The real pair: Qwen2.5-Coder 0.5B drafting for 1.5B (`bench/bench_real_pair.py`)\n",
                        f"`{TARGET}` drafted by `{DRAFT}`, exported as `make demo-real` does ({describe_export()}), "
                        f"the C++ runner (`spec_edge.NativeRunner`), {len(prompts)} code prompts x {args.max_new} "
                        f"new tokens, {args.threads} threads. Load: `NativeRunner` {load_s:.1f} s.\n"])
    print(header)
    measured = {}

    def done(name: str, section: list[str]) -> None:
        """Shown, and written, as each section ends: a long run keeps what it measured, and the
        sections not run this time keep what an earlier run wrote."""
        measured[name] = "\n".join(section)
        print(measured[name], flush=True)
        if args.write:
            write_subsections(args.write, "bench_real_pair", header, measured, SECTIONS)

    k = args.k
    if "sweep" in args.sections:
        rows, best = k_sweep(out, prompts, args.max_new, eos)
        done("sweep", ["### K sweep\n", *rows, "",
                       "Best K: " + ", ".join(f"{mode} K={k} ({s:.2f}x)" for mode, (k, s) in best.items()) + ".\n"])
        k = k or best["greedy"][0]
    k = k or 4
    if "memory" in args.sections:
        done("memory", [cli_load_and_memory(out, k, args.max_new) + "\n"])
    if "context" in args.sections:
        done("context", ["### The verify step as the context grows\n", *context_growth(out, tokenizer), ""])
    if "draft-vocab" in args.sections:
        variants = {"whole vocabulary": ("", {}),
                    f"{args.draft_vocab:,} frequent tokens": (f"draft-vocab-{args.draft_vocab}",
                                                              {"draft_vocab": args.draft_vocab})}
        done("draft-vocab", [f"### A draft over part of the vocabulary, K={k}\n",
                             *compare_drafts(out, variants, prompts, args.max_new, eos, k, ("greedy",)), ""])
    if "draft-quantization" in args.sections:
        variants = {f"4-bit, groups of {EXPORT['group_size']}": ("", {}), **DRAFT_QUANTIZATIONS}
        done("draft-quantization", [f"### The draft's weights, K={k}\n",
                                    *compare_drafts(out, variants, prompts, args.max_new, eos, k, tuple(MODES)), ""])
    if "llama.cpp" in args.sections:
        done("llama.cpp", [f"### Beside llama.cpp (0c1e570, from llama-cpp-python 0.3.36's sources), greedy, "
                           f"{args.threads} threads, tokens/s\n",
                           *side_by_side(out, prompts, args.max_new, k, args.threads, args.llama_cpp,
                                          args.passes)])


if __name__ == "__main__":
    main()
