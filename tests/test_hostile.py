"""Hostile input to the ops, as docs/OPS.md's row rule states it: rows with no finite logit,
rows an op does not read, logits near float max, temperatures that vanish in float32, tensors on
mixed devices. Each case found by probing the ops stays here. (The front ends' cases: the bad
input tests of test_runner.py, test_runtime.py and test_android.py, and tests/test_fuzz_programs.py.)"""

import math

import pytest
import torch

import spec_edge

INF = math.inf
V = 8
TOKENS = torch.tensor([[1, 2]])


def masked_rows(shape, at):
    """Random logits with every logit of row(s) `at` -inf."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    x[at] = -INF
    return x


# ---- a row with no finite logit: an error at every temperature, in every op ---------------------

@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("penalty", [1.0, 1.3], ids=["no_penalty", "penalty"])
def test_a_row_with_no_finite_logit_is_an_error_at_every_temperature(temperature, penalty):
    filters = spec_edge.Filters(repetition_penalty=penalty, prev_tokens=torch.tensor([1, 3]))
    x = masked_rows((2, V), 1)
    for call in (lambda: spec_edge.sample(x, temperature, filters=filters),
                 lambda: spec_edge.filter_logits(x, temperature, filters=filters)):
        with pytest.raises(ValueError, match=r"logits\[1\] has no finite logit \(every token is masked\)"):
            call()
    target = masked_rows((1, 3, V), (0, 0))
    with pytest.raises(ValueError, match=r"target_logits\[0, 0\] has no finite logit"):
        spec_edge.verify(target, torch.randn(1, 2, V), TOKENS, temperature, filters=filters)


def test_verify_greedy_refuses_a_row_with_every_score_minus_inf():
    with pytest.raises(ValueError, match=r"target_probs\[0, 0\] has no finite logit"):
        spec_edge.verify_greedy(masked_rows((1, 3, V), (0, 0)), TOKENS)
    x = torch.full((3, V), -INF)
    x[:, 0] = INF  # +inf is a score verify_greedy takes: its argmax is defined
    assert spec_edge.verify_greedy(x, torch.tensor([0, 0])).next_token == 0


def test_the_penalty_taking_the_last_finite_logit_is_no_finite_logit():
    x = torch.full((1, V), -INF)
    x[0, 5] = -3e38  # * 2 overflows to -inf
    filters = spec_edge.Filters(repetition_penalty=2.0, prev_tokens=torch.tensor([5]))
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"logits\[0\] has no finite logit"):
            spec_edge.sample(x, temperature, filters=filters)


# ---- unread rows: the rows after the deciding one are neither read nor checked -----------------

BAD_ROWS = {"NaN": math.nan, "all -inf": -INF}


def greedy_target():
    """Target logits whose row 0 argmax is 1 (draft token 0 accepted) and row 1 argmax is 5 (draft
    token 1 = 2 rejected): row 2 decides nothing."""
    t = torch.zeros(1, 3, V)
    t[0, 0, 1] = 9.0
    t[0, 1, 5] = 9.0
    return t


@pytest.mark.parametrize("bad", BAD_ROWS, ids=list(BAD_ROWS))
def test_rows_after_the_deciding_one_are_not_read_by_greedy_verification(bad):
    clean = greedy_target()
    damaged = clean.clone()
    damaged[0, 2] = BAD_ROWS[bad]
    for target in (clean, damaged):
        assert spec_edge.verify_greedy(target, TOKENS) == (torch.tensor([1]), torch.tensor([5]))
        r = spec_edge.verify(target, torch.zeros(1, 2, V), TOKENS, 0.0)
        assert r.accept_len.tolist() == [1] and r.tokens.tolist() == [[1, 5, -1]]
    # The control: the same damage in a row that decides is an error.
    decisive = clean.clone()
    decisive[0, 1] = BAD_ROWS[bad]
    with pytest.raises(ValueError, match=r"target_(probs|logits)\[0, 1"):
        spec_edge.verify_greedy(decisive, TOKENS)


@pytest.mark.parametrize("bad", BAD_ROWS, ids=list(BAD_ROWS))
def test_rows_after_the_deciding_one_are_not_read_by_sampled_verification(bad):
    # Row 0 gives the draft token no target mass: a certain rejection at position 0.
    target = torch.zeros(1, 3, V)
    target[0, 0, 1] = -INF
    damaged = target.clone()
    damaged[0, 1:] = BAD_ROWS[bad]
    draft = torch.zeros(1, 2, V)
    results = [spec_edge.verify(t, draft, TOKENS, 1.0, seed=3, offset=0) for t in (target, damaged)]
    assert results[0].accept_len.tolist() == [0]
    assert torch.equal(results[0].tokens, results[1].tokens)
    with pytest.raises(ValueError, match=r"target_logits\[0, 0"):
        spec_edge.verify(damaged.roll(-1, dims=1), draft, TOKENS, 1.0, seed=3, offset=0)


@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "draft_free"])
def test_rows_after_the_deciding_one_are_not_read_by_accept(with_draft):
    target = torch.full((1, 3, V), 1.0)
    target[0, 0, 1] = 0.0  # the draft token has no target mass: rejected at position 0
    damaged = target.clone()
    damaged[0, 1] = -1.0  # a negative probability
    damaged[0, 2] = math.nan
    draft = torch.full((1, 2, V), 1.0) if with_draft else None
    uniforms = torch.full((1, 3), 0.5, dtype=torch.float64)
    results = [spec_edge.accept_with_uniforms(t, draft, TOKENS, uniforms) for t in (target, damaged)]
    assert results[0].n_accepted.tolist() == [0]
    assert results[0] == results[1]
    damaged[0, 0, 3] = -1.0  # the control: in the deciding row it is an error
    with pytest.raises(ValueError, match=r"target_probs\[0, 0, 3\] = -1: probabilities must be finite and >= 0"):
        spec_edge.accept_with_uniforms(damaged, draft, TOKENS, uniforms)


# ---- logits near float max ---------------------------------------------------------------------

@pytest.mark.parametrize("filters", [spec_edge.Filters(), spec_edge.Filters(top_k=3)], ids=["unfiltered", "top_k"])
def test_filter_logits_refuses_what_float_cannot_hold_where_sample_and_verify_work(filters):
    x = torch.full((1, V), 3e38)
    x[0, 0] = -3e38
    with pytest.raises(ValueError, match=r"logits\[0, 1\] = 3e\+38: divided by the temperature 0.5 it overflows float"):
        spec_edge.filter_logits(x, 0.5, filters=filters)
    out = spec_edge.filter_logits(x, 1.0, filters=filters)
    assert torch.isfinite(out[out > -INF]).all() and (out < INF).all()
    assert 1 <= int(spec_edge.sample(x, 0.5, filters=filters, seed=1)) < V
    r = spec_edge.verify(x[:, None].expand(1, 3, V), x[:, None].expand(1, 2, V), TOKENS, 0.5, filters=filters)
    assert 0 <= r.accept_len.item() <= 2 and (r.tokens[0, : r.accept_len.item() + 1] >= 1).all()


@pytest.mark.parametrize("dtype,big,name", [(torch.float16, 6e4, "float16"), (torch.bfloat16, 3e38, "bfloat16")])
def test_filter_logits_refuses_what_its_16_bit_output_cannot_hold(dtype, big, name):
    """The output takes the logits' dtype: a value that rounds to inf there is an error, as in
    float32, never a silent +inf."""
    x = torch.zeros(1, V, dtype=dtype)
    x[0, 3] = big
    with pytest.raises(ValueError, match=rf"logits\[0, 3\] = .*: divided by the temperature 0.1 it overflows {name} "):
        spec_edge.filter_logits(x, 0.1)
    limit = torch.finfo(dtype).max
    x[0, 3] = limit  # the largest finite value divided by 1 stays finite
    out = spec_edge.filter_logits(x, 1.0)
    assert out.dtype == dtype and out[0, 3] == limit and torch.isfinite(out).all()
    assert int(spec_edge.sample(x, 0.1, seed=1)) == 3


# ---- temperatures that vanish in float32 --------------------------------------------------------

SAMPLING_OPS = {
    "sample": lambda T: spec_edge.sample(torch.randn(1, V), T, seed=1),
    "filter_logits": lambda T: spec_edge.filter_logits(torch.randn(1, V), T),
    "verify": lambda T: spec_edge.verify(torch.randn(1, 3, V), torch.randn(1, 2, V), TOKENS, T),
}


@pytest.mark.parametrize("op", SAMPLING_OPS)
def test_a_temperature_that_rounds_to_zero_is_not_greedy(op):
    call = SAMPLING_OPS[op]
    with pytest.raises(ValueError, match=r"temperature = 1e-300 is too small: it rounds to 0 in float32"):
        call(1e-300)
    with pytest.raises(ValueError, match=r"temperature\[0\] = 1e-300 is too small: it rounds to 0 in float32"):
        call(torch.tensor([1e-300], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"temperature\[0\] = 1e-39 is too small: 1 / temperature overflows"):
        call(1e-39)
    call(torch.tensor([0.5], dtype=torch.float64))  # a float64 tensor that float32 holds is fine
    call(0.0)


# ---- mixed devices: an error before any kernel runs, eager and compiled -------------------------

def meta(t):
    return t.to("meta")


MIXED = {
    "verify draft_logits": (lambda: spec_edge.verify(torch.randn(1, 3, V), meta(torch.randn(1, 2, V)), TOKENS, 1.0),
                            r"draft_logits: expected a tensor on cpu \(as target_logits\), got one on meta"),
    "verify draft_tokens": (lambda: spec_edge.verify(torch.randn(1, 3, V), torch.randn(1, 2, V), meta(TOKENS), 1.0),
                            r"draft_tokens: expected a tensor on the CPU, got one on meta"),
    "verify_greedy": (lambda: spec_edge.verify_greedy(torch.randn(1, 3, V), meta(TOKENS)),
                      r"draft_tokens: expected a tensor on the CPU, got one on meta"),
    "accept": (lambda: spec_edge.accept(torch.rand(1, 3, V), meta(torch.rand(1, 2, V)), TOKENS),
               r"draft_probs: expected a tensor on cpu \(as target_probs\), got one on meta"),
    "sample temperature": (lambda: spec_edge.sample(torch.randn(1, V), meta(torch.tensor([1.0])), seed=1),
                           r"temperature: expected a tensor on the CPU, got one on meta"),
    "filter_logits prev_tokens": (lambda: spec_edge.filter_logits(torch.randn(1, V), 1.0, repetition_penalty=1.2,
                                                                  prev_tokens=meta(torch.tensor([1]))),
                                  r"prev_tokens: expected a tensor on the CPU, got one on meta"),
    "attention": (lambda: torch.ops.spec_edge.attention(torch.randn(1, 1, 2, 4), meta(torch.randn(1, 8, 2, 4)),
                                                        torch.randn(1, 8, 2, 4), 0),
                  r"k_cache: expected a tensor on cpu \(as q\), got one on meta"),
}


@pytest.mark.parametrize("case", MIXED)
def test_mixed_devices_are_refused_eager_and_compiled(case):
    call, message = MIXED[case]
    with pytest.raises(ValueError, match=message):
        call()
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):
        torch.compile(call, fullgraph=True)()


def test_a_call_entirely_on_meta_traces():
    r = spec_edge.verify(meta(torch.randn(1, 3, V)), meta(torch.randn(1, 2, V)), TOKENS, 1.0)
    assert r.tokens.device.type == "meta" and tuple(r.tokens.shape) == (1, 3)
