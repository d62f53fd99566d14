"""Loading the ops through the `kernels` library from a local build directory."""

import torch

import spec_edge
from spec_edge.kernels_hub import variant_name, write_kernels_variant


def test_get_local_kernel_exposes_the_same_api(tmp_path):
    kernels = __import__("kernels")
    repo = write_kernels_variant(tmp_path)
    assert (repo / "build" / variant_name() / "metadata.json").is_file()
    ops = kernels.get_local_kernel(repo)
    assert set(spec_edge.__all__) <= set(dir(ops))
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 50, generator=g)
    draft = torch.randn(4, 2, 50, generator=g)
    tokens = draft.argmax(-1)
    via_hub = ops.verify(logits, draft, tokens, temperature=0.7, seed=3)
    direct = spec_edge.verify(logits, draft, tokens, temperature=0.7, seed=3)
    assert torch.equal(via_hub.tokens, direct.tokens)
    assert ops.verify_greedy(logits[0], tokens[0]) == spec_edge.verify_greedy(logits[0], tokens[0])
