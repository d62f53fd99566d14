// spec_edge::attention with AVX-512's 32 vector registers (the same 8-lane vectors, wider
// tiles); compiled with -mavx512vl and only selected on CPUs that have it. Same operations,
// same order, same bits as the baseline.
#include "attention_kernel.h"

namespace spec_edge {
void attend_avx512(const ConstHeads& q, const ConstHeads& k_cache, const ConstHeads& v_cache,
                   int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end) {
  attend(q, k_cache, v_cache, start_pos, out, head_begin, head_end);
}
}  // namespace spec_edge
