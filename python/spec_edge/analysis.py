"""The analytic law of speculative decoding (Leviathan et al. 2023, Theorem 3.5 and 3.8).

With per-position acceptance rates ``alpha_i``, a round accepts ``n`` of ``K`` draft tokens with
probability ``prod_{i<n} alpha_i * (1 - alpha_n)`` (``n < K``) or ``prod_i alpha_i`` (``n = K``),
and emits ``n + 1`` tokens.
"""

from __future__ import annotations

import torch


def _normalize(x: torch.Tensor) -> torch.Tensor:
    x = x.to(torch.float64)
    return x / x.sum(-1, keepdim=True)


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Probability that speculative sampling accepts a token drawn from ``q``:
    ``sum(min(p, q))`` over the last axis (rows normalized first).

    >>> import torch
    >>> float(acceptance_rate(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])))
    0.5
    """
    return torch.minimum(_normalize(p), _normalize(q)).sum(-1)


def greedy_acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Probability that a token drawn from ``q`` equals ``argmax p`` (greedy verification)."""
    return _normalize(q).gather(-1, p.argmax(-1, keepdim=True)).squeeze(-1)


def draft_free_acceptance_rate(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Acceptance rate of the draft-free mode when proposals follow ``r``: ``sum(r * p)``."""
    return (_normalize(r) * _normalize(p)).sum(-1)


def accepted_length_distribution(alphas: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` per-position acceptance rates -> ``[..., K+1]`` law of the accepted length.

    >>> accepted_length_distribution(torch.tensor([0.5, 0.5])).tolist()
    [0.5, 0.25, 0.25]
    """
    alphas = alphas.to(torch.float64)
    reach = torch.cumprod(torch.cat([torch.ones_like(alphas[..., :1]), alphas], -1), -1)  # P(n >= j)
    stop = torch.cat([1 - alphas, torch.ones_like(alphas[..., :1])], -1)
    return reach * stop


def expected_accepted_length(alphas: torch.Tensor) -> torch.Tensor:
    """``E[n] = sum_{j=1..K} prod_{i<j} alpha_i`` (for equal rates: ``sum_{j=1..K} alpha^j``)."""
    return torch.cumprod(alphas.to(torch.float64), -1).sum(-1)


def expected_tokens_per_round(alphas: torch.Tensor) -> torch.Tensor:
    """Tokens emitted per target forward: ``1 + E[n]``."""
    return 1 + expected_accepted_length(alphas)
