// The residual of a sampled verify step, max(0, p - q) over the kept tokens of two explicit rows:
// its mass and its inverse CDF. The CUDA build's twin: custom_ops/cuda/src/residual.cuh.
#include "filters.h"

namespace spec_edge {

double FilteredRow::residual_mass(const FilteredRow& q, float a, float b) const {
  return residual_walk(q, a, b, -1.0, nullptr);
}

int64_t FilteredRow::residual_draw(const FilteredRow& q, float a, float b, double target) const {
  int64_t token = -1;
  residual_walk(q, a, b, target, &token);
  return token;
}

// max(0, num_p * a - num_q * b) over p's kept tokens, ascending, summed in double; with `token`,
// stops at the first running sum above `target` (or the last positive term).
double FilteredRow::residual_walk(const FilteredRow& q, float a, float b, double target,
                                  int64_t* token) const {
  double cum = 0.0;
  size_t qi = 0;
  for (size_t i = 0; i < kept_.size(); ++i) {
    const int64_t id = kept_[i];
    while (qi < q.kept_.size() && q.kept_[qi] < id) ++qi;
    const float nq = qi < q.kept_.size() && q.kept_[qi] == id ? q.kept_num_[qi] : 0.0f;
    const float d = kept_num_[i] * a - nq * b;
    if (!(d > 0.0f)) continue;
    cum += d;
    if (token != nullptr) {
      *token = id;
      if (cum > target) break;
    }
  }
  return cum;
}

}  // namespace spec_edge
