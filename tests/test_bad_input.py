"""Every op rejects bad input with an error naming the argument and what was expected."""

import math

import pytest
import torch

import spec_edge

P = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])
Q = torch.tensor([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
T = torch.tensor([0, 1])
U = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)


def with_value(x, index, value):
    x = x.clone()
    x[index] = value
    return x


GREEDY_CASES = [
    ("rank", (P[0], T), ValueError, r"target_probs: expected shape \[K\+1, V\] or \[B, K\+1, V\]"),
    ("K axis", (P, torch.tensor([0, 1, 2])), ValueError, r"draft_tokens: expected K=2 tokens"),
    ("token rank", (P, T[None]), ValueError, r"draft_tokens: expected shape \[K\]"),
    ("batch", (P[None].expand(2, 3, 3), torch.zeros(3, 2, dtype=torch.long)), ValueError,
     r"draft_tokens: batch size 3 does not match target_probs's batch size 2"),
    ("token range", (P, torch.tensor([0, 3])), ValueError, r"draft_tokens\[0, 1\] = 3 is outside the vocabulary \[0, 3\)"),
    ("negative token", (P, torch.tensor([-1, 0])), ValueError, r"draft_tokens\[0, 0\] = -1"),
    ("NaN", (with_value(P, (0, 1), math.nan), T), ValueError, r"target_probs\[0, 0, 1\] is NaN"),
    ("dtype", (P.double(), T), TypeError, r"target_probs: unsupported dtype Double; expected float32, float16 or bfloat16"),
    ("token dtype", (P, T.float()), TypeError, r"draft_tokens: unsupported dtype Float; expected int64 or int32"),
    ("empty vocab", (P[:, :0], T), ValueError, r"target_probs: expected a non-empty vocabulary"),
]


@pytest.mark.parametrize("name,args,exc,match", GREEDY_CASES, ids=[c[0] for c in GREEDY_CASES])
def test_verify_greedy_rejects(name, args, exc, match):
    with pytest.raises(exc, match=match):
        spec_edge.verify_greedy(*args)


ACCEPT_CASES = [
    ("draft K axis", (P, P, T, U), ValueError, r"draft_probs: expected K=2 rows"),
    ("V mismatch", (P, Q[:, :2], T, U), ValueError, r"draft_probs: vocabulary size 2 does not match target_probs's V=3"),
    ("negative prob", (with_value(P, (1, 2), -0.1), Q, T, U), ValueError,
     r"target_probs\[0, 1, 2\] = -0.1: probabilities must be finite and >= 0"),
    ("NaN prob", (P, with_value(Q, (0, 0), math.nan), T, U), ValueError, r"draft_probs\[0, 0, 0\] = nan"),
    ("inf prob", (with_value(P, (0, 0), math.inf), Q, T, U), ValueError, r"target_probs\[0, 0, 0\] = inf"),
    ("zero mass", (with_value(P, 0, 0.0), Q, T, U), ValueError, r"target_probs\[0, 0\] has mass 0"),
    ("uniform 1", (P, Q, T, with_value(U, 1, 1.0)), ValueError, r"uniforms\[0, 1\] = 1 is outside \[0, 1\)"),
    ("uniform negative", (P, Q, T, with_value(U, 2, -0.5)), ValueError, r"uniforms\[0, 2\] = -0.5 is outside \[0, 1\)"),
    ("uniform NaN", (P, Q, T, with_value(U, 0, math.nan)), ValueError, r"uniforms\[0, 0\] = nan"),
    ("uniform shape", (P, Q, T, U[:2]), ValueError, r"uniforms: expected shape \[B=1, K\+1=3\], got \[1, 2\]"),
    ("uniform dtype", (P, Q, T, U.half()), TypeError, r"uniforms: unsupported dtype Half"),
    ("dtype mismatch", (P, Q.half(), T, U), TypeError, r"draft_probs: dtype float16 does not match target_probs's dtype float32"),
    ("token range", (P, Q, torch.tensor([5, 0]), U), ValueError, r"draft_tokens\[0, 0\] = 5 is outside"),
    ("draft-free token range", (P, None, torch.tensor([0, 3]), U), ValueError, r"draft_tokens\[0, 1\] = 3 is outside"),
]


@pytest.mark.parametrize("name,args,exc,match", ACCEPT_CASES, ids=[c[0] for c in ACCEPT_CASES])
def test_accept_rejects(name, args, exc, match):
    with pytest.raises(exc, match=match):
        spec_edge.accept_with_uniforms(*args)


def test_accept_generator_path_rejects_like_the_op():
    with pytest.raises(ValueError, match=r"target_probs\[0, 1, 2\] = -0.1"):
        spec_edge.accept(with_value(P, (1, 2), -0.1), Q, T)


TL = torch.log(P + 0.1)[None]
DL = torch.log(Q + 0.1)[None]
TT = T[None]

VERIFY_CASES = [
    ("temperature negative", dict(temperature=-0.5), ValueError, r"temperature\[0\] = -0.5: expected a finite value >= 0"),
    ("temperature NaN", dict(temperature=math.nan), ValueError, r"temperature\[0\] = nan"),
    ("temperature inf", dict(temperature=math.inf), ValueError, r"temperature\[0\] = inf"),
    ("temperature count", dict(temperature=torch.tensor([1.0, 1.0])), ValueError,
     r"temperature: expected one value or one per batch row \(B=1\), got 2"),
    ("temperature dtype", dict(temperature=torch.tensor(1)), TypeError, r"temperature: expected a floating tensor"),
    ("seed dtype", dict(seed=torch.tensor(1.5)), TypeError, r"seed: expected an integer tensor"),
    # Python values, converted before the op is called.
    ("seed float", dict(seed=1.5), TypeError, r"seed: expected an integer, got 1.5"),
    ("seed bool", dict(seed=True), TypeError, r"seed: expected an integer, got True"),
    ("temperature bool", dict(temperature=True), TypeError, r"temperature: expected a number, got True"),
    ("seed beyond int64", dict(seed=2**64), ValueError, r"seed: 18446744073709551616 does not fit torch.int64"),
    ("offset beyond int64", dict(offset=-2**63 - 1), ValueError, r"offset: -9223372036854775809 does not fit"),
    ("temperature text", dict(temperature="hot"), TypeError, r"temperature: expected a number or a tensor, got str"),
    ("temperature beyond float32", dict(temperature=1e40), ValueError, r"temperature\[0\] = inf"),
    ("temperature ragged list", dict(temperature=[[0.5], [0.6, 0.7]]), ValueError,
     r"temperature: expected sequence of length"),
    ("num_draft range", dict(num_draft=torch.tensor([3])), ValueError, r"num_draft\[0\] = 3 is outside \[0, K=2\]"),
    ("num_draft negative", dict(num_draft=torch.tensor([-1])), ValueError, r"num_draft\[0\] = -1"),
    ("num_draft shape", dict(num_draft=torch.tensor([1, 1])), ValueError, r"num_draft: expected shape \[B=1\]"),
    ("NaN logit", dict(target_logits=with_value(TL, (0, 1, 1), math.nan)), ValueError,
     r"target_logits\[0, 1, 1\] = nan: logits must not be NaN or \+inf"),
    ("+inf logit", dict(draft_logits=with_value(DL, (0, 0, 2), math.inf)), ValueError, r"draft_logits\[0, 0, 2\] = inf"),
    ("all masked", dict(target_logits=with_value(TL, (0, 0), -math.inf)), ValueError,
     r"target_logits\[0, 0\] has no finite logit"),
    ("NaN logit greedy", dict(target_logits=with_value(TL, (0, 0, 0), math.nan), temperature=0.0), ValueError,
     r"target_logits\[0, 0, 0\] is NaN"),
    ("rank", dict(target_logits=TL[0]), ValueError, r"target_logits: expected rank 3 \[B, rows, V\]"),
    ("batch", dict(draft_logits=DL.expand(2, 2, 3)), ValueError, r"draft_logits: batch size 2 does not match"),
    ("V", dict(draft_logits=DL[..., :2]), ValueError, r"draft_logits: vocabulary size 2 does not match"),
    ("K", dict(draft_tokens=torch.tensor([[0]])), ValueError, r"draft_tokens: expected K=2 tokens"),
    ("token range", dict(draft_tokens=torch.tensor([[0, 7]])), ValueError, r"draft_tokens\[0, 1\] = 7 is outside"),
    ("dtype", dict(target_logits=TL.double(), draft_logits=DL.double()), TypeError, r"target_logits: unsupported dtype Double"),
]


@pytest.mark.parametrize("name,overrides,exc,match", VERIFY_CASES, ids=[c[0] for c in VERIFY_CASES])
def test_verify_rejects(name, overrides, exc, match):
    kwargs = dict(target_logits=TL, draft_logits=DL, draft_tokens=TT, temperature=1.0, seed=0, offset=0)
    kwargs.update(overrides)
    with pytest.raises(exc, match=match):
        spec_edge.verify(**kwargs)


def test_python_parameters_equal_their_tensors():
    f = spec_edge.Filters(top_k=2, top_p=0.9, min_p=0.05, repetition_penalty=1.2, prev_tokens=torch.tensor([0]))
    ft = spec_edge.Filters(torch.tensor(2), torch.tensor(0.9), torch.tensor(0.05), torch.tensor(1.2), f.prev_tokens)
    for seed in range(20):
        expected = spec_edge.sample(X, torch.tensor([0.5, 0.7, 0.9]), seed=torch.tensor(seed), offset=torch.tensor(3),
                                    filters=ft)
        assert torch.equal(spec_edge.sample(X, [0.5, 0.7, 0.9], *f, seed, 3), expected)


def test_k_zero_is_valid_everywhere():
    empty = torch.empty(0, dtype=torch.long)
    assert int(spec_edge.verify_greedy(P[:1], empty).next_token) == 0
    r = spec_edge.accept_with_uniforms(P[1:2], Q[:0], empty, torch.tensor([0.6], dtype=torch.float64))
    assert (int(r.n_accepted), int(r.next_token)) == (0, 2)
    v = spec_edge.verify(TL[:, :1], DL[:, :0], TT[:, :0], temperature=1.0)
    assert v.accept_len.tolist() == [0] and v.tokens.shape == (1, 1)


def test_non_contiguous_inputs_are_handled():
    big = torch.rand(3, 6, 2).transpose(1, 2)  # vocab axis strided
    r = spec_edge.verify_greedy(big[0], torch.tensor([0]))
    assert int(r.n_accepted) in (0, 1)
    assert r == spec_edge.verify_greedy(big[0].contiguous(), torch.tensor([0]))


X = torch.log(P + 0.1)  # [3, 3] logits: B = 3 rows

FILTER_CASES = [
    ("top_k negative", dict(top_k=-1), ValueError, r"top_k\[0\] = -1: expected a value >= 0 \(0 is off"),
    ("top_k per row", dict(top_k=torch.tensor([0, 1, -5])), ValueError, r"top_k\[2\] = -5"),
    ("top_k dtype", dict(top_k=torch.tensor(1.0)), TypeError, r"top_k: expected an integer tensor"),
    ("top_k float", dict(top_k=2.5), TypeError, r"top_k: expected an integer, got 2.5"),
    ("top_k bool", dict(top_k=True), TypeError, r"top_k: expected an integer, got True"),
    ("top_p text", dict(top_p="high"), TypeError, r"top_p: expected a number or a tensor, got str"),
    ("top_p zero", dict(top_p=0.0), ValueError, r"top_p\[0\] = 0: expected a value in \(0, 1\]"),
    ("top_p above 1", dict(top_p=1.5), ValueError, r"top_p\[0\] = 1.5"),
    ("top_p NaN", dict(top_p=math.nan), ValueError, r"top_p\[0\] = nan"),
    ("min_p negative", dict(min_p=-0.1), ValueError, r"min_p\[0\] = -0.1: expected a value in \[0, 1\]"),
    ("min_p above 1", dict(min_p=1.01), ValueError, r"min_p\[0\] = 1.01"),
    ("penalty zero", dict(repetition_penalty=0.0), ValueError, r"repetition_penalty\[0\] = 0: expected a finite value > 0"),
    ("penalty negative", dict(repetition_penalty=-1.2), ValueError, r"repetition_penalty\[0\] = -1.2"),
    ("penalty inf", dict(repetition_penalty=math.inf), ValueError, r"repetition_penalty\[0\] = inf"),
    ("penalty count", dict(repetition_penalty=torch.tensor([1.1, 1.2])), ValueError,
     r"repetition_penalty: expected one value or one per batch row \(B=3\), got 2"),
    ("prev_tokens above V", dict(prev_tokens=torch.tensor([[0, 3]])), ValueError,
     r"prev_tokens\[0, 1\] = 3 is outside the vocabulary \[0, 3\) \(-1 is padding\)"),
    ("prev_tokens negative", dict(prev_tokens=torch.tensor([-2])), ValueError, r"prev_tokens\[0, 0\] = -2"),
    ("prev_tokens rows", dict(prev_tokens=torch.zeros(2, 4, dtype=torch.long)), ValueError,
     r"prev_tokens: expected 1 or B=3 rows, got 2"),
    ("prev_tokens dtype", dict(prev_tokens=torch.zeros(1, 4)), TypeError, r"prev_tokens: unsupported dtype Float"),
    ("prev_tokens rank", dict(prev_tokens=torch.zeros(1, 1, 4, dtype=torch.long)), ValueError,
     r"prev_tokens: expected shape \[L\] or \[B, L\]"),
]


@pytest.mark.parametrize("op", ["sample", "filter_logits", "verify"])
@pytest.mark.parametrize("name,fields,exc,match", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters_are_checked_by_every_op(op, name, fields, exc, match):
    filters = spec_edge.Filters(**fields)
    with pytest.raises(exc, match=match):
        if op == "sample":
            spec_edge.sample(X, 0.8, filters=filters)
        elif op == "filter_logits":
            spec_edge.filter_logits(X, 0.8, filters=filters)
        else:
            spec_edge.verify(X[:, None].expand(3, 3, 3), X[:, None, :].expand(3, 2, 3),
                             torch.zeros(3, 2, dtype=torch.long), 0.8, filters=filters)


LOGIT_CASES = [
    ("NaN logit", with_value(X, (1, 2), math.nan), r"logits\[1, 2\] = nan: logits must not be NaN or \+inf"),
    ("+inf logit", with_value(X, (0, 0), math.inf), r"logits\[0, 0\] = inf"),
    ("all masked", with_value(X, 2, -math.inf), r"logits\[2\] has no finite logit"),
]


@pytest.mark.parametrize("filters", [spec_edge.Filters(), spec_edge.Filters(top_k=2),
                                     spec_edge.Filters(top_p=0.5, min_p=0.1, repetition_penalty=1.2,
                                                       prev_tokens=torch.tensor([0]))],
                         ids=["unfiltered", "top_k", "top_p_min_p_penalty"])
@pytest.mark.parametrize("name,logits,match", LOGIT_CASES, ids=[c[0] for c in LOGIT_CASES])
def test_sample_and_filter_logits_reject_bad_logits(name, logits, match, filters):
    for call in (lambda: spec_edge.sample(logits, 0.8, filters=filters),
                 lambda: spec_edge.filter_logits(logits, 0.8, filters=filters)):
        with pytest.raises(ValueError, match=match):
            call()


def test_filter_logits_shape_and_dtype_errors():
    with pytest.raises(ValueError, match=r"logits: expected shape \[B, V\]"):
        spec_edge.filter_logits(X[0], 1.0)
    with pytest.raises(TypeError, match=r"logits: unsupported dtype Double"):
        spec_edge.filter_logits(X.double(), 1.0)
    with pytest.raises(ValueError, match=r"temperature\[0\] = -1"):
        spec_edge.filter_logits(X, -1.0)
    with pytest.raises(TypeError, match=r"out: expected dtype Float \(the logits'\), got Half"):
        torch.ops.spec_edge.filter_logits.out(X, torch.tensor(1.0), out=torch.empty(3, 3, dtype=torch.half))


@pytest.mark.parametrize("seed,exc,match", [(1.5, TypeError, r"seed: expected an integer, got 1.5"),
                                            (True, TypeError, r"seed: expected an integer, got True"),
                                            (2**64, ValueError, r"seed: 18446744073709551616 does not fit")])
def test_compiled_sample_names_a_bad_seed(seed, exc, match):
    """Under torch.compile the same check raises the same error; with fullgraph, dynamo's own
    error for it quotes it, never an unrelated failure of a conversion."""
    x = torch.randn(1, 8)
    torch._dynamo.reset()
    with pytest.raises(exc, match=match):
        torch.compile(lambda x: spec_edge.sample(x, 0.8, seed=seed))(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=rf"raised exception {exc.__name__}\('{match}"):
        torch.compile(lambda x: spec_edge.sample(x, 0.8, seed=seed), fullgraph=True)(x)
