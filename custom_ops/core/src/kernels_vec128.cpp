// The 128-bit vector path: SSE2 on x86-64, NEON on aarch64 (baseline ISA of each, no flags).
#include "vector_kernels.h"

namespace spec_edge {
const RowKernels& vec128_row_kernels(DType dtype) { return VectorKernels<4>::get(dtype); }
}  // namespace spec_edge
