"""`make demo`: speculative decoding on the shipped default pair, entirely through ExecuTorch.

Exports the default draft/target checkpoints (python/spec_edge/default_pair/, trained on the
Python standard library by export/train_default.py) to .pte programs once (cached), completes
held-out code prompts speculatively and target-only through the same target.pte with the C++
runner (spec_edge.NativeRunner; the Python .pte loop when it is not built), and prints the
text, tokens/s of both, the accepted-length histogram next to the analytic law, and the time
split; the histogram is also drawn to a PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import warnings
from pathlib import Path

import numpy as np

from . import __version__, active_isa
from .manifest import OP_VERSIONS
from .ops import Filters

DEFAULT_PAIR = Path(__file__).resolve().parent / "default_pair"
MAX_K = 8
# The draft's linears in 8-bit (per-channel weights, dynamic activations): the target's pass evicts
# the draft from the caches, so each draft step reads its weights from memory again; a quarter of
# the bytes makes a step about a third faster at the same acceptance. The target stays fp32.
DRAFT_QUANTIZE = "8da8w"


def accepted_length_law(alpha: float, k: int) -> np.ndarray:
    """P(n = j), j = 0..k, of the draft tokens kept in a round when each is accepted with
    probability ``alpha`` given the ones before (Leviathan et al. 2023): geometric, cut at k."""
    law = np.array([alpha ** j * (1 - alpha) for j in range(k + 1)])
    law[k] = alpha ** k
    return law


def per_token_acceptance(hist) -> float:
    """The acceptance probability per draft token the histogram shows: accepted tokens over
    accepted tokens plus rejections (a round of k accepted tokens has no rejection)."""
    hist = np.asarray(hist, dtype=float)
    accepted = (hist * np.arange(len(hist))).sum()
    rejections = hist[:-1].sum()
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def _source_key(pair: Path, k: int) -> str:
    """Changes with the checkpoints, K, and the code that exports them."""
    from . import export, hf
    digest = hashlib.sha256(f"{__version__} {sorted(OP_VERSIONS.items())} k={k} {DRAFT_QUANTIZE}".encode())
    checkpoints = sorted(p for side in ("target", "draft") for p in (pair / side).rglob("*"))
    for path in [*checkpoints, Path(export.__file__), Path(hf.__file__)]:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def quiet_dependencies():
    """Without the notices that torch, torchao and ExecuTorch print on the way (deprecations,
    torchao's optional kernels that do not load here): they concern their internals, not the
    demo. The export keeps its own progress bar."""
    loggers = [logging.getLogger(name) for name in ("torch", "torchao", "executorch")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def exported_pair(pair: Path, out: Path, k: int = MAX_K) -> Path:
    """The pair's programs in ``out``, exported once per version of the checkpoints and of spec_edge
    (processes that ask at once wait for one export, then share it)."""
    from .hf import export_hf_pair
    key = _source_key(pair, k)
    stamp = out / "source.sha256"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == key and (out / "manifest.json").is_file():
            return out
        print(f"exporting the default pair to {out} (once; cached after)")
        with quiet_dependencies():  # float32 caches: a short context, and the figures compare with float32
            export_hf_pair(pair / "target", pair / "draft", k, out, quantize_draft=DRAFT_QUANTIZE, kv_cache="fp32")
        stamp.write_text(key)
    return out


def precision(out: Path) -> str:
    """How the exported programs hold each model's weights, from their manifest."""
    modes = json.loads((out / "manifest.json").read_text())["quantize"]
    return ", ".join(f"{side} {modes[side] or 'fp32'}" for side in ("target", "draft"))


def plot(histograms: dict[str, tuple[list[int], np.ndarray]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(histograms), figsize=(5 * len(histograms), 3.6), squeeze=False)
    for ax, (title, (hist, law)) in zip(axes[0], histograms.items()):
        n = np.arange(len(hist))
        ax.bar(n - 0.2, np.asarray(hist) / sum(hist), 0.4, label="observed")
        ax.bar(n + 0.2, law, 0.4, label="law")
        ax.set(title=title, xlabel="draft tokens accepted per round", ylabel="fraction of rounds", xticks=n)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(decoder, prompts: list[list[int]], max_new: int, eos: int | None, desc: str, target_only: bool = True,
        **sampling):
    """Speculative and (unless ``target_only`` is False) target-only decoding of every prompt:
    (outputs, speculative stats summed, target-only stats summed)."""
    from tqdm import tqdm
    from .stats import GenerationStats
    spec = GenerationStats(accepted_histogram=[0] * (decoder.k + 1))
    base = GenerationStats()
    outputs = []
    for prompt in tqdm(prompts, desc=desc, unit="prompt", leave=False):
        for speculative, total in ((True, spec), (False, base))[:2 if target_only else 1]:
            out = decoder.generate(prompt, max_new, speculative=speculative, eos_token_id=eos, **sampling)
            total.add(decoder.stats)
            if speculative:
                outputs.append(out)
            else:
                outputs[-1] = (outputs[-1], out)
        if not target_only:
            outputs[-1] = (outputs[-1], None)
    return outputs, spec, base


def report(mode: str, spec, base, k: int):
    alpha = per_token_acceptance(spec.accepted_histogram)
    law = accepted_length_law(alpha, k)
    rounds = sum(spec.accepted_histogram)
    print(f"\n{mode}: {spec.tokens_per_second:.0f} tokens/s speculative vs {base.tokens_per_second:.0f} target-only "
          f"= {spec.tokens_per_second / base.tokens_per_second:.2f}x; {spec.new_tokens / rounds:.2f} tokens per target "
          f"call; acceptance per draft token {alpha:.3f}")
    print("   n  rounds  observed  law(alpha)")
    for n, count in enumerate(spec.accepted_histogram):
        bar = "#" * int(round(30 * count / max(spec.accepted_histogram)))
        print(f"  {n:2d}  {count:6d}  {count / rounds:8.3f}  {law[n]:8.3f}  {bar}")
    decode = spec.total_seconds - spec.prefill_seconds
    other = decode - spec.draft_seconds - spec.target_seconds
    print(f"  time split of speculative decoding: draft {100 * spec.draft_seconds / decode:.0f}%, target verify "
          f"(model + verify op) {100 * spec.target_seconds / decode:.0f}%, loop {100 * other / decode:.0f}%; "
          f"prefill {spec.prefill_seconds:.2f}s not counted")
    return law


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pair", type=Path, default=DEFAULT_PAIR, help="directory with target/ and draft/ "
                        "checkpoints and prompts.json")
    parser.add_argument("--cache", type=Path, default=Path("build/demo"), help="where the programs go")
    parser.add_argument("--k", type=int, default=4, help=f"draft tokens per round (1..{MAX_K})")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new", type=int, default=96)
    parser.add_argument("--python-loop", action="store_true", help="the Python .pte loop instead of the C++ runner")
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    from .runtime import PteSpeculativeDecoder

    out = exported_pair(args.pair, args.cache)
    decoder, loop = None, "the Python .pte loop"
    with quiet_dependencies():
        if not args.python_loop:
            from .native_runner import NativeRunner
            try:
                decoder, loop = NativeRunner(out, k=args.k), "the C++ runner (spec_edge.NativeRunner)"
            except ImportError as error:  # built without pybind11 or nlohmann-json
                print(f"{error}\nfalling back to the Python .pte loop")
        decoder = decoder or PteSpeculativeDecoder(out, k=args.k)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    training = json.loads((args.pair / "training.json").read_text())
    texts = json.loads((args.pair / "prompts.json").read_text())[:args.prompts]
    prompts = [tokenizer.encode(t).ids for t in texts]
    eos = tokenizer.token_to_id("<|endoftext|>")
    print(f"spec_edge {__version__} demo: target {training['target_params'] / 1e6:.1f}M params, draft "
          f"{training['draft_params'] / 1e6:.2f}M (distilled), V={decoder.vocab_size}, K={decoder.k}, "
          f"ExecuTorch + XNNPACK ({precision(out)}), spec_edge ops on '{active_isa()}', {loop}")

    greedy_outputs, spec, base = run(decoder, prompts, args.max_new, eos, "greedy")
    identical = all(s == b for s, b in greedy_outputs)
    for text, (completion, _) in list(zip(texts, greedy_outputs))[:2]:
        print("\n" + "-" * 72 + f"\n{text}\033[1m{tokenizer.decode(completion)}\033[0m")
    print("-" * 72)
    print(f"greedy speculative output identical to target-only decoding: {'yes' if identical else 'NO'}")
    greedy_law = report("greedy", spec, base, decoder.k)

    sampling = dict(temperature=0.8, filters=Filters(top_p=0.95), seed=1)
    _, sspec, sbase = run(decoder, prompts, args.max_new, eos, "sampled", **sampling)
    sampled_law = report("sampled (T=0.8, top-p 0.95)", sspec, sbase, decoder.k)

    png = args.cache / "accepted_lengths.png"
    plot({f"greedy, K={decoder.k}": (spec.accepted_histogram, greedy_law),
          f"sampled T=0.8 top-p 0.95, K={decoder.k}": (sspec.accepted_histogram, sampled_law)}, png)
    print(f"\nhistograms vs law drawn to {png}")


if __name__ == "__main__":
    main()
