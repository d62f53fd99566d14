"""filter_logits and filtered sample: the kept set of the transformers chain, sort-free; draws
from the filtered law, never a masked token; reproducible, independent streams."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import spec_edge
from filter_ref import documented_filter, filtered_law, near_boundary, transformers_chain
from stats_utils import chisquare_pvalue, exact_sampler_tvd_floor, tvd

F = spec_edge.Filters


# ---- kept-set equivalence with transformers ---------------------------------------------------

KINDS = ["normal", "peaked", "flat", "ties_at_top_k", "top_p_at_cumulative_mass", "quantized"]


def random_row(kind: str, V: int, g: torch.Generator, top_k: int) -> torch.Tensor:
    scale = float(torch.empty(()).uniform_(0.5, 4.0, generator=g))
    x = torch.randn(V, generator=g) * scale
    if kind == "peaked":
        x[int(torch.randint(0, V, (), generator=g))] += 25.0
    elif kind == "flat":
        x = torch.randn(V, generator=g) * 1e-3
    elif kind == "quantized":
        x = torch.round(x)
    elif kind == "ties_at_top_k" and top_k:
        order = torch.argsort(x, descending=True)
        x[order[max(0, top_k - 3):top_k + 3]] = float(x[order[min(top_k, V) - 1]])
    return x


def planted_top_p(x: torch.Tensor, T: float, top_k: int, g: torch.Generator) -> float:
    """A top-p equal to the exact cumulative mass of the m largest (after top-k) scores."""
    s = x.double() / T
    if top_k:
        s = torch.where(s >= torch.sort(s, descending=True).values[top_k - 1], s, -math.inf)
    probs = torch.sort(torch.softmax(s, -1), descending=True).values
    m = int(torch.randint(1, max(2, min(20, int((probs > 0).sum()))), (), generator=g))
    return float(min(1.0, probs[:m].sum()))


def draw_params(kind: str, V: int, g: torch.Generator) -> dict:
    r = lambda: float(torch.rand((), generator=g))
    p = {
        "T": [0.0, 0.5, 0.8, 1.0, 1.7][int(torch.randint(0, 5, (), generator=g))] if r() < 0.9 else 0.0,
        "top_k": int(torch.randint(1, min(V, 200), (), generator=g)) if r() < 0.6 else 0,
        "top_p": round(0.2 + 0.8 * r(), 3) if r() < 0.6 else 1.0,
        "min_p": round(0.3 * r(), 3) if r() < 0.5 else 0.0,
        "penalty": 1.0 + r() if r() < 0.3 else (0.7 if r() < 0.1 else 1.0),
    }
    if kind == "ties_at_top_k" and not p["top_k"]:
        p["top_k"] = int(torch.randint(1, min(V, 60), (), generator=g))
    return p


def compare_row(ours: torch.Tensor, theirs: torch.Tensor, x, params, prev):
    """(n symmetric-difference tokens, their mass under transformers' filtered law, explained)."""
    ko, kt = ~torch.isinf(ours), ~torch.isinf(theirs)
    diff = ko != kt
    if not diff.any():
        assert torch.equal(ours[ko], theirs[kt]), "kept scores differ"
        return 0, 0.0, "exact"
    # Differences are allowed only (a) among scores tied with a score both keep (top-p ties,
    # which transformers resolves by its unstable sort) or (b) within float rounding of a
    # top-p / min-p boundary; the documented rule in float64 decides which.
    s = torch.where(ko, ours, theirs)
    tied = all(bool(((s == s[j]) & ko & kt).any()) for j in torch.nonzero(diff)[:, 0])
    probs = torch.softmax(torch.where(kt | ko, s, -math.inf).double(), -1)
    mass = float(probs[diff].sum())
    if tied:
        return int(diff.sum()), mass, "tie"
    args = (x.numpy(), params["T"], params["top_k"], params["top_p"], params["min_p"], params["penalty"], prev)
    exact = ~np.isinf(documented_filter(*args[:5], params["penalty"], prev))
    for j in torch.nonzero(diff)[:, 0].tolist():
        assert near_boundary(*args, j), (
            f"token {j} differs off any boundary: {params}, ours keeps {torch.nonzero(ko)[:, 0].tolist()}, "
            f"transformers {torch.nonzero(kt)[:, 0].tolist()}")
        # Beyond spec_edge's own rounding (its masses are within 2e-7 relative), the side it
        # takes is the rule's in float64: the difference is transformers' float32 cumsum.
        if not near_boundary(*args, j, tol=1e-6):
            assert bool(ko[j]) == bool(exact[j]), f"token {j}: spec_edge leaves the float64 rule ({params})"
    return int(diff.sum()), mass, "rounding"


SIZES = [(111, 1500, 4), (32000, 120, 4), (50257, 40, 2), (128256, 25, 2)]


@pytest.mark.parametrize("V,calls,B", SIZES, ids=[str(s[0]) for s in SIZES])
def test_kept_set_equals_the_transformers_chain(V, calls, B, record_property):
    g = torch.Generator().manual_seed(V)
    worst = {"tie": 0.0, "rounding": 0.0, "rounding_planted": 0.0}
    counts = {"exact": 0, "tie": 0, "rounding": 0}
    for call in range(calls):
        kind = KINDS[call % len(KINDS)]
        rows = [draw_params(kind, V, g) for _ in range(B)]
        xs = torch.stack([random_row(kind, V, g, r["top_k"]) for r in rows])
        for r, x in zip(rows, xs):
            if kind == "top_p_at_cumulative_mass" and r["T"] > 0:
                r["top_p"] = planted_top_p(x, r["T"], r["top_k"], g)
        prev = torch.randint(-1, V, (B, 24), generator=g)
        per_row = call % 2 == 0  # per-row tensors, or the first row's values as scalars
        if not per_row:
            rows = [dict(rows[0]) for _ in range(B)]
        filters = F(
            top_k=torch.tensor([r["top_k"] for r in rows]) if per_row else rows[0]["top_k"],
            top_p=torch.tensor([r["top_p"] for r in rows]) if per_row else rows[0]["top_p"],
            min_p=torch.tensor([r["min_p"] for r in rows]) if per_row else rows[0]["min_p"],
            repetition_penalty=torch.tensor([r["penalty"] for r in rows]) if per_row else rows[0]["penalty"],
            prev_tokens=prev)
        temps = torch.tensor([r["T"] for r in rows]) if per_row else rows[0]["T"]
        ours = spec_edge.filter_logits(xs, temps, filters=filters)
        for b, r in enumerate(rows):
            pv = prev[b].tolist()
            if r["T"] == 0:  # greedy: transformers takes the argmax of the penalized logits
                y = transformers_chain(xs[b], 1.0, 0, 1.0, 0.0, r["penalty"], pv)
                assert int(torch.argmax(ours[b])) == int(torch.argmax(y))
                assert int((~torch.isinf(ours[b])).sum()) == 1
                counts["exact"] += 1
                continue
            theirs = transformers_chain(xs[b], r["T"], r["top_k"], r["top_p"], r["min_p"], r["penalty"], pv)
            n, mass, how = compare_row(ours[b], theirs, xs[b], r, pv)
            counts[how] += 1
            key = "rounding_planted" if how == "rounding" and kind == "top_p_at_cumulative_mass" else how
            if how != "exact":
                worst[key] = max(worst[key], mass)
    summary = f"V={V}: {counts}, worst symmetric-difference mass {worst}"
    print(summary)
    record_property("summary", summary)


def test_top_k_ties_are_all_kept():
    x = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0, 3.0]])
    got = spec_edge.filter_logits(x, 1.0, filters=F(top_k=2))
    assert (~torch.isinf(got)).sum() == 5
    assert torch.equal(torch.isinf(got), torch.isinf(transformers_chain(x[0], 1.0, 2, 1.0, 0, 1.0, [])[None]))


def test_top_p_boundary_at_exact_mass_removes_the_token_as_transformers_does():
    # probabilities 1/2, 1/4, 1/8, 1/8: mass above the third token is exactly 3/4
    x = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125]]))
    for top_p, kept in [(0.75, 2), (0.7500001, 4), (0.5, 1), (0.5000001, 2)]:
        got = spec_edge.filter_logits(x, 1.0, filters=F(top_p=top_p))
        assert int((~torch.isinf(got)).sum()) == kept, top_p


def test_penalty_applies_once_per_distinct_token_and_skips_padding():
    x = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    prev = torch.tensor([[0, 0, 0, 1, -1, -1]])
    got = spec_edge.filter_logits(x, 1.0, filters=F(repetition_penalty=2.0, prev_tokens=prev))
    assert got.tolist() == [[1.0, -4.0, 1.0, 0.5]]
    want = transformers_chain(x[0], 1.0, 0, 1.0, 0.0, 2.0, [0, 0, 0, 1])
    assert torch.equal(got[0], want)


def test_greedy_uses_the_penalized_argmax():
    x = torch.tensor([[3.0, 2.9, 0.0]])
    prev = torch.tensor([0])
    assert spec_edge.sample(x, 0.0, filters=F(repetition_penalty=1.5, prev_tokens=prev)).item() == 1
    out = spec_edge.filter_logits(x, 0.0, filters=F(repetition_penalty=1.5, prev_tokens=prev))
    assert torch.equal(out, torch.tensor([[-math.inf, 2.9, -math.inf]]))


def test_greedy_with_the_penalty_finds_a_plus_inf_maximum():
    # +inf - ymax is NaN, so the search for the tokens at the maximum needs its own path; a
    # finite logit that the penalty overflows to +inf is such a maximum too (the first one wins).
    inf = math.inf
    for x, prev, want in [([1.0, inf, 3.0, 0.5], [2], 1), ([3e38, 1.0, inf], [0], 0),
                          ([1.0, 3e38, inf], [0], 2)]:
        f = F(repetition_penalty=0.5, prev_tokens=torch.tensor(prev))
        row = torch.tensor([x])
        assert spec_edge.sample(row, 0.0, filters=f).item() == want
        out = spec_edge.filter_logits(row, 0.0, filters=f)
        assert torch.isinf(out).sum() == len(x) and out[0, want] == inf
        t = torch.stack([row[0], row[0]])[None]
        r = spec_edge.verify(t, t[:, :1], torch.tensor([[want]]), 0.0, filters=f)
        assert r.tokens.tolist() == [[want, want]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_filter_their_float_values(dtype):
    x = (3 * torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))).to(dtype)
    f = F(top_k=40, top_p=0.9, min_p=0.02, repetition_penalty=1.2, prev_tokens=torch.arange(0, 50)[None])
    got = spec_edge.filter_logits(x, 0.7, filters=f)
    assert got.dtype == dtype
    assert torch.equal(got, spec_edge.filter_logits(x.float(), 0.7, filters=f).to(dtype))


def test_disabled_filters_equal_plain_sampling():
    x = torch.randn(64, 500, generator=torch.Generator().manual_seed(3))
    neutral = F(top_k=torch.zeros(64, dtype=torch.long), top_p=torch.ones(64), min_p=torch.zeros(64),
                repetition_penalty=torch.ones(64), prev_tokens=torch.randint(0, 500, (64, 8)))
    assert torch.equal(spec_edge.sample(x, 0.9, seed=4, filters=neutral), spec_edge.sample(x, 0.9, seed=4))
    assert torch.equal(spec_edge.filter_logits(x, 0.9, filters=neutral), x / 0.9)


# ---- the sampler against the filtered law ----------------------------------------------------

N = 200_000
ALPHA = 1e-4
ROW = torch.tensor([2.0, 1.5, 1.4, 1.0, 0.6, 0.2, -0.1, -0.5, -1.0, -2.0, -3.0, 0.9])
PREV = torch.tensor([0, 3, 3, -1])
CONFIGS = {
    "full": (0.8, F(top_k=8, top_p=0.9, min_p=0.05, repetition_penalty=1.3, prev_tokens=PREV)),
    "top_p": (1.0, F(top_p=0.8)),
    "min_p": (0.7, F(min_p=0.1)),
    "top_k": (1.3, F(top_k=5)),
}


def config_law(name: str) -> np.ndarray:
    T, f = CONFIGS[name]
    return filtered_law(ROW.numpy(), T, int(f.top_k), float(f.top_p), float(f.min_p),
                        float(f.repetition_penalty), [] if f.prev_tokens is None else f.prev_tokens.tolist())


def draws(name: str, n: int = N, seed: int = 0, offset: int = 0) -> np.ndarray:
    T, f = CONFIGS[name]
    return spec_edge.sample(ROW[None].expand(n, -1), T, seed=seed, offset=offset, filters=f).numpy()


@pytest.mark.parametrize("name", CONFIGS)
def test_sampler_matches_the_filtered_law(name):
    law = config_law(name)
    T, f = CONFIGS[name]
    prev = [] if f.prev_tokens is None else f.prev_tokens.tolist()
    theirs = transformers_chain(ROW, T, int(f.top_k), float(f.top_p), float(f.min_p),
                                float(f.repetition_penalty), prev)
    assert np.array_equal(law > 0, ~torch.isinf(theirs).numpy())  # the law is transformers' kept set
    counts = np.bincount(draws(name), minlength=len(ROW))
    assert chisquare_pvalue(counts, law) > ALPHA
    assert tvd(counts, law) < 4 * exact_sampler_tvd_floor(law, N)


@pytest.mark.parametrize("name", CONFIGS)
def test_negative_control_sampling_before_masking_fails(name):
    T, f = CONFIGS[name]
    y = torch.from_numpy(documented_filter(ROW.numpy(), T, 0, 1.0, 0.0, float(f.repetition_penalty),
                                           [] if f.prev_tokens is None else f.prev_tokens.tolist()))
    unmasked = torch.multinomial(torch.softmax(y.double(), -1), N, replacement=True,
                                 generator=torch.Generator().manual_seed(0))
    assert chisquare_pvalue(np.bincount(unmasked.numpy(), minlength=len(ROW)), config_law(name)) < ALPHA


def test_masked_tokens_are_never_drawn(stat_full):
    n = 10_000_000 if stat_full else 1_000_000
    name = "full"
    law = config_law(name)
    masked = np.flatnonzero(law == 0)
    drawn = np.zeros(len(ROW), dtype=np.int64)
    for chunk in range(n // 500_000):
        drawn += np.bincount(draws(name, 500_000, offset=chunk), minlength=len(ROW))
    assert drawn[masked].sum() == 0 and drawn.sum() == n
    # the control: the same number of unfiltered draws hits the masked tokens
    T, _ = CONFIGS[name]
    control = torch.multinomial(torch.softmax(ROW / T, -1), 200_000, replacement=True)
    assert np.isin(control.numpy(), masked).sum() > 0


def test_same_seed_same_tokens_and_independent_streams():
    a, b = draws("top_p", 100_000, seed=5, offset=1), draws("top_p", 100_000, seed=5, offset=1)
    assert np.array_equal(a, b)
    c = draws("top_p", 100_000, seed=5, offset=2)
    n = 100_000
    limit = 5 / math.sqrt(n)
    top = lambda t: (t == 0).astype(np.float64)  # the most probable token as a 0/1 variable
    assert abs(np.corrcoef(top(a[:-1]), top(a[1:]))[0, 1]) < limit  # neighbouring rows
    assert abs(np.corrcoef(top(a), top(c))[0, 1]) < limit  # neighbouring offsets
    assert (a != c).mean() > 0.3
    d = draws("top_p", 100_000, seed=6, offset=1)
    assert abs(np.corrcoef(top(a), top(d))[0, 1]) < limit  # neighbouring seeds


def test_per_row_parameters_apply_to_their_row():
    x = ROW[None].expand(3, -1).contiguous()
    f = F(top_k=torch.tensor([1, 0, 3]), top_p=torch.tensor([1.0, 0.3, 1.0]))
    got = spec_edge.filter_logits(x, torch.tensor([1.0, 1.0, 0.5]), filters=f)
    for b, (T, k, p) in enumerate([(1.0, 1, 1.0), (1.0, 0, 0.3), (0.5, 3, 1.0)]):
        assert torch.equal(got[b], transformers_chain(ROW, T, k, p, 0.0, 1.0, []))


# ---- filters inside verify --------------------------------------------------------------------

def test_verify_penalizes_the_draft_tokens_before_each_row():
    target = torch.zeros(1, 3, 5)
    target[0, 0, 2] = 3.0
    target[0, 1, 2], target[0, 1, 4] = 3.0, 2.9  # once token 2 is in the context, 4 wins
    target[0, 2, 1] = 1.0
    draft = torch.zeros(1, 2, 5)
    tokens = torch.tensor([[2, 2]])
    plain = spec_edge.verify(target, draft, tokens, 0.0)
    assert plain.tokens.tolist() == [[2, 2, 1]]
    penalized = spec_edge.verify(target, draft, tokens, 0.0, filters=F(repetition_penalty=1.5,
                                                                         prev_tokens=torch.tensor([[-1]])))
    assert penalized.tokens.tolist() == [[2, 4, -1]]
    # the same as transformers' greedy step by step over the growing context
    context = []
    for i in range(2):
        y = transformers_chain(target[0, i], 1.0, 0, 1.0, 0.0, 1.5, context)
        context.append(int(torch.argmax(y)))
    assert context == [2, 4]


def test_sampled_verify_draws_from_the_penalized_filtered_target():
    V, n = 8, 200_000
    g = torch.Generator().manual_seed(5)
    target, draft = 2 * torch.randn(2, V, generator=g), 2 * torch.randn(V, generator=g)
    prev = torch.tensor([int(target[0].argmax()), -1, 1])  # the target's favourite was seen
    f = F(top_k=6, top_p=0.95, repetition_penalty=1.4, prev_tokens=prev)
    p0, q0 = (filtered_law(x.numpy(), 0.9, 6, 0.95, 0.0, 1.4, prev.tolist()) for x in (target[0], draft))
    t0 = torch.multinomial(torch.from_numpy(q0), n, replacement=True, generator=g)
    r = spec_edge.verify(target[None].expand(n, 2, V), draft[None, None].expand(n, 1, V), t0[:, None],
                         0.9, seed=1, offset=0, filters=f)
    first = np.bincount(r.tokens[:, 0].numpy(), minlength=V)
    assert chisquare_pvalue(first, p0) > ALPHA
    # the control: the unpenalized target law fails the same test
    assert chisquare_pvalue(first, filtered_law(target[0].numpy(), 0.9, 6, 0.95, 0.0)) < ALPHA


def test_sampled_verify_penalizes_accepted_draft_tokens_in_later_rows():
    """Row 1 is drawn with token 2 (accepted at row 0) in the penalty's context: with penalty
    100 its logit 5.0 becomes 0.05 and token 4 (4.9) takes almost all the mass."""
    n, V = 4000, 6
    target = torch.full((n, 2, V), -30.0)
    target[:, 0, 2] = 5.0  # row 0: token 2, equal to the draft, always accepted
    target[:, 1, 2], target[:, 1, 4] = 5.0, 4.9
    draft = target[:, :1].clone()
    r = spec_edge.verify(target, draft, torch.full((n, 1), 2), 1.0, seed=2, offset=0,
                         filters=F(repetition_penalty=100.0, prev_tokens=torch.tensor([-1])))
    assert (r.accept_len == 1).all()
    bonus = np.bincount(r.tokens[:, 1].numpy(), minlength=V)
    law = filtered_law(target[0, 1].numpy(), 1.0, 0, 1.0, 0.0, 100.0, [2])
    assert chisquare_pvalue(bonus, law) > ALPHA
    assert chisquare_pvalue(bonus, filtered_law(target[0, 1].numpy(), 1.0, 0, 1.0, 0.0)) < ALPHA  # control
