"""The speculative decoding loop over two model callbacks."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from . import ops
from .stats import GenerationStats

DraftStep = Callable[[list[int], int], tuple[torch.Tensor, torch.Tensor | None]]
TargetStep = Callable[[list[int], torch.Tensor], torch.Tensor]


class SpeculativeDecoder:
    """Draft proposes ``k`` tokens, the target scores them in one step, spec_edge verifies.

    Args:
        draft_step: ``draft_step(prefix, k) -> (tokens [k], probs [k, V])``: ``k`` tokens
            sampled (or chosen greedily) by the draft after ``prefix``, with the draft's
            distribution at each position (``probs`` may be ``None`` in greedy mode).
        target_step: ``target_step(prefix, proposed) -> target_probs [k+1, V]``: the target's
            distribution after ``prefix + proposed[:i]`` for ``i = 0..k`` (one forward).
        k: draft tokens per round.
        greedy: verify with ``verify_greedy`` (the output equals the target's greedy decode);
            otherwise with ``accept`` (the output is distributed as sampling the target).
        generator: source of the uniforms in sampled mode.
        eos_token_id: stop after emitting this token.

    Example:
        >>> import torch, spec_edge
        >>> V = 8
        >>> table = torch.softmax(torch.randn(V, V, generator=torch.Generator().manual_seed(0)), -1)
        >>> def target_step(prefix, proposed):
        ...     ctx = prefix[-1:] + proposed.tolist()
        ...     return table[torch.tensor(ctx)]
        >>> def draft_step(prefix, k):
        ...     out = []
        ...     for _ in range(k):
        ...         out.append(int(table[(prefix + out)[-1]].argmax()))
        ...     return torch.tensor(out, dtype=torch.long), None
        >>> dec = spec_edge.SpeculativeDecoder(draft_step, target_step, k=3)
        >>> len(dec.generate([1], max_new=10))
        10
    """

    def __init__(self, draft_step: DraftStep, target_step: TargetStep, k: int = 4,
                 greedy: bool = True, generator: torch.Generator | None = None,
                 eos_token_id: int | None = None):
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k: expected an integer >= 0, got {k!r}")
        self.draft_step, self.target_step = draft_step, target_step
        self.k, self.greedy, self.generator = k, greedy, generator
        self.eos_token_id = eos_token_id
        self.stats = GenerationStats(accepted_histogram=[0] * (k + 1))

    def generate(self, prompt_ids: Sequence[int], max_new: int) -> list[int]:
        """Returns up to ``max_new`` new token ids (fewer if ``eos_token_id`` is emitted)."""
        if max_new < 0:
            raise ValueError(f"max_new: expected >= 0, got {max_new}")
        prefix = [int(t) for t in prompt_ids]
        if not prefix:
            raise ValueError("prompt_ids: expected at least one token")
        self.stats = GenerationStats(accepted_histogram=[0] * (self.k + 1))
        new: list[int] = []
        while len(new) < max_new and (not new or new[-1] != self.eos_token_id):
            # a round emits at most k + 1 tokens
            for t in self.step(prefix, k=min(self.k, max_new - len(new) - 1)):
                new.append(t)
                prefix.append(t)
                if t == self.eos_token_id:
                    break
        self.stats.new_tokens = len(new)
        return new

    def step(self, prefix: Sequence[int], k: int | None = None) -> list[int]:
        """One round after ``prefix``: propose ``k`` tokens (default ``self.k``), verify them in
        one target step, and return the emitted tokens (the accepted ones, then one more).
        Adds the round to ``self.stats``."""
        k = self.k if k is None else k
        if not 0 <= k <= self.k:
            raise ValueError(f"k: expected 0..{self.k}, got {k}")
        prefix = [int(t) for t in prefix]
        tokens, probs = self._propose(prefix, k)
        target = self.target_step(list(prefix), tokens)
        if tuple(target.shape[:-1]) != (k + 1,):
            raise ValueError(f"target_step returned shape {tuple(target.shape)}; "
                             f"expected [k+1={k + 1}, V]")
        if self.greedy:
            result = ops.verify_greedy(target, tokens)
        else:
            result = ops.accept(target, probs, tokens, generator=self.generator)
        n = int(result.n_accepted)
        s = self.stats  # one drafter, the draft callback: every round is the model's
        s.rounds += 1
        s.model_rounds += 1
        s.proposed += k
        s.model_proposed += k
        s.accepted += n
        s.model_accepted += n
        s.accepted_histogram[n] += 1
        return tokens[:n].tolist() + [int(result.next_token)]

    def _propose(self, prefix: list[int], k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        if k == 0:
            return torch.empty(0, dtype=torch.long), None
        tokens, probs = self.draft_step(list(prefix), k)
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        if tokens.shape != (k,):
            raise ValueError(f"draft_step returned tokens of shape {tuple(tokens.shape)}; "
                             f"expected [k={k}]")
        if not self.greedy and probs is None:
            raise ValueError("draft_step returned no probs; sampled mode (greedy=False) needs "
                             "the draft distribution [k, V]")
        return tokens, probs
