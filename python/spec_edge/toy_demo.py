"""The toy demo (`python -m spec_edge.toy_demo`): speculative decoding on a deterministic toy pair.

Shows that greedy speculation reproduces the target's greedy decode token for token, and that
sampled speculation accepts draft tokens at exactly the analytic rate: the accepted-length
histogram over many rounds next to its exact law (computed from the model pair, not fitted).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy import stats

import spec_edge
from spec_edge.toy import ToyLM


def round_length_law(target: ToyLM, draft: ToyLM, prefix: list[int], k: int) -> torch.Tensor:
    """Exact law of the accepted length of one sampled round after `prefix`.

    P(n >= j+1) sums, over draft paths, the probability that every token so far was proposed
    and accepted: min(p, q) per step. The models depend on the last two tokens only, so the
    paths collapse onto a [V, V] state weight.
    """
    V = target.vocab
    overlap = torch.minimum(target.probs_table(), draft.probs_table())  # [a, b, next]
    state = torch.zeros(V, V, dtype=torch.float64)
    state[prefix[-2] if len(prefix) > 1 else 0, prefix[-1]] = 1.0
    reach = [1.0]
    for _ in range(k):
        state = torch.einsum("ab,abt->bt", state, overlap)
        reach.append(float(state.sum()))
    reach.append(0.0)
    return torch.tensor([reach[j] - reach[j + 1] for j in range(k + 1)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4000, help="sampled rounds for the histogram")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    target = ToyLM(args.vocab, seed=args.seed, scale=2.0)
    draft = ToyLM(args.vocab, seed=args.seed + 1, base=target, noise=0.8)
    print(f"spec_edge {spec_edge.__version__} demo: toy target/draft pair, V={args.vocab}, k={args.k}, "
          f"CPU path '{spec_edge.active_isa()}'\n")

    # Greedy: identical to target-only greedy decoding.
    decoder = spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step, k=args.k)
    prompts = [[1, 2], [7], [3, 9, 4], [11, 5]]
    identical, rounds, tokens = True, 0, 0
    t0 = time.perf_counter()
    for prompt in prompts:
        out = decoder.generate(prompt, 48)
        identical &= out == target.greedy_decode(prompt, 48)
        rounds += decoder.stats.rounds
        tokens += len(out)
    print(f"greedy: {tokens} tokens in {rounds} target calls ({tokens / rounds:.2f} tokens per round), "
          f"identical to target-only greedy decoding: {'yes' if identical else 'NO'} "
          f"({time.perf_counter() - t0:.2f}s)")

    # Sampled: accepted lengths against the exact law, round by round.
    g = torch.Generator().manual_seed(args.seed)
    decoder = spec_edge.SpeculativeDecoder(draft.sampling_draft_step(g), target.target_step, k=args.k,
                                           greedy=False, generator=g)
    observed = np.zeros(args.k + 1)
    expected = torch.zeros(args.k + 1, dtype=torch.float64)
    prefix = [1, 2]
    for _ in range(args.rounds):
        expected += round_length_law(target, draft, prefix, args.k)
        out = decoder.step(prefix)
        observed[len(out) - 1] += 1
        prefix = (prefix + out)[-2:]
    expected_np = expected.numpy()
    pvalue = stats.chisquare(observed, expected_np * observed.sum() / expected_np.sum()).pvalue
    mean_obs = (observed * np.arange(args.k + 1)).sum() / observed.sum()
    mean_law = (expected_np * np.arange(args.k + 1)).sum() / expected_np.sum()
    print(f"\nsampled: {args.rounds} rounds, accepted length n (draft tokens kept per round)")
    print("   n   observed      law")
    for n in range(args.k + 1):
        bar = "#" * int(round(40 * observed[n] / observed.max()))
        print(f"  {n:2d}  {int(observed[n]):8d}  {expected_np[n]:8.1f}  {bar}")
    print(f"  mean accepted {mean_obs:.3f} vs law {mean_law:.3f}; tokens per round {1 + mean_obs:.3f}; "
          f"chi-square p = {pvalue:.3f}")


if __name__ == "__main__":
    main()
