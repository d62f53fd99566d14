"""sample: exact draws from softmax(logits / T), reproducible per (seed, offset), masked tokens never."""

import math

import numpy as np
import pytest
import torch

import spec_edge
from stats_utils import chisquare_pvalue

N = 200_000
ALPHA = 1e-4


def law(logits: torch.Tensor, T: float) -> np.ndarray:
    return torch.softmax(logits.double() / T, -1).numpy()


CASES = {
    "peaked": torch.tensor([4.0, 1.0, 0.5, -1.0, 0.0, 2.5, -3.0]),
    "flat": torch.tensor([0.1, 0.0, -0.1, 0.05, 0.0, 0.02, -0.05]),
    "masked": torch.tensor([1.0, -math.inf, 0.5, -math.inf, 2.0, 0.0, -math.inf]),
}


def draws(logits, T, n=N, seed=0, offset=0, dtype=torch.float32):
    return spec_edge.sample(logits.to(dtype)[None].expand(n, -1), temperature=T, seed=seed, offset=offset)


@pytest.mark.parametrize("T", [0.5, 1.0, 1.7])
@pytest.mark.parametrize("name", CASES)
def test_distribution_matches_softmax_at_temperature(name, T):
    logits = CASES[name]
    counts = np.bincount(draws(logits, T).numpy(), minlength=len(logits))
    assert chisquare_pvalue(counts, law(logits, T)) > ALPHA


@pytest.mark.parametrize("name", CASES)
def test_negative_controls_fail_the_same_test(name):
    """A sampler that ignores the temperature, and one that treats masked logits as 0."""
    logits, T = CASES[name], 0.5
    g = torch.Generator().manual_seed(0)
    ignores_temperature = torch.multinomial(torch.softmax(logits, -1), N, replacement=True, generator=g)
    assert chisquare_pvalue(np.bincount(ignores_temperature.numpy(), minlength=len(logits)), law(logits, T)) < ALPHA
    if name == "masked":
        unmasked = torch.where(torch.isinf(logits), torch.zeros_like(logits), logits)
        wrong = torch.multinomial(torch.softmax(unmasked / T, -1), N, replacement=True, generator=g)
        assert chisquare_pvalue(np.bincount(wrong.numpy(), minlength=len(logits)), law(logits, T)) < ALPHA


def multi_block_row() -> torch.Tensor:
    """V=300 (five blocks of 64): the first block all -inf, the maximum in the last one (the top
    block, whose envelope weight is exact), so most proposals come from blocks whose envelope is
    the bound of their maximum, and are rejected or kept."""
    g = torch.Generator().manual_seed(3)
    logits = 0.6 * torch.randn(300, generator=g)
    logits[:64] = -math.inf
    logits[290] = 2.5
    return logits


def envelope_law(logits: torch.Tensor, T: float) -> np.ndarray:
    """The law of the proposal alone, without the rejection step: a token weighs the exp bound of
    its block's maximum (the chord 2^floor(w) (1 + frac(w))), a token of the top block its
    softmax numerator."""
    w = (logits.double() - logits.max()) / T / math.log(2)
    chord = np.nan_to_num((2.0 ** torch.floor(w) * (1 + w - torch.floor(w))).numpy())
    weight = np.empty_like(chord)
    for base in range(0, len(chord), 64):
        weight[base:base + 64] = chord[base:base + 64].max()
    top = int(torch.argmax(logits)) // 64 * 64
    weight[top:top + 64] = np.exp(w[top:top + 64].numpy() * math.log(2))
    return weight


def test_multi_block_rows_follow_the_law():
    logits, T = multi_block_row(), 0.7
    counts = np.bincount(draws(logits, T).numpy(), minlength=len(logits))
    assert counts[:64].sum() == 0
    assert chisquare_pvalue(counts, law(logits, T)) > ALPHA
    # Negative control: drawing from the proposal without the rejection step fails the test.
    rng = np.random.default_rng(0)
    proposal = envelope_law(logits, T)
    wrong = rng.multinomial(N, proposal / proposal.sum())
    assert chisquare_pvalue(wrong, law(logits, T)) < ALPHA


def test_masked_tokens_are_never_drawn():
    logits = torch.full((50,), -math.inf)
    logits[[3, 17, 41]] = torch.tensor([0.0, -20.0, 1.0])  # one allowed token is very unlikely
    tokens = draws(logits, 1.0, n=1_000_000)
    assert set(tokens.unique().tolist()) <= {3, 17, 41}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_sample_from_their_values(dtype):
    logits = CASES["peaked"]
    assert torch.equal(draws(logits, 0.8, n=4096, dtype=dtype), draws(logits.to(dtype).float(), 0.8, n=4096))


def test_reproducible_and_independent_streams():
    logits = torch.randn(4096, 100, generator=torch.Generator().manual_seed(1))
    a = spec_edge.sample(logits, temperature=1.0, seed=5, offset=9)
    assert torch.equal(a, spec_edge.sample(logits, temperature=1.0, seed=5, offset=9))
    assert (a != spec_edge.sample(logits, temperature=1.0, seed=5, offset=10)).float().mean() > 0.5
    assert (a != spec_edge.sample(logits, temperature=1.0, seed=6, offset=9)).float().mean() > 0.5
    # neighbouring rows draw from independent streams: their tokens are uncorrelated
    same = spec_edge.sample(torch.zeros(20000, 2), temperature=1.0, seed=3).double()
    assert abs(float(torch.corrcoef(torch.stack([same[:-1], same[1:]]))[0, 1])) < 5 / math.sqrt(20000)


def test_greedy_and_per_row_temperature():
    logits = torch.tensor([[0.0, 3.0, 3.0], [1.0, 0.0, 0.5]])
    assert spec_edge.sample(logits, temperature=0.0).tolist() == [1, 0]  # ties to the lowest id
    mixed = spec_edge.sample(logits, temperature=torch.tensor([0.0, 1.0]), seed=2)
    assert mixed[0].item() == 1


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(temperature=-1.0), ValueError, r"temperature\[0\] = -1: expected a finite value >= 0"),
    (dict(temperature=math.nan), ValueError, r"temperature\[0\] = nan"),
    (dict(temperature=torch.tensor([1.0, 1.0, 1.0])), ValueError, r"temperature: expected one value or one per batch row \(B=2\), got 3"),
    (dict(logits=torch.zeros(2, 3, 4)), ValueError, r"logits: expected shape \[B, V\]"),
    (dict(logits=torch.zeros(2, 4, dtype=torch.float64)), TypeError, r"logits: unsupported dtype Double"),
    (dict(logits=torch.tensor([[0.0, math.nan], [0.0, 1.0]])), ValueError, r"logits\[0, 1\] = nan: logits must not be NaN or \+inf"),
    (dict(logits=torch.tensor([[0.0, math.inf], [0.0, 1.0]])), ValueError, r"logits\[0, 1\] = inf"),
    (dict(logits=torch.full((2, 3), -math.inf)), ValueError, r"logits\[0\] has no finite logit"),
    (dict(seed=torch.tensor(1.0)), TypeError, r"seed: expected an integer tensor"),
    (dict(logits=torch.tensor([[0.0, 30.0], [0.0, 1.0]]),
          filters=spec_edge.Filters(repetition_penalty=1e-38, prev_tokens=torch.tensor([1]))),
     ValueError, r"logits\[0, 1\] = 30: the repetition penalty 1e-38 makes it \+inf"),
])
def test_bad_input(kwargs, exc, match):
    args = dict(logits=torch.zeros(2, 4), temperature=1.0, seed=0, offset=0)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        spec_edge.sample(**args)


def test_opcheck_and_every_path_agrees():
    logits = 3 * torch.randn(8, 333, generator=torch.Generator().manual_seed(0))
    args = (logits, torch.tensor([0.0, 0.5, 1.0, 2.0, 1.0, 1.0, 0.7, 0.3]), torch.tensor(4), torch.tensor(1))
    torch.library.opcheck(torch.ops.spec_edge.sample.default, args)
    active, results = spec_edge.active_isa(), []
    try:
        for isa in spec_edge.available_isas():
            spec_edge.select_isa(isa)
            results.append(torch.ops.spec_edge.sample(*args))
    finally:
        spec_edge.select_isa(active)
    assert all(torch.equal(r, results[0]) for r in results)


def test_verify_bonus_token_on_multi_block_rows_follows_the_law():
    """verify's bonus token (num_draft 0: the seeded draw from target row 0) reads the same envelope."""
    logits, T = multi_block_row(), 0.7
    target = torch.stack([logits, logits])[None].expand(N, -1, -1)
    draft = logits[None, None].expand(N, 1, -1)
    result = spec_edge.verify(target, draft, torch.zeros(N, 1, dtype=torch.int64), temperature=T, seed=4,
                              num_draft=torch.zeros(N, dtype=torch.int64))
    assert (result.accept_len == 0).all()
    counts = np.bincount(result.tokens[:, 0].numpy(), minlength=len(logits))
    assert counts[:64].sum() == 0
    assert chisquare_pvalue(counts, law(logits, T)) > ALPHA
