"""A GGUF file's 4-bit linears, kept exactly in an 8da4w program.

ExecuTorch's 8da4w weights (what XNNPACK runs) are symmetric: a scale per 32 weights and values
in [-8, 7]. llama.cpp's 4-bit types are per 32 weights too, but Q4_1 and Q4_K add a minimum:
``w = a * q - b`` with ``q`` in [0, 15]. Quantizing those weights again onto a symmetric grid
moves each by up to half a step of the new grid, and measured on Qwen2.5-Coder-1.5B's Q4_K_M file
that costs 7% of perplexity (docs/BENCHMARKS.md). Written as ``a * (q - 8) + (8a - b)``, the
same weights are a symmetric 4-bit group with scale ``a`` plus one offset ``c = 8a - b`` per group,
and a linear over them is::

    W x = W4 x + C s(x)

with ``W4`` the symmetric part (8da4w, the file's own values), ``s(x)`` the sums of ``x`` over each
group of 32 inputs and ``C`` the offsets ([out, in / 32], 8-bit per channel: 1/32 of a byte per
weight). Q4_0 has no minimum: its groups need no offsets.
"""

from __future__ import annotations

import numpy as np
import torch

GROUP = 32  # llama.cpp's 4-bit groups, and the 8da4w group size that keeps them
EXACT_TYPES = ("Q4_0", "Q4_1", "Q4_K")


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return blocks[:, at:at + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Each 32-weight group of a block's packed values: 16 bytes, low nibbles first (weights
    0..15), then the high ones (16..31), as llama.cpp packs them."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8)


def four_bit_groups(tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF tensor of a 4-bit type (EXACT_TYPES) as (q [out, in] int8 in [-8, 7], scale
    [out, in / 32], offset [out, in / 32]) with ``weight = scale * q + offset`` per group (the
    weights the gguf package dequantizes, up to the rounding of its own sum)."""
    from gguf.quants import Q4_K
    kind = tensor.tensor_type.name
    out_features, in_features = (int(n) for n in reversed(tensor.shape))
    data = np.ascontiguousarray(tensor.data).reshape(out_features, -1)
    if kind == "Q4_K":  # 256 weights: d, dmin (f16), 8 six-bit scales and minima, 128 bytes of values
        blocks = data.reshape(-1, 144)
        sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
        scale = _f16(blocks, 0) * sc.astype(np.float32)        # a of each of the 8 groups
        minimum = _f16(blocks, 2) * m.astype(np.float32)       # b
        qs = blocks[:, 16:].reshape(-1, 4, 32)                 # 4 x 32 bytes: groups 2i (low), 2i + 1 (high)
        q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, GROUP).astype(np.int8)
        offset = 8.0 * scale - minimum
    elif kind in ("Q4_0", "Q4_1"):  # 32 weights: d (and m for Q4_1), 16 bytes of values
        blocks = data.reshape(-1, 18 if kind == "Q4_0" else 20)
        scale = _f16(blocks, 0)
        q = _nibbles(blocks[:, -16:])
        offset = 8.0 * scale + _f16(blocks, 2) if kind == "Q4_1" else np.zeros_like(scale)
    else:
        raise ValueError(f"{tensor.name}: type {kind} is not one of the 4-bit types kept exactly {EXACT_TYPES}")
    groups = (out_features, in_features // GROUP)
    q = torch.from_numpy(q.reshape(groups + (GROUP,)) - 8)
    scale, offset = torch.from_numpy(scale.reshape(groups)), torch.from_numpy(offset.reshape(groups))
    flat = scale == 0  # every weight of the group is its offset: any scale, values 0
    q[flat] = 0
    scale[flat] = 1.0
    return q.reshape(out_features, in_features), scale, offset


def _dynamic_int8_activations(weight: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, block: int, dtype):
    """``weight`` as torchao's tensor of 8da4w / 8da8w (dynamic per-token int8 activations): the
    layout ExecuTorch's quantizer gives and XNNPACK runs, with the given values and scales."""
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import IntxUnpackedToInt8Tensor
    tensor = IntxUnpackedToInt8Tensor.from_hp(
        weight, (1, block), dtype, activation_quantization="int8_asym_per_token", intx_choose_qparams_algorithm=None,
        custom_scale=scale, custom_zero_point=torch.zeros(scale.shape, dtype=torch.int8))
    if not torch.equal(tensor.qdata, q):
        raise RuntimeError("quantizing the file's weights with its own scales changed their values")
    return torch.nn.Parameter(tensor, requires_grad=False)


class ExactFourBitLinear(torch.nn.Module):
    """``W4 x + C s(x)`` (module docstring): a GGUF 4-bit linear as 8da4w weights with the file's
    values and scales, plus its groups' offsets as an 8-bit linear over the group sums (absent
    for Q4_0). ``s(x)`` is 32 times the groups' means, a mean over the inner dimensions of a 4-D
    view: the form of XNNPACK's global average pooling, so that XNNPACK runs it."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = q.shape[1], q.shape[0]
        self.weight = _dynamic_int8_activations(q.float() * scale.repeat_interleave(GROUP, 1), q, scale, GROUP,
                                                torch.int4)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.offset = None
        if offset.any():
            c = offset * GROUP  # applied to the means
            c_scale = c.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127
            c_q = torch.round(c / c_scale).clamp(-127, 127).to(torch.int8)
            self.offset = _dynamic_int8_activations(c_q.float() * c_scale, c_q, c_scale, c.shape[1], torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        if self.offset is None:
            return y
        means = x.reshape(-1, self.in_features // GROUP, GROUP, 1).mean(dim=(2, 3), keepdim=True)
        return y + torch.nn.functional.linear(means.reshape(*x.shape[:-1], -1), self.offset)
