// spec_edge ops on NVIDIA GPUs (compute capability 8.0+): the core's ops (spec_edge/ops.h),
// same semantics, same bits, with the score rows in device memory.
//
// Score rows (`Rows::data`) and the outputs are device pointers; draft tokens, uniforms, the
// per-row sampling parameters and prev_tokens are host views, checked by the core's own checks
// (so every bad argument gets the CPU build's message) and then uploaded. One kernel runs the
// batch, one thread block per sequence. A call then waits for its stream: the kernel reports the
// value errors of the rows it reads (NaN, +inf, negative probabilities, an empty row) and the call
// returns the first one in batch order as an error, never a token.
//
// Each row is computed exactly as the scalar reference defines it (docs/OPS.md): the 64-value
// halving fold is a warp's shuffle tree, block sums are added left to right in double, the
// exponentials, the bounds and Philox are the core's own functions (numerics.h, philox.h), and the
// kernels are compiled without FMA contraction. The filters' kept sets come from the core's
// candidates (under top-k the exact top-k set by a radix select over the row; without it, the
// tokens above the core's guess from a strided sample), compacted in index order, then top-p and
// min-p over them with the core's own scalar steps (kept_set.h).
#pragma once

#include "spec_edge/ops.h"

namespace spec_edge {
namespace cuda {

// `stream` is a cudaStream_t of the current device (null: the legacy default stream).
Status verify_greedy(const Rows& target, const Tokens& draft_tokens, VerifyResult out, void* stream);
Status accept(const Rows& target_probs, const Rows* draft_probs, const Tokens& draft_tokens,
              const Uniforms& uniforms, VerifyResult out, void* stream);
// `out.tokens` has row stride `out.tokens_stride` (>= K+1).
Status verify(const Rows& target_logits, const Rows& draft_logits, const Tokens& draft_tokens,
              const VerifyParams& params, VerifyOutput out, void* stream);
Status sample(const Rows& logits, const SampleParams& params, int64_t* tokens, void* stream);
// `out` [B, V] float32 with row stride `out_stride`, in device memory.
Status filter_logits(const Rows& logits, PerRow<float> temperature, const Filters& filters, float* out,
                     int64_t out_stride, void* stream);

// Whether a CUDA device is visible to this process.
bool device_available();

}  // namespace cuda
}  // namespace spec_edge
