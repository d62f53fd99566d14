// The AVX2 path (256-bit vectors, F16C half conversion); compiled with -mavx2 -mf16c and only
// selected on CPUs that report both.
#include "vector_kernels.h"

namespace spec_edge {
const RowKernels& avx2_row_kernels(DType dtype) { return VectorKernels<8>::get(dtype); }
}  // namespace spec_edge
