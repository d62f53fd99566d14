// The argument checks of each op, separate from its computation, so that every build of the
// ops (the CPU core and the CUDA build, which runs them on host copies of the small inputs)
// rejects the same input with the same message. Score rows are checked for their shape here and
// for their values (NaN, +inf, negative probabilities) while the op reads them.
#pragma once

#include "spec_edge/ops.h"

namespace spec_edge {

Status validate_verify_greedy(const Rows& target, const Tokens& draft_tokens);
Status validate_accept(const Rows& target, const Rows* draft, const Tokens& draft_tokens,
                       const Uniforms& uniforms);
Status validate_verify(const Rows& target, const Rows& draft, const Tokens& draft_tokens,
                       const VerifyParams& params);
// logits [B, 1, V] and the sampling parameters of `sample` / `filter_logits`.
Status validate_sampling_rows(const Rows& logits, PerRow<float> temperature, int64_t seed_count,
                              int64_t offset_count, const Filters& filters);

}  // namespace spec_edge
