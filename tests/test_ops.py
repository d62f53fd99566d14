"""Exact behaviour of the ops through torch.ops.spec_edge: hand-computed cases, layouts,
dtypes, out variants, opcheck, torch.export and torch.compile."""

import math

import pytest
import torch

import spec_edge
from philox_ref import philox4x32_10, uniform


def test_philox_reference_matches_known_answers():
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def test_verify_greedy_hand_cases():
    p = torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    assert spec_edge.verify_greedy(p, torch.tensor([1, 0])) == (2, 2)
    assert spec_edge.verify_greedy(p, torch.tensor([1, 2])) == (1, 0)
    assert spec_edge.verify_greedy(p, torch.tensor([0, 0])) == (0, 1)
    assert spec_edge.verify_greedy(p[:1], torch.tensor([], dtype=torch.long)) == (0, 1)  # K = 0
    ties = torch.tensor([[0.4, 0.4, 0.2]])
    assert int(spec_edge.verify_greedy(ties, torch.empty(0, dtype=torch.long)).next_token) == int(ties.argmax())


def test_accept_hand_cases():
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0]])
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    t = torch.tensor([0])
    run = lambda u: tuple(map(int, spec_edge.accept_with_uniforms(p, q, t, torch.tensor(u, dtype=torch.float64))))
    assert run([0.25, 0.0]) == (1, 0)    # p/q = 0.25: accepted; bonus from uniform p_1
    assert run([0.2501, 0.24]) == (0, 2)  # residual [0, 0, .1, .3] / .4
    assert run([0.9, 0.26]) == (0, 3)
    assert run([0.2, 0.99]) == (1, 3)
    # draft-free: accept with p(t) = 0.3; residual [.1 .2 0 .4] / .7
    assert tuple(map(int, spec_edge.accept_with_uniforms(p, None, torch.tensor([2]), torch.tensor([0.31, 0.2], dtype=torch.float64)))) == (0, 1)


def test_accept_generator_reproducible_and_batched_equals_single():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(8, 4, 33, generator=g), -1)
    q = torch.softmax(torch.randn(8, 3, 33, generator=g), -1)
    t = torch.multinomial(q.reshape(-1, 33), 1, generator=g).reshape(8, 3)
    a = spec_edge.accept(p, q, t, generator=torch.Generator().manual_seed(9))
    b = spec_edge.accept(p, q, t, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a.n_accepted, b.n_accepted) and torch.equal(a.next_token, b.next_token)
    u = torch.rand(8, 4, dtype=torch.float64, generator=g)
    batched = spec_edge.accept_with_uniforms(p, q, t, u)
    for i in range(8):
        single = spec_edge.accept_with_uniforms(p[i], q[i], t[i], u[i])
        assert (int(single.n_accepted), int(single.next_token)) == (int(batched.n_accepted[i]), int(batched.next_token[i]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_match_float32_on_representable_values(dtype):
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(16, 5, 111, generator=g), -1).to(dtype)
    q = torch.softmax(torch.randn(16, 4, 111, generator=g), -1).to(dtype)
    t = torch.randint(0, 111, (16, 4), generator=g)
    u = torch.rand(16, 5, dtype=torch.float64, generator=g)
    for op_args in [(p, t), ]:
        assert torch.equal(spec_edge.verify_greedy(*op_args).next_token,
                           spec_edge.verify_greedy(op_args[0].float(), t).next_token)
    low = spec_edge.accept_with_uniforms(p, q, t, u)
    high = spec_edge.accept_with_uniforms(p.float(), q.float(), t, u)
    assert torch.equal(low.n_accepted, high.n_accepted) and torch.equal(low.next_token, high.next_token)
    lt, ld = torch.log(p.float()).to(dtype), torch.log(q.float()).to(dtype)
    a = spec_edge.verify(lt, ld, t, temperature=0.7, seed=5)
    b = spec_edge.verify(lt.float(), ld.float(), t, temperature=0.7, seed=5)
    assert torch.equal(a.tokens, b.tokens)


def test_verify_philox_layout():
    """Row b's draw j is uniform(seed, offset, b, j): checked on a case whose decisions are
    thresholds of the uniforms (p = [.5, .5], q = [1, 0] at position 0; uniform bonus row)."""
    B, seed, offset = 64, 0x1234_5678_9ABC, 5
    target = torch.zeros(B, 2, 4)
    target[:, 0, 2:] = -math.inf  # p_0 = [.5, .5, 0, 0]; p_1 uniform over 4
    draft = torch.full((B, 1, 4), -math.inf)
    draft[:, 0, 0] = 0.0  # q_0 one-hot on token 0
    tokens = torch.zeros(B, 1, dtype=torch.long)
    r = spec_edge.verify(target, draft, tokens, temperature=1.0, seed=seed, offset=offset)
    for b in range(B):
        u0, u1 = uniform(seed, offset, b, 0), uniform(seed, offset, b, 1)
        if u0 <= 0.5:
            assert r.tokens[b].tolist() == [0, int(u1 * 4)]
        else:
            assert r.tokens[b].tolist() == [1, -1]  # residual [0, .5, 0, 0] / .5


def test_verify_ragged_greedy_and_padding():
    g = torch.Generator().manual_seed(0)
    tl = torch.randn(3, 5, 20, generator=g)
    tokens = tl[:, :4].argmax(-1)
    r = spec_edge.verify(tl, torch.randn(3, 4, 20, generator=g), tokens, temperature=0.0,
                         num_draft=torch.tensor([4, 2, 0]))
    assert r.accept_len.tolist() == [4, 2, 0]
    assert r.tokens[0].tolist() == tokens[0].tolist() + [int(tl[0, 4].argmax())]
    assert r.tokens[1].tolist() == tokens[1, :2].tolist() + [int(tl[1, 2].argmax()), -1, -1]
    assert r.tokens[2].tolist() == [int(tl[2, 0].argmax()), -1, -1, -1, -1]


def test_verify_per_row_parameters():
    """Row b with per-row (T_b, seed_b, offset_b) equals row b of a call that gives every row
    those same values (the Philox row index is the batch row in both)."""
    g = torch.Generator().manual_seed(2)
    tl, dl = torch.randn(4, 3, 30, generator=g), torch.randn(4, 2, 30, generator=g)
    tokens = torch.randint(0, 30, (4, 2), generator=g)
    params = [(0.0, 1, 0), (0.5, 2, 0), (1.0, 3, 7), (2.0, 4, 7)]
    per_row = spec_edge.verify(tl, dl, tokens, temperature=torch.tensor([p[0] for p in params]),
                               seed=torch.tensor([p[1] for p in params]),
                               offset=torch.tensor([p[2] for p in params]))
    for b, (T, seed, offset) in enumerate(params):
        uniform = spec_edge.verify(tl, dl, tokens, temperature=T, seed=seed, offset=offset)
        assert torch.equal(per_row.tokens[b], uniform.tokens[b])
        assert per_row.accept_len[b] == uniform.accept_len[b]
    # different per-row seeds do change the draws
    other = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=torch.tensor([10, 11, 12, 13]))
    same = spec_edge.verify(tl, dl, tokens, temperature=1.0, seed=torch.tensor([10, 11, 12, 13]))
    assert torch.equal(other.tokens, same.tokens)


def test_out_variants_write_into_given_tensors():
    p = torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    n, nxt = torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    res = torch.ops.spec_edge.verify_greedy.out(p, torch.tensor([1, 0]), n_accepted=n, next_token=nxt)
    assert res[0] is n and int(n) == 2 and int(nxt) == 2
    u = torch.tensor([0.1, 0.5], dtype=torch.float64)
    torch.ops.spec_edge.accept.out(p[:2], p[:1], torch.tensor([1]), u, n_accepted=n, next_token=nxt)
    assert int(n) == 1
    ln, out = torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    torch.ops.spec_edge.verify.out(p[None].log(), p[None, :2].log(), torch.tensor([[1, 0]]),
                                   torch.tensor(0.0), torch.tensor(0), torch.tensor(0),
                                   accept_len=ln, out=out)
    assert ln.tolist() == [2] and out.tolist() == [[1, 0, 2]]


def _sample_args():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(2, 4, 17, generator=g), -1)
    q = torch.softmax(torch.randn(2, 3, 17, generator=g), -1)
    t = torch.randint(0, 17, (2, 3), generator=g)
    u = torch.rand(2, 4, dtype=torch.float64, generator=g)
    return p, q, t, u


def test_opcheck():
    p, q, t, u = _sample_args()
    torch.library.opcheck(torch.ops.spec_edge.verify_greedy.default, (p, t))
    torch.library.opcheck(torch.ops.spec_edge.verify_greedy.default, (p[0], t[0]))
    torch.library.opcheck(torch.ops.spec_edge.accept.default, (p, q, t, u))
    torch.library.opcheck(torch.ops.spec_edge.accept.default, (p, None, t, u))
    torch.library.opcheck(torch.ops.spec_edge.verify.default,
                          (p.log(), q.log(), t, torch.tensor(0.8), torch.tensor(1), torch.tensor(0), None))
    torch.library.opcheck(torch.ops.spec_edge.verify.default,
                          (p.log(), q.log(), t, torch.tensor([0.0, 1.0]), torch.tensor(1), torch.tensor(0),
                           torch.tensor([3, 1])))


class _Verifier(torch.nn.Module):
    def forward(self, target_logits, draft_logits, draft_tokens, temperature, seed, offset):
        greedy = spec_edge.verify_greedy(torch.softmax(target_logits[0], -1), draft_tokens[0])
        batch = spec_edge.verify(target_logits, draft_logits, draft_tokens, temperature, seed, offset)
        return greedy.n_accepted, greedy.next_token, batch.accept_len, batch.tokens


def test_torch_export_keeps_the_ops_and_matches_eager():
    p, q, t, _ = _sample_args()
    args = (p.log(), q.log(), t, torch.tensor(0.9), torch.tensor(4), torch.tensor(2))
    ep = torch.export.export(_Verifier(), args)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"spec_edge.verify_greedy.default", "spec_edge.verify.default"} <= targets
    for a, b in zip(ep.module()(*args), _Verifier()(*args)):
        assert torch.equal(a, b)


def test_torch_compile_fullgraph_matches_eager():
    p, q, t, u = _sample_args()

    def fn(p, q, t, u):
        a = spec_edge.accept_with_uniforms(p, q, t, u)
        b = spec_edge.verify(p.log(), q.log(), t, temperature=torch.tensor(1.0), seed=torch.tensor(3),
                             offset=torch.tensor(0))
        c = spec_edge.sample(q[:, 0].log(), 0.8, seed=3, offset=1, filters=spec_edge.Filters(top_k=2))  # numbers
        return a.n_accepted, a.next_token, b.tokens, c

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for a, b in zip(compiled(p, q, t, u), fn(p, q, t, u)):
        assert torch.equal(a, b)


def test_isa_query():
    assert spec_edge.active_isa() in spec_edge.available_isas()
    assert "scalar" in spec_edge.available_isas()
    with pytest.raises(ValueError, match="unknown path 'sse9'"):
        spec_edge.select_isa("sse9")


@pytest.mark.parametrize("V", [111, 32000])
def test_every_isa_path_gives_the_same_tokens(V):
    g = torch.Generator().manual_seed(V)
    B, K = 6, 4
    tl = 3 * torch.randn(B, K + 1, V, generator=g)
    dl = tl[:, :K] + torch.randn(B, K, V, generator=g)
    tokens = torch.multinomial(torch.softmax(dl.reshape(-1, V), -1), 1, generator=g).reshape(B, K)
    u = torch.rand(B, K + 1, dtype=torch.float64, generator=g)
    p, q = torch.softmax(tl, -1), torch.softmax(dl, -1)
    results = {}
    active = spec_edge.active_isa()
    try:
        for isa in spec_edge.available_isas():
            spec_edge.select_isa(isa)
            results[isa] = (spec_edge.verify_greedy(p, tokens), spec_edge.accept_with_uniforms(p, q, tokens, u),
                            spec_edge.accept_with_uniforms(p, None, tokens, u),
                            spec_edge.verify(tl, dl, tokens, temperature=torch.tensor([0.0, 0.5, 1.0, 1.5, 1.0, 2.0]),
                                             seed=17, offset=2))
    finally:
        spec_edge.select_isa(active)
    reference = results["scalar"]
    for isa, got in results.items():
        for a, b in zip(got, reference):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), isa


@pytest.mark.parametrize("forced", ["scalar", "no-such-isa"])
def test_spec_edge_isa_environment_variable(forced):
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPEC_EDGE_ISA=forced)
    run = subprocess.run([sys.executable, "-c", "import spec_edge; print(spec_edge.active_isa())"],
                         env=env, capture_output=True, text=True, check=True)
    if forced == "scalar":
        assert run.stdout.strip() == "scalar"
    else:  # an unknown path is reported, and the automatic choice is kept
        assert run.stdout.strip() == spec_edge.available_isas()[0]
        assert "SPEC_EDGE_ISA=no-such-isa is not available here" in run.stderr


def test_missing_native_library_is_a_clear_import_error(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, SPEC_EDGE_LIB_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", "import spec_edge"], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert f"cannot find the op library at {tmp_path}/libspec_edge_aten.so" in run.stderr
    assert "make build" in run.stderr
