"""vLLM on CPU with n-gram speculative decoding, its own rejection sampler and sampler against
spec_edge's plugin, in one process (`make bench-vllm`, in .venv-vllm).

A Llama with random weights and a 32,000-token vocabulary (written here with transformers),
batches of 1, 8 and 32 requests whose prompts repeat spans (the n-gram drafter proposes), greedy
and sampled (T 0.8, top-p 0.95). Per engine step, the time of the rejection + sampling step
(vLLM's ``RejectionSampler.forward``, whichever implementation runs it); end to end, generated
tokens per second. The two implementations alternate batch by batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ["SPEC_EDGE_VLLM"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_verify import write_section  # noqa: E402
from spec_edge.integrations import vllm as plugin  # noqa: E402

MODES = {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.8, top_p=0.95, seed=1)}


def checkpoint(path: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(20)  # peaked distributions, as a trained model's
    model.save_pretrained(path)
    return path


def prompts(n: int, rng: np.random.Generator) -> list[list[int]]:
    """Code-like prompts: a few spans of 8 tokens, each repeated."""
    out = []
    for _ in range(n):
        spans = [rng.integers(100, 32000, 8).tolist() for _ in range(4)]
        out.append(sum((spans[i % 4] for i in rng.integers(0, 4, 12)), []))
    return out


class StepTimer:
    """Wraps RejectionSampler.forward (the plugin's or vLLM's, whichever is in place)."""

    def __init__(self):
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        self.seconds, self.steps = 0.0, 0
        inner = RejectionSampler.forward

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            self.steps += 1
            return out
        self.cls, self.inner = RejectionSampler, inner
        RejectionSampler.forward = timed

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.cls.forward = self.inner


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    with tempfile.TemporaryDirectory() as tmp:
        llm = LLM(str(checkpoint(Path(tmp))), skip_tokenizer_init=True, dtype="float32", max_model_len=1024, seed=0,
                  max_num_seqs=32, speculative_config={"method": "ngram", "num_speculative_tokens": args.k,
                                                       "prompt_lookup_max": 4, "prompt_lookup_min": 2})
    assert plugin._original, "vLLM did not load the plugin"
    rng = np.random.default_rng(0)
    rows = ["| batch | mode | rejection + sampling step, vLLM | spec_edge | vLLM / spec_edge | tokens/s, vLLM | "
            "spec_edge | spec_edge / vLLM |", "|---|---|---|---|---|---|---|---|"]
    for batch in (1, 8, 32):
        batch_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts(batch, rng)]
        for mode, settings in MODES.items():
            params = SamplingParams(max_tokens=args.max_tokens, detokenize=False, ignore_eos=True, **settings)
            step, rate = {}, {}
            for name in ("vllm", "spec_edge") * args.repeats:
                plugin.switch(name == "spec_edge")
                with StepTimer() as timer:
                    start = time.perf_counter()
                    outputs = llm.generate(batch_prompts, params, use_tqdm=False)
                    wall = time.perf_counter() - start
                tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
                step.setdefault(name, []).append(1e3 * timer.seconds / timer.steps)
                rate.setdefault(name, []).append(tokens / wall)
            s = {name: float(np.median(v)) for name, v in step.items()}
            r = {name: float(np.median(v)) for name, v in rate.items()}
            rows.append(f"| {batch} | {mode} | {s['vllm']:.2f} ms | {s['spec_edge']:.2f} ms | "
                        f"{s['vllm'] / s['spec_edge']:.2f}x | {r['vllm']:.0f} | {r['spec_edge']:.0f} | "
                        f"{r['spec_edge'] / r['vllm']:.2f}x |")
            print(rows[-1], flush=True)
    import vllm
    body = "\n".join([
        "## Inside vLLM (`bench/bench_vllm.py`)\n",
        f"vLLM {vllm.__version__} (`vllm-cpu`) on this machine's CPU, {torch.get_num_threads()} threads, n-gram speculative "
        f"decoding with {args.k} proposals per step; a Llama with random weights (4 layers, 256 wide, 32,000-token "
        f"vocabulary), prompts that repeat spans, {args.max_tokens} tokens per request; greedy, and sampled at T 0.8, "
        f"top-p 0.95 with per-request seeds. The step: the rejection sampler with the bonus and correction tokens, per "
        f"engine step (median of {args.repeats} runs, the two implementations alternating).\n",
        *rows,
    ])
    print(body)
    if args.write:
        write_section(args.write, "bench_vllm", body)


if __name__ == "__main__":
    main()
