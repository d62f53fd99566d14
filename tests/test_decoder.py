"""SpeculativeDecoder: greedy output identical to the target's greedy decode; sampled output
reproducible and distributed as the target."""

import pytest
import torch

import spec_edge
from stats_utils import chisquare_pvalue
from spec_edge.toy import ToyLM


@pytest.fixture(scope="module")
def pair():
    target = ToyLM(vocab=37, seed=0)
    return target, ToyLM(vocab=37, seed=1, base=target, noise=1.5)


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_speculation_equals_target_greedy_decode(pair, k):
    target, draft = pair
    g = torch.Generator().manual_seed(k)
    decoder = spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step, k=k)
    accepted = 0
    for _ in range(12):
        prompt = torch.randint(0, 37, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
        max_new = int(torch.randint(1, 40, (1,), generator=g))
        out = decoder.generate(prompt, max_new)
        assert out == target.greedy_decode(prompt, max_new)
        s = decoder.stats
        assert sum(s.accepted_histogram) == s.rounds and s.accepted + s.rounds == len(out)
        accepted += s.accepted
    assert accepted > 0  # the pair agrees often enough for speculation to matter


def test_eos_stops_generation(pair):
    target, draft = pair
    reference = target.greedy_decode([3, 4], 30)
    eos = reference[7]
    out = spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step, k=4,
                                       eos_token_id=eos).generate([3, 4], 30)
    assert out == reference[:reference.index(eos) + 1]


def test_sampled_mode_reproducible_with_generator(pair):
    target, draft = pair

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        dec = spec_edge.SpeculativeDecoder(draft.sampling_draft_step(g), target.target_step, k=3,
                                           greedy=False, generator=g)
        return dec.generate([1, 2], 40)

    assert run(5) == run(5)
    assert run(5) != run(6)


def _joint_counts(generate, n, vocab):
    counts = torch.zeros(vocab * vocab)
    for _ in range(n):
        a, b = generate()
        counts[a * vocab + b] += 1
    return counts


def test_sampled_mode_two_token_law_and_negative_control():
    """The first two generated tokens follow p(x1) p(x2 | x1) of the target; the same test on
    the draft's own samples (a decoder that skips verification) must fail."""
    vocab, n = 5, 6000
    target = ToyLM(vocab=vocab, seed=10, scale=1.0)
    draft = ToyLM(vocab=vocab, seed=11, base=target, noise=1.0)
    prompt = [2, 3]
    p1 = target.probs(prompt)
    law = torch.stack([p1[a] * target.probs(prompt + [a]) for a in range(vocab)]).reshape(-1).double()
    g = torch.Generator().manual_seed(0)
    dec = spec_edge.SpeculativeDecoder(draft.sampling_draft_step(g), target.target_step, k=2,
                                       greedy=False, generator=g)
    spec = _joint_counts(lambda: dec.generate(prompt, 2), n, vocab)
    draft_only = _joint_counts(lambda: draft.sampling_draft_step(g)(prompt, 2)[0].tolist(), n, vocab)
    alpha = 1e-3
    assert chisquare_pvalue(spec.numpy(), law.numpy()) > alpha
    assert chisquare_pvalue(draft_only.numpy(), law.numpy()) < alpha


def test_decoder_rejects_bad_callbacks(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="k: expected an integer >= 0"):
        spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step, k=-1)
    bad_draft = lambda prefix, k: (torch.zeros(k + 1, dtype=torch.long), None)
    with pytest.raises(ValueError, match=r"draft_step returned tokens of shape \(4,\); expected \[k=3\]"):
        spec_edge.SpeculativeDecoder(bad_draft, target.target_step, k=3).generate([1], 10)
    bad_target = lambda prefix, proposed: target.target_step(prefix, proposed)[:-1]
    with pytest.raises(ValueError, match=r"target_step returned shape \(3, 37\); expected \[k\+1=4, V\]"):
        spec_edge.SpeculativeDecoder(draft.greedy_draft_step, bad_target, k=3).generate([1], 10)
    with pytest.raises(ValueError, match="sampled mode .* needs the draft distribution"):
        spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step, k=3,
                                     greedy=False).generate([1], 10)
    with pytest.raises(ValueError, match="prompt_ids: expected at least one token"):
        spec_edge.SpeculativeDecoder(draft.greedy_draft_step, target.target_step).generate([], 10)
