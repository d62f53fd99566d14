// The per-row passes every op is built from: the layer that the ISA-specific microkernels
// implement. Each pass is defined by the scalar reference (reference_kernels.cpp); an ISA path
// must return identical results for identical inputs.
#pragma once

#include <cstdint>

#include "spec_edge/types.h"

namespace spec_edge {

// Replacement values for a few elements of a row (the repetition penalty's): index[i] is
// ascending and distinct, value[i] is read instead of x[index[i]].
struct Patches {
  const int64_t* index = nullptr;
  const float* value = nullptr;
  int64_t count = 0;
};

// A score row is read through one of three value maps:
//   probs:    v(j) = x[j]                                  (j == exclude gives 0)
//   exp:      v(j) = exp_nonpositive((y[j] - xmax) * inv_temp)   (softmax numerator at T),
//             y = x with the patches applied
//   residual: v(j) = max(0, vp(j) * a - vq(j) * b)         (vp, vq: probs or exp maps)
struct ExpMap {
  float xmax = 0.0f;      // the row's maximum (patched) logit
  float inv_temp = 1.0f;  // 1 / T, rounded to float
  Patches patches;
};

// Indices j (ascending) with (x[j] - xmax) * inv_temp >= threshold, on the unpatched row.
struct CollectResult {
  int64_t count = 0;
  bool clean = true;  // false when some value is NaN or +inf
};

struct ArgmaxResult {
  int64_t index = -1;     // first index of the maximum; -1 when the row holds a NaN
  int64_t nan_at = -1;    // first NaN index, or -1
};
struct MassResult {
  double mass = 0.0;
  bool clean = true;  // false when some value may be negative, NaN or infinite (re-checked)
};
struct MaxResult {
  float max = 0.0f;   // the row's maximum; unspecified when the row holds a NaN
  bool clean = true;  // false when some value is NaN or +inf
};

// All function pointers take `const void*` rows of the table's dtype.
struct RowKernels {
  ArgmaxResult (*argmax)(const void* x, int64_t n);
  MassResult (*prob_mass)(const void* x, int64_t n, int64_t exclude);
  int64_t (*prob_scan)(const void* x, int64_t n, int64_t exclude, double target);
  MaxResult (*logit_max)(const void* x, int64_t n);
  double (*exp_mass)(const void* x, int64_t n, ExpMap map);
  // exp_mass's block sums of the listed blocks (blocks 0 .. count - 1 when `blocks` is null)
  // into block_sums[b] and, with `values` (room for n), their numerators into values[j].
  void (*exp_blocks)(const void* x, int64_t n, ExpMap map, const int64_t* blocks, int64_t count,
                     float* block_sums, float* values);
  // `block_sums` (every block's, from exp_blocks, or null): read instead of recomputing every
  // block.
  int64_t (*exp_scan)(const void* x, int64_t n, ExpMap map, const float* block_sums, double target);
  // One pass over a logit row with the patches applied (the rejection sampler's proposal): the
  // maximum (clean: false on NaN or +inf) and, per block b, ref[b], the running maximum of the
  // row through block b, and sum[b], the fold of exp_upper_bound(y - ref[b], a) over the block
  // (while ref[b] is -inf, each bound is that of -87: tiny, never accepted). Room for
  // ceil(n / kBlock) in each.
  MaxResult (*bound_pass)(const void* x, int64_t n, Patches patches, float a, float* ref,
                          float* sum);
  // The maximum of the patched row (clean: false on NaN or +inf) and max[b], block b's own
  // maximum (-inf for a block of -inf), room for ceil(n / kBlock): the sampler's envelope.
  MaxResult (*block_maxima)(const void* x, int64_t n, Patches patches, float* max);
  double (*prob_residual_mass)(const void* p, const void* q, int64_t n, float a, float b);
  int64_t (*prob_residual_scan)(const void* p, const void* q, int64_t n, float a, float b,
                                double target);
  float (*load)(const void* x, int64_t j);  // one element as float
  // The maximum of the patched row (the caller has checked the row for NaN).
  float (*patched_max)(const void* x, int64_t n, Patches patches);
  // Writes the indices of CollectResult's rule to `index` and their (unpatched) values to
  // `value` (room for n each).
  CollectResult (*collect)(const void* x, int64_t n, ExpMap map, float threshold, int64_t* index,
                           float* value);
  // out[i] = exp_nonpositive((y[i] - xmax) * inv_temp) over a float array (patches not applied).
  void (*exp_values)(const float* y, int64_t n, ExpMap map, float* out);
};

// The kernels of the active ISA path for `dtype` (see dispatch.cpp).
const RowKernels& row_kernels(DType dtype);
// The kernels of a named path ("scalar", "sse2", "avx2", "neon"), or null if unavailable here.
const RowKernels* row_kernels_for(const char* isa, DType dtype);
// The scalar reference kernels (the definition).
const RowKernels& reference_row_kernels(DType dtype);
// The same passes on 128-bit vectors: SSE2 on x86-64, NEON on aarch64 (kernels_vec128.cpp).
const RowKernels& vec128_row_kernels(DType dtype);
// The same passes on AVX2 (kernels_avx2.cpp; x86-64 builds only).
const RowKernels& avx2_row_kernels(DType dtype);
// The same passes on AVX-512 (kernels_avx512.cpp; x86-64 builds only).
const RowKernels& avx512_row_kernels(DType dtype);

}  // namespace spec_edge
