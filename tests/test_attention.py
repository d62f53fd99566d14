"""The model-side ops: spec_edge::update_cache and spec_edge::attention, eager, through
ExecuTorch, and inside the exported models (which must need no other op library)."""

import math

import pytest
import torch

import spec_edge  # noqa: F401  (registers the ops)

ops = torch.ops.spec_edge


def reference(q, k_cache, v_cache, start_pos):
    """Causal attention in float64: query i at position start_pos + i reads cache positions
    0..start_pos + i; query head h reads kv head h // (Hq // Hkv)."""
    B, S, Hq, D = q.shape
    group = Hq // k_cache.shape[2]
    k = k_cache.double().repeat_interleave(group, 2)[:, :start_pos + S]
    v = v_cache.double().repeat_interleave(group, 2)[:, :start_pos + S]
    scores = torch.einsum("bshd,bjhd->bhsj", q.double(), k) / math.sqrt(D)
    visible = torch.arange(start_pos + S)[None, :] <= (start_pos + torch.arange(S))[:, None]
    scores = scores.masked_fill(~visible, -math.inf)
    return torch.einsum("bhsj,bjhd->bshd", torch.softmax(scores, -1), v)


SHAPES = [  # B, S, Hq, Hkv, D, C, start_pos
    (1, 1, 4, 4, 64, 16, 0), (1, 1, 5, 5, 64, 32, 31), (1, 5, 4, 2, 32, 20, 7), (2, 3, 6, 2, 8, 9, 6),
    (1, 2, 3, 1, 65, 12, 3), (1, 4, 2, 2, 3, 4, 0), (3, 1, 1, 1, 1, 5, 2), (1, 7, 8, 8, 17, 40, 33),
    # long contexts over many position blocks, query groups of 6-8 heads, verify-sized rows
    (1, 9, 16, 2, 64, 2100, 2050), (1, 5, 12, 2, 128, 4200, 4100), (1, 1, 8, 1, 128, 8300, 8250)]


@pytest.mark.parametrize("B,S,Hq,Hkv,D,C,start", SHAPES)
def test_attention_matches_causal_softmax_attention(B, S, Hq, Hkv, D, C, start):
    g = torch.Generator().manual_seed(S * 100 + D)
    q = 2 * torch.randn(B, S, Hq, D, generator=g)
    k_cache, v_cache = torch.randn(2, B, C, Hkv, D, generator=g)
    got = ops.attention(q, k_cache, v_cache, start)
    assert got.shape == q.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference(q, k_cache, v_cache, start), atol=2e-6, rtol=1e-5)
    # Cache positions after the last query's are never read.
    k_cache[:, start + S:] = float("nan")
    v_cache[:, start + S:] = 1e30
    assert torch.equal(ops.attention(q, k_cache, v_cache, start), got)


def test_attention_takes_strided_views_as_the_models_do():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 3, 16, generator=g).transpose(1, 2)  # [B, H, S, D] as attention holds it
    k_cache, v_cache = torch.randn(2, 1, 10, 3, 16, generator=g)
    got = ops.attention(q.transpose(1, 2), k_cache, v_cache, 2)
    assert torch.equal(got, ops.attention(q.transpose(1, 2).contiguous(), k_cache, v_cache, 2))


def test_attention_gives_the_same_bits_on_any_number_of_threads():
    """The query heads split between the intra-op threads; each is computed as if alone."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 5, 12, 64, generator=g)
    k_cache, v_cache = torch.randn(2, 1, 300, 2, 64, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.attention(q, k_cache, v_cache, 200)
        torch.set_num_threads(max(2, threads))
        pooled = ops.attention(q, k_cache, v_cache, 200)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(pooled, one)
    for h in range(12):
        kv = slice(h // 6, h // 6 + 1)
        alone = ops.attention(q[:, :, h:h + 1], k_cache[:, :, kv], v_cache[:, :, kv], 200)
        assert torch.equal(pooled[:, :, h:h + 1], alone), h


def test_update_cache_writes_exactly_the_rows_at_the_position():
    g = torch.Generator().manual_seed(2)
    cache = torch.randn(2, 10, 3, 8, generator=g)
    before = cache.clone()
    value = torch.randn(2, 3, 3, 8, generator=g)
    ops.update_cache(value, cache, 4)
    assert torch.equal(cache[:, 4:7], value)
    assert torch.equal(cache[:, :4], before[:, :4]) and torch.equal(cache[:, 7:], before[:, 7:])
    ops.update_cache(value[:, :1], cache, 9)  # the last slot
    assert torch.equal(cache[:, 9], value[:, 0])


def test_a_float16_cache_holds_each_value_rounded_as_torch_rounds_it():
    g = torch.Generator().manual_seed(4)
    bits = torch.randint(-2**31, 2**31, (1, 4096, 2, 64), generator=g, dtype=torch.int64).to(torch.int32)
    value = bits.view(torch.float32).clone()  # every float32 pattern: subnormals, inf, NaN, huge
    value[0, :8, 0, :6] = torch.tensor([65504.0, 65519.99, 65520.0, 2.0**-25, 2.0**-24 * 1.5, -0.0])
    cache = torch.zeros(1, 4100, 2, 64, dtype=torch.float16)
    ops.update_cache(value, cache, 3)
    want = value.half()
    finite = ~torch.isnan(want)
    assert torch.equal(cache[:, 3:4099][finite].view(torch.int16), want[finite].view(torch.int16))
    assert torch.isnan(cache[:, 3:4099][~finite]).all()
    assert not cache[:, :3].any() and not cache[:, 4099:].any()


@pytest.mark.parametrize("S,Hq,Hkv,D,C,start", [(5, 12, 2, 128, 700, 600), (9, 16, 2, 64, 300, 250), (3, 6, 3, 17, 40, 30)])
def test_attention_over_float16_caches_is_attention_over_the_floats_they_hold(S, Hq, Hkv, D, C, start):
    g = torch.Generator().manual_seed(S)
    q = torch.randn(1, S, Hq, D, generator=g)
    k_cache, v_cache = torch.randn(2, 1, C, Hkv, D, generator=g).half()
    got = ops.attention(q, k_cache, v_cache, start)
    assert torch.equal(got, ops.attention(q, k_cache.float(), v_cache.float(), start))
    torch.testing.assert_close(got.double(), reference(q, k_cache.float(), v_cache.float(), start), atol=2e-6,
                               rtol=1e-5)
    with pytest.raises(TypeError, match=r"v_cache: expected the dtype of k_cache \(Half\), got Float"):
        ops.attention(q, k_cache, v_cache.float(), start)


@pytest.mark.parametrize("call,message", [
    (lambda q, c: ops.attention(q, c, c, 8), r"start_pos: expected 0 <= start_pos and start_pos \+ 3"),
    (lambda q, c: ops.attention(q, c, c, -1), "start_pos"),
    (lambda q, c: ops.attention(q[..., :4], c, c, 0), "k_cache: expected batch 1 and head dim 4"),
    (lambda q, c: ops.attention(q, c[:, :, :3], c[:, :, :3], 0), "k_cache: expected a number of heads that divides"),
    (lambda q, c: ops.attention(q, c, c[:, :5], 0), "v_cache: expected the shape of k_cache"),
    (lambda q, c: ops.attention(q[0], c, c, 0), r"q: expected rank 4 \[B, S, H, D\]"),
    (lambda q, c: ops.attention(q.double(), c, c, 0), "q: unsupported dtype"),
    (lambda q, c: ops.update_cache(q, c, 8), "start_pos"),
    (lambda q, c: ops.update_cache(q[:, :, :2], c, 0), "cache: expected 2 heads"),
    (lambda q, c: ops.update_cache(q, c.double(), 0), "cache: unsupported dtype Double; expected float32 or float16"),
    (lambda q, c: ops.attention(q, c.bfloat16(), c.bfloat16(), 0), "k_cache: unsupported dtype BFloat16; expected"),
    (lambda q, c: ops.update_cache(q, c[..., ::2], 0), "value|cache"),
])
def test_bad_input_is_refused_by_name(call, message):
    q, cache = torch.randn(1, 3, 4, 8), torch.randn(1, 10, 4, 8)
    with pytest.raises((ValueError, TypeError), match=message):
        call(q, cache)


# ---- through ExecuTorch ------------------------------------------------------------------------

class CachedAttention(torch.nn.Module):
    """One attention step: write k, v at the position, attend over the cache."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 12, 2, 16, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(1, 12, 2, 16, dtype=dtype))

    def forward(self, q, k, v, input_pos):
        start = input_pos[0].item()
        ops.update_cache(k, self.k_cache, start)
        ops.update_cache(v, self.v_cache, start)
        return ops.attention(q, self.k_cache, self.v_cache, start)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cached_attention_runs_through_executorch_like_eager(tmp_path, dtype):
    pytest.importorskip("executorch")
    import spec_edge.export as se_export
    from spec_edge.executorch import load
    load()
    from executorch.runtime import Runtime
    n = torch.export.Dim("n", min=1, max=4)
    example = (torch.zeros(1, 2, 4, 16), torch.zeros(1, 2, 2, 16), torch.zeros(1, 2, 2, 16), torch.tensor([0]))
    exported = se_export._export(CachedAttention(dtype), example, ({1: n}, {1: n}, {1: n}, None))
    data = se_export._lower({"forward": exported}, tmp_path / "attention.pte", False, {})
    program = Runtime.get().load_program(data)
    method = program.load_method("forward")
    eager = CachedAttention(dtype)
    g = torch.Generator().manual_seed(3)
    for pos, length in [(0, 3), (3, 1), (4, 4), (8, 2)]:  # a prompt, decode steps, a verify chunk
        args = [torch.randn(1, length, 4, 16, generator=g), torch.randn(1, length, 2, 16, generator=g),
                torch.randn(1, length, 2, 16, generator=g), torch.tensor([pos])]
        assert torch.equal(method.execute(args)[0], eager(*args))
    with pytest.raises(RuntimeError):  # past the cache: refused, not a crash
        method.execute([torch.zeros(1, 2, 4, 16), torch.zeros(1, 2, 2, 16), torch.zeros(1, 2, 2, 16),
                        torch.tensor([11])])


def test_the_lowered_model_reads_its_caches_without_copying_them():
    """ExecuTorch's attention hands the caches to SDPA transposed, and spec_edge's SDPA transposes
    them back: left in the program, XNNPACK copies every cache twice per layer and step."""
    pytest.importorskip("executorch")
    import spec_edge.export as se_export
    from executorch.exir.lowered_backend_module import LoweredBackendModule
    config = se_export.ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, max_context_len=32)
    rows = torch.export.Dim("rows", min=1, max=4)
    exported = se_export._export(se_export._Logits(se_export.build_model(config)),
                                 (torch.tensor([[1, 2]]), torch.tensor([0])), ({1: rows}, None))
    lowered = se_export._lower_method("logits", exported, True)
    graphs = [lowered.graph_module.graph] + [module.original_module.graph for module in
                                             lowered.graph_module.modules() if isinstance(module, LoweredBackendModule)]
    assert len(graphs) > 1  # XNNPACK took part of it
    permutes = [node for graph in graphs for node in graph.nodes if "permute" in str(node.target)]
    assert permutes == []
