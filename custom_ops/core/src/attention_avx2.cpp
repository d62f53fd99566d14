// spec_edge::attention on 256-bit vectors; compiled with -mavx2 and only selected on CPUs that
// have it. Same operations, same order, same bits as the baseline.
#include "attention_kernel.h"

namespace spec_edge {
const AttendKernels& attend_avx2() {
  static const AttendKernels kernels{attend<float>, attend<Half>};
  return kernels;
}
}  // namespace spec_edge
