// spec_edge::attention on 256-bit vectors; compiled with -mavx2 and only selected on CPUs that
// have it. Same operations, same order, same bits as the baseline.
#include "attention_kernel.h"

namespace spec_edge {
void attend_avx2(const ConstHeads& q, const ConstHeads& k_cache, const ConstHeads& v_cache,
                 int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end) {
  attend(q, k_cache, v_cache, start_pos, out, head_begin, head_end);
}
}  // namespace spec_edge
