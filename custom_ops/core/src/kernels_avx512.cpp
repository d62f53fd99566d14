// The AVX-512 path (512-bit vectors; F, DQ for mask moves, half loads): compiled with
// -mavx512f -mavx512dq and only selected on CPUs (and OSes) that support both.
#include "vector_kernels.h"

namespace spec_edge {
const RowKernels& avx512_row_kernels(DType dtype) { return VectorKernels<16>::get(dtype); }
}  // namespace spec_edge
