// The residual of a sampled verify step over two kept sets: the twin of the core's residual.cpp.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "launch.cuh"

namespace spec_edge {
namespace cuda {
namespace {

// FilteredRow::residual_walk: max(0, num_p * a - num_q * b) over p's kept tokens, ascending, in
// double; with `token`, the first running sum above `target` (or the last positive term).
__device__ double kept_residual(const KeptRow& p, const KeptRow& q, float a, float b, double target,
                                int64_t* token) {
  double cum = 0.0;
  int64_t qi = 0;
  const int64_t np = p.head->n, nq = q.head->n;
  for (int64_t i = 0; i < np; ++i) {
    const int64_t id = p.id[i];
    while (qi < nq && q.id[qi] < id) ++qi;
    const float num_q = qi < nq && q.id[qi] == id ? q.num[qi] : 0.0f;
    const float d = p.num[i] * a - num_q * b;
    if (!(d > 0.0f)) continue;
    cum += d;
    if (token != nullptr) {
      *token = id;
      if (cum > target) break;
    }
  }
  return cum;
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
