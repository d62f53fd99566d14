"""Goodness-of-fit helpers shared by the statistical tests."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chisquare_pvalue(observed, probs, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of counts against a law. Cells with expected count below
    `min_expected` are pooled; any count in a cell of probability 0 gives p = 0."""
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    n = observed.sum()
    if n == 0:
        return 1.0
    if observed[probs == 0].sum() > 0:
        return 0.0
    expected = probs * n
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if len(obs) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp * (obs.sum() / exp.sum())).pvalue)


def binomial_z_pvalue(successes: float, trials: float, rate: float) -> float:
    """Two-sided normal-approximation test of a success count against a rate."""
    if trials == 0 or rate in (0.0, 1.0):
        return 1.0 if successes == rate * trials else 0.0
    z = (successes - rate * trials) / np.sqrt(trials * rate * (1 - rate))
    return float(2 * stats.norm.sf(abs(z)))


def tvd(observed, probs) -> float:
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    return 0.5 * float(np.abs(observed / observed.sum() - probs / probs.sum()).sum())


def exact_sampler_tvd_floor(probs, n: int, reps: int = 8, seed: int = 0) -> float:
    """Mean TVD of an exact multinomial sample of size n: the noise floor a perfect sampler shows."""
    rng = np.random.default_rng(seed)
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    return float(np.mean([tvd(rng.multinomial(n, probs), probs) for _ in range(reps)]))
