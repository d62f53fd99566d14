// Attention over a KV cache: the model side of the exported programs. spec_edge carries these
// kernels so that a program needs no op library beyond spec_edge's and ExecuTorch's runtime
// (ExecuTorch's own fused LLM ops live in a library that needs libtorch), and so that the Python
// loop and the C++ runner compute the same bits.
#pragma once

#include "spec_edge/status.h"
#include "spec_edge/types.h"

#include <cstdint>

namespace spec_edge {

// A [batch, seq, heads, dim] tensor (float, or Half for 16-bit caches) whose last axis is
// contiguous; other strides free.
template <class T>
struct Heads {
  T* data = nullptr;
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  T* at(int64_t b, int64_t s, int64_t h) const {
    return data + b * batch_stride + s * seq_stride + h * head_stride;
  }
};
using ConstHeads = Heads<const float>;
using ConstHalfHeads = Heads<const Half>;

// The caches are float (C = float) or float16 (C = Half): 16-bit caches halve the bytes a step
// reads. Both are instantiated in attention.cpp.

// update_cache(value [B, S, H, D], cache [B, C, H, D], start_pos):
// cache[b, start_pos + i] = value[b, i] for i < S. Needs 0 <= start_pos and start_pos + S <= C.
// A float16 cache holds each value rounded to nearest even (to_half, types.h).
template <class C>
Status update_cache(const ConstHeads& value, const Heads<C>& cache, int64_t start_pos);

// attention(q [B, S, Hq, D], k_cache [B, C, Hkv, D], v_cache [B, C, Hkv, D], start_pos)
//   -> out [B, S, Hq, D]
// Causal attention: query i sits at position start_pos + i and reads cache positions
// 0..start_pos + i; query head h reads kv head h / (Hq / Hkv) (grouped-query attention). With
// s_j = (q . k_j) * (1 / sqrt(D)), the dot product summed in 8 interleaved float partial sums
// combined pairwise, p_j = exp_nonpositive(s_j - max s) (numerics.h), out = (sum_j p_j v_j) /
// (sum_j p_j), both sums in position order. Needs start_pos + S <= C and Hq a multiple of Hkv.
// Inputs are activations: NaN or inf in them give meaningless outputs, never a crash (a NaN
// output is always the positive quiet NaN 0x7fc00000, the same bits on every path).
// The rows and the query heads that share a KV head are computed together a block of positions
// at a time, so each KV head's caches are read once per call (attention_kernel.h). Over float16
// caches each value is read as the float it holds (exactly): the output has the bits of the
// float32 op over caches holding those floats.
template <class C>
Status attention(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache,
                 int64_t start_pos, const Heads<float>& out);

// The same for query heads head_begin..head_end - 1 only; out's other heads are left as they are
// (an empty range checks the arguments and computes nothing). Each head is computed alone, so a
// caller that splits the heads between threads gets the bits of one call.
template <class C>
Status attention(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache,
                 int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end);

}  // namespace spec_edge
