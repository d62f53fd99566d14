"""spec_edge's vLLM plugin against vLLM's rejection-sampler contract, on synthetic batches.

Runs where vLLM is installed (`make test-vllm`, in .venv-vllm); skips elsewhere. The plugin's
greedy results must equal vLLM's own implementation's, batch for batch (ragged drafts, all
accepted, none accepted, vLLM's -1 padding); its random results must keep the contract's laws
and the target's distribution (chi-square, with a negative control that must fail).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

vllm = pytest.importorskip("vllm")
pytest.importorskip("vllm.v1.sample.rejection_sampler")
scipy_stats = pytest.importorskip("scipy.stats")

import spec_edge  # noqa: E402
from spec_edge.integrations import vllm as plugin  # noqa: E402


@pytest.fixture(scope="module")
def sampler():
    """A RejectionSampler with the plugin installed (vLLM's own forward in plugin._original)."""
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    current_platform.register_triton_kernel_overrides()  # vLLM's CPU kernels, as its worker does
    with pytest.MonkeyPatch.context() as env:
        env.setenv(plugin.ENV, "1")
        plugin.register()
    assert plugin._original, "the plugin did not install"
    return RejectionSampler(Sampler())


def spec_metadata(drafts: list[list[int]]):
    """vLLM's metadata for a batch whose logits hold each request's draft positions, then its
    bonus position."""
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    metadata = SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
    target, bonus, row = [], [], 0
    for d in drafts:
        target += range(row, row + len(d))
        bonus.append(row + len(d))
        row += len(d) + 1
    metadata.target_logits_indices = torch.tensor(target, dtype=torch.int32)
    metadata.bonus_logits_indices = torch.tensor(bonus, dtype=torch.int32)
    metadata.logits_indices = torch.arange(row, dtype=torch.int32)
    return metadata


def sampling(rows: int, temperature=None, top_k=None, top_p=None, generators=None):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    def per_row(value, dtype):
        return None if value is None else torch.full((rows,), value, dtype=dtype)
    greedy = temperature is None
    return SamplingMetadata(
        temperature=per_row(temperature, torch.float32), all_greedy=greedy, all_random=not greedy,
        top_p=per_row(top_p, torch.float32), top_k=per_row(top_k, torch.int32), generators=generators or {},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(rows), presence_penalties=torch.zeros(rows),
        repetition_penalties=torch.ones(rows), output_token_ids=[[] for _ in range(rows)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
        spec_token_ids=[[] for _ in range(rows)])


def both(sampler, drafts, logits, sm):
    """The plugin's tokens and vLLM's own, for the same batch."""
    metadata = spec_metadata(drafts)
    ours = sampler(metadata, None, logits.clone(), sm).sampled_token_ids
    theirs = plugin._original["forward"](sampler, metadata, None, logits.clone(), sm).sampled_token_ids
    return ours, theirs


def random_batch(rng: np.random.Generator, rows: int, vocab: int, k_max: int, hit: float):
    """Ragged drafts (0..k_max per request) that match the target's argmax with probability
    ``hit``; an occasional -1 (vLLM's padding)."""
    counts = rng.integers(0, k_max + 1, rows)
    logits = torch.from_numpy(rng.normal(0, 3, (int(counts.sum()) + rows, vocab)).astype(np.float32))
    top = logits.argmax(-1).tolist()
    drafts, row = [], 0
    for n in counts:
        d = [top[row + j] if rng.random() < hit else int(rng.integers(vocab)) for j in range(n)]
        if n and rng.random() < 0.1:
            d[int(rng.integers(n))] = -1
        drafts.append(d)
        row += n + 1
    return drafts, logits


@pytest.mark.parametrize("k_max", [2, 3, 4, 5])
def test_greedy_results_are_vllms(sampler, k_max):
    rng = np.random.default_rng(k_max)
    for _ in range(40):
        drafts, logits = random_batch(rng, int(rng.integers(1, 9)), 50, k_max, hit=0.8)
        ours, theirs = both(sampler, drafts, logits, sampling(len(drafts)))
        assert ours.dtype == theirs.dtype == torch.int32
        assert torch.equal(ours, theirs), (drafts, ours, theirs)


def test_greedy_all_accepted_none_accepted_and_padding(sampler):
    logits = torch.randn(3 + 1 + 1 + 1 + 2 + 1, 20)  # each request's drafts, then its bonus row
    top = logits.argmax(-1).tolist()
    wrong = [(t + 1) % 20 for t in top]
    drafts = [top[0:3], wrong[4:5], [-1, top[7]]]  # all accepted, none accepted, padding first
    ours, theirs = both(sampler, drafts, logits, sampling(3))
    assert torch.equal(ours, theirs)
    assert ours[0].tolist() == top[0:3] + [top[3]]  # the drafts, then the bonus token
    assert ours[1].tolist() == [top[4], -1, -1, -1]  # the correction, then padding
    assert ours[2].tolist() == [top[6], -1, -1, -1]  # a -1 draft is no proposal


def test_prefill_steps_sample_the_bonus_tokens_alone(sampler):
    logits = torch.randn(4, 30)
    ours, theirs = both(sampler, [[], [], [], []], logits, sampling(4))
    assert ours.shape == (4, 1) and torch.equal(ours, theirs)


def test_random_results_keep_the_contracts_laws(sampler):
    rng = np.random.default_rng(1)
    for _ in range(30):
        drafts, logits = random_batch(rng, 8, 40, 4, hit=0.7)
        metadata = spec_metadata(drafts)
        out = sampler(metadata, None, logits.clone(), sampling(8, temperature=0.9, top_k=5)).sampled_token_ids
        top5 = logits.topk(5, -1).indices
        row = 0
        for d, tokens in zip(drafts, out.tolist()):
            n = len(d)
            emitted = [t for t in tokens if t != -1]
            assert tokens[:len(emitted)] == emitted and 1 <= len(emitted) <= n + 1  # a prefix, then -1
            kept = len(emitted) - 1
            assert emitted[:kept] == d[:kept] and -1 not in d[:kept]
            for j, token in enumerate(emitted):  # every token from its position's top 5
                assert token in top5[row + j].tolist()
            row += n + 1


def first_token_counts(sampler, logits: torch.Tensor, draft: int, trials: int, temperature: float) -> np.ndarray:
    """How often each token comes first over ``trials`` requests with one draft-free proposal
    (``draft``) on the same target rows."""
    drafts = [[draft]] * trials
    batch = logits.repeat(trials, 1)
    out = sampler(spec_metadata(drafts), None, batch, sampling(trials, temperature=temperature)).sampled_token_ids
    return np.bincount(out[:, 0].numpy(), minlength=logits.shape[1])


def test_the_first_token_is_distributed_as_the_target(sampler, monkeypatch):
    # Whatever the n-gram proposes, the first emitted token is distributed as softmax(logits / T):
    # accepted with probability p(draft), else drawn from the residual norm(max(0, p - q)). The
    # negative control recovers from p itself (no residual renormalisation) and over-weights
    # the draft: the same test must reject it.
    torch.manual_seed(0)
    logits = torch.tensor([[1.0, 0.5, 0.0, -0.5, 2.0, 0.2], [0.0] * 6])  # position 0, then the bonus position
    p = torch.softmax(logits[0].double() / 0.8, -1).numpy()
    trials = 40_000

    def p_value(counts):
        return scipy_stats.chisquare(counts, trials * p).pvalue
    assert p_value(first_token_counts(sampler, logits, 4, trials, 0.8)) > 1e-3

    verify = spec_edge.verify

    def without_residual(rows, draft_logits, drafts, **kwargs):
        result = verify(rows, draft_logits, drafts, **kwargs)
        rejected = result.accept_len < kwargs["num_draft"]
        redrawn = torch.multinomial(torch.softmax(rows[:, 0] / kwargs["temperature"][:, None], -1), 1)[:, 0]
        result.tokens[:, 0] = torch.where(rejected, redrawn, result.tokens[:, 0])
        return result
    monkeypatch.setattr(spec_edge, "verify", without_residual)
    assert p_value(first_token_counts(sampler, logits, 4, trials, 0.8)) < 1e-6


def test_what_the_plugin_does_not_serve_goes_to_vllms_code(sampler, caplog):
    # Draft probabilities (draft-model methods) and a setting the op refuses (a NaN temperature):
    # vLLM's own implementation answers, and the log says why, once.
    drafts = [[1, 2]]
    logits = torch.randn(3, 10)
    metadata = spec_metadata(drafts)
    with caplog.at_level(logging.WARNING, logger="vllm.spec_edge"):
        probs = torch.softmax(torch.randn(2, 10), -1)
        out = sampler(metadata, probs, logits.clone(), sampling(1, temperature=1.0)).sampled_token_ids
        assert out.shape == (1, 3)
        sampler(metadata, probs, logits.clone(), sampling(1, temperature=1.0))
        out = sampler(metadata, None, logits.clone(), sampling(1, temperature=float("nan"))).sampled_token_ids
        assert out.shape == (1, 3)
    said = [r.getMessage() for r in caplog.records]
    assert sum("draft probabilities" in m for m in said) == 1, said
    assert any("spec_edge.verify refuses" in m and "temperature" in m for m in said), said


def test_the_plugin_stays_off_without_its_switch_and_on_other_vllm_releases(monkeypatch, caplog):
    from vllm.v1.sample.sampler import Sampler
    monkeypatch.setattr(plugin, "_original", {})
    monkeypatch.setattr(Sampler, "sample", Sampler.sample)
    monkeypatch.delenv(plugin.ENV, raising=False)
    plugin.register()
    assert not plugin._original
    monkeypatch.setenv(plugin.ENV, "1")
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with caplog.at_level(logging.WARNING, logger="vllm.spec_edge"):
        plugin.register()
    assert not plugin._original
    assert "vLLM 0.99.0 is not a release this plugin was written for (0.32.x); it stays off" in caplog.text


# ---- the final-token sampler (steps without drafts) -------------------------------------------

def min_p_processor(rows: int, value: float):
    """vLLM's min-p processor holding ``value`` for every row (its state as its update leaves it)."""
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor
    processor = MinPLogitsProcessor.__new__(MinPLogitsProcessor)
    processor.min_p_count, processor.min_p = rows, torch.full((rows, 1), value)
    return processor


def test_greedy_sampling_is_vllms(sampler):
    logits = torch.randn(16, 300)
    ours, _ = sampler.sampler.sample(logits.clone(), sampling(16))
    theirs, _ = plugin._original["sample"](sampler.sampler, logits.clone(), sampling(16))
    assert torch.equal(ours.long(), theirs.long())


def test_min_p_keeps_the_tokens_it_should(sampler):
    # Every token drawn has p >= min_p * p_max; the negative control (min-p dropped) draws
    # below the bar from the same logits.
    from vllm.v1.sample.logits_processor import LogitsProcessors
    rows = 4000
    logits = torch.linspace(0, 4, 12).repeat(rows, 1)
    p = torch.softmax(logits[0], -1)
    allowed = set(torch.nonzero(p >= 0.3 * p.max()).flatten().tolist())
    sm = sampling(rows, temperature=1.0)
    sm.logitsprocs = LogitsProcessors([min_p_processor(rows, 0.3)])
    drawn = set(sampler.sampler.sample(logits.clone(), sm)[0].tolist())
    assert drawn == allowed
    sm.logitsprocs = LogitsProcessors()
    assert not set(sampler.sampler.sample(logits.clone(), sm)[0].tolist()) <= allowed


def test_seeded_rows_draw_by_their_seed_alone(sampler):
    def generators(seeds):
        return {row: torch.Generator().manual_seed(seed) for row, seed in seeds.items()}
    logits = torch.randn(1, 1000).repeat(4, 1)
    first, _ = sampler.sampler.sample(logits.clone(), sampling(4, 1.0, generators=generators({0: 7, 2: 7, 3: 8})))
    again, _ = sampler.sampler.sample(logits.clone(), sampling(4, 1.0, generators=generators({1: 7, 3: 7})))
    assert first[0] == first[2] == again[1] == again[3]  # seed 7 in any row
    draws = {sampler.sampler.sample(logits[:1].clone(), sampling(1, 1.0, generators=generators({0: s})))[0].item()
             for s in range(20)}
    assert len(draws) > 5  # the seed does decide


def test_min_p_with_top_p_goes_to_vllms_code(sampler, caplog):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    sm = sampling(2, temperature=1.0, top_p=0.9)
    sm.logitsprocs = LogitsProcessors([min_p_processor(2, 0.1)])
    with caplog.at_level(logging.WARNING, logger="vllm.spec_edge"):
        tokens, _ = sampler.sampler.sample(torch.randn(2, 50), sm)
    assert tokens.shape == (2,)
    assert "min-p together with top-k or top-p; vLLM's own code serves it" in caplog.text
