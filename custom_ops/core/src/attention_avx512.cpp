// spec_edge::attention with AVX-512's 32 vector registers (the same 8-lane vectors, wider
// tiles); compiled with -mavx512vl and only selected on CPUs that have it. Same operations,
// same order, same bits as the baseline.
#include "attention_kernel.h"

namespace spec_edge {
const AttendKernels& attend_avx512() {
  static const AttendKernels kernels{attend<float>, attend<Half>};
  return kernels;
}
}  // namespace spec_edge
