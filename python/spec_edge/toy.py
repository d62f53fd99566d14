"""A deterministic toy language-model pair for demos and tests.

Next-token logits come from a fixed random table keyed by the last two tokens (a second-order
Markov chain), so every distribution the speculative loop sees is known exactly. The draft is
the target's table plus noise: the two agree often, not always.
"""

from __future__ import annotations

import torch


class ToyLM:
    def __init__(self, vocab: int, seed: int, base: "ToyLM | None" = None, noise: float = 0.0,
                 scale: float = 3.0):
        g = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        if base is None:
            self.table = scale * torch.randn(vocab * vocab, vocab, generator=g)
        else:
            self.table = base.table + noise * torch.randn(base.table.shape, generator=g)

    def probs_table(self) -> torch.Tensor:
        """``[V, V, V]``: next-token probabilities for each (second-to-last, last) token pair."""
        return torch.softmax(self.table.double(), -1).reshape(self.vocab, self.vocab, self.vocab)

    def logits(self, context: list[int]) -> torch.Tensor:
        a = context[-2] if len(context) > 1 else 0
        return self.table[a * self.vocab + context[-1]]

    def probs(self, context: list[int]) -> torch.Tensor:
        return torch.softmax(self.logits(context), -1)

    # SpeculativeDecoder callbacks
    def target_step(self, prefix: list[int], proposed: torch.Tensor) -> torch.Tensor:
        ctx = list(prefix)
        rows = [self.probs(ctx)]
        for t in proposed.tolist():
            ctx.append(t)
            rows.append(self.probs(ctx))
        return torch.stack(rows)

    def greedy_draft_step(self, prefix: list[int], k: int):
        ctx, out = list(prefix), []
        for _ in range(k):
            out.append(int(self.logits(ctx).argmax()))
            ctx.append(out[-1])
        return torch.tensor(out), None

    def sampling_draft_step(self, generator: torch.Generator):
        def step(prefix: list[int], k: int):
            ctx, out, rows = list(prefix), [], []
            for _ in range(k):
                p = self.probs(ctx)
                out.append(int(torch.multinomial(p, 1, generator=generator)))
                rows.append(p)
                ctx.append(out[-1])
            return torch.tensor(out), torch.stack(rows)
        return step

    def sample_decode(self, prompt: list[int], max_new: int, generator: torch.Generator) -> list[int]:
        ctx = list(prompt)
        for _ in range(max_new):
            ctx.append(int(torch.multinomial(self.probs(ctx), 1, generator=generator)))
        return ctx[len(prompt):]

    def greedy_decode(self, prompt: list[int], max_new: int) -> list[int]:
        ctx = list(prompt)
        for _ in range(max_new):
            ctx.append(int(self.logits(ctx).argmax()))
        return ctx[len(prompt):]
