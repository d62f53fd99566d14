"""The transformers processor chain, and a plain numpy statement of spec_edge's filter rules
(docs/FILTERS.md), for the filter tests."""

from __future__ import annotations

import numpy as np
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


def transformers_processors(T: float, top_k: int, top_p: float, min_p: float,
                            penalty: float) -> LogitsProcessorList:
    """The processors `generate()` builds for these sampling settings, in its order."""
    procs = []
    if penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty))
    if T != 1.0:
        procs.append(TemperatureLogitsWarper(T))
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    if min_p:
        procs.append(MinPLogitsWarper(min_p))
    return LogitsProcessorList(procs)


def transformers_chain(x: torch.Tensor, T: float, top_k: int, top_p: float, min_p: float,
                       penalty: float, prev: list[int]) -> torch.Tensor:
    """One row [V] through the transformers chain."""
    ids = torch.tensor([[t for t in prev if t >= 0]], dtype=torch.long)
    return transformers_processors(T, top_k, top_p, min_p, penalty)(ids, x[None].clone())[0]


def penalized(x: np.ndarray, penalty: float, prev) -> np.ndarray:
    y = x.astype(np.float32).copy()
    pen = np.float32(penalty)
    for t in {int(t) for t in prev if t >= 0}:
        y[t] = y[t] * pen if y[t] < 0 else y[t] / pen
    return y


def documented_filter(x: np.ndarray, T: float, top_k: int, top_p: float, min_p: float,
                      penalty: float = 1.0, prev=()) -> np.ndarray:
    """docs/FILTERS.md in numpy, masses in float64: the kept scores y / T, others -inf."""
    y = penalized(x, penalty, prev)
    out = np.full_like(y, -np.inf)
    if T == 0:
        j = int(np.argmax(y))
        out[j] = y[j]
        return out
    s = (y / np.float32(T)).astype(np.float32)
    keep = np.ones(len(s), dtype=bool)
    if top_k:
        keep &= s >= np.sort(s)[-top_k]
    def probs():
        e = np.where(keep, np.exp(s.astype(np.float64) - s[keep].max()), 0.0)
        return e / e.sum()
    if top_p < 1.0:
        pr = probs()
        values = np.unique(s[keep])[::-1]  # descending
        mass_above = np.concatenate([[0.0], np.cumsum([pr[s == v].sum() for v in values])[:-1]])
        kept_values = values[mass_above < np.float32(top_p)]
        keep &= s >= kept_values.min()
    if min_p:
        pr = probs()
        fail = keep & (pr < np.float32(min_p) * pr.max())
        if fail.any():
            keep &= s > s[fail].max()
    out[keep] = s[keep]
    return out


def filtered_law(x: np.ndarray, T: float, *filters) -> np.ndarray:
    """The distribution sampling draws from: softmax of the documented filter's output."""
    s = documented_filter(x, T, *filters).astype(np.float64)
    e = np.where(np.isinf(s), 0.0, np.exp(s - s.max()))
    return e / e.sum()


def near_boundary(x: np.ndarray, T: float, top_k: int, top_p: float, min_p: float, penalty: float,
                  prev, j: int, tol: float = 1e-5) -> bool:
    """Whether token j sits within float rounding of the top-p or min-p boundary: the mass
    strictly above it is within `tol` of top_p, or its probability ratio to the maximum is
    within a relative `tol` of min_p (float64, over the top-k set)."""
    s = (penalized(x, penalty, prev) / np.float32(T)).astype(np.float32).astype(np.float64)
    keep = s >= np.sort(s)[-top_k] if top_k else np.ones(len(s), dtype=bool)
    e = np.where(keep, np.exp(s - s[keep].max()), 0.0)
    probs = e / e.sum()
    above = probs[s > s[j]].sum()
    if top_p < 1.0 and abs(above - top_p) <= tol:
        return True
    return bool(min_p and abs(e[j] - min_p) <= tol * min_p)
