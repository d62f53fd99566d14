// Scalar reference of the row passes: the definition every other path is tested against.
#include <algorithm>
#include <limits>

#include "row_kernels.h"
#include "spec_edge/numerics.h"

namespace spec_edge {
namespace {

// Sum of value(j) over [0, n) in the block order of numerics.h.
template <class Value>
double block_mass(int64_t n, const Value& value) {
  double total = 0.0;
  float s[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = std::min(kBlock, n - base);
    for (int64_t j = 0; j < kBlock; ++j) s[j] = j < m ? value(base + j) : 0.0f;
    total += static_cast<double>(fold_block(s));
  }
  return total;
}

// Inverse CDF: the first j at which the running total exceeds `target`, walking block sums as
// block_mass does and, inside the crossing block, single values in double. Values are >= 0,
// so the returned j always has value(j) > 0. When rounding leaves no crossing (target at the
// very top of the mass), the last positive value is returned. -1 only for an all-zero row.
template <class Value>
int64_t block_scan(int64_t n, const Value& value, double target) {
  double cum = 0.0;
  int64_t last_positive_block = -1;
  float s[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = std::min(kBlock, n - base);
    for (int64_t j = 0; j < kBlock; ++j) s[j] = j < m ? value(base + j) : 0.0f;
    const float block = fold_block(s);
    if (block > 0.0f) {
      if (cum + static_cast<double>(block) > target) {
        double c = cum;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          const float v = value(base + j);
          if (v > 0.0f) {
            c += static_cast<double>(v);
            last = base + j;
            if (c > target) return last;
          }
        }
        return last;
      }
      last_positive_block = base;
    }
    cum += static_cast<double>(block);
  }
  if (last_positive_block < 0) return -1;
  for (int64_t j = std::min(n, last_positive_block + kBlock) - 1; j >= last_positive_block; --j)
    if (value(j) > 0.0f) return j;
  return -1;
}

template <class T>
struct Reference {
  static const T* row(const void* x) { return static_cast<const T*>(x); }

  static float load(const void* x, int64_t j) { return to_float(row(x)[j]); }

  static ArgmaxResult argmax(const void* xv, int64_t n) {
    const T* x = row(xv);
    ArgmaxResult r;
    float best = -std::numeric_limits<float>::infinity();
    r.index = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[j]);
      if (v != v) {
        r.nan_at = j;
        return r;
      }
      if (v > best) {
        best = v;
        r.index = j;
      }
    }
    return r;
  }

  static MassResult prob_mass(const void* xv, int64_t n, int64_t exclude) {
    const T* x = row(xv);
    MassResult r;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[j]);
      if (!(v >= 0.0f && v <= std::numeric_limits<float>::max())) r.clean = false;
    }
    r.mass = block_mass(n, [&](int64_t j) { return j == exclude ? 0.0f : to_float(x[j]); });
    return r;
  }

  static int64_t prob_scan(const void* xv, int64_t n, int64_t exclude, double target) {
    const T* x = row(xv);
    return block_scan(n, [&](int64_t j) { return j == exclude ? 0.0f : to_float(x[j]); },
                      target);
  }

  static MaxResult logit_max(const void* xv, int64_t n) {
    const T* x = row(xv);
    MaxResult r;
    r.max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[j]);
      if (!(v < std::numeric_limits<float>::infinity())) r.clean = false;  // NaN or +inf
      r.max = v > r.max ? v : r.max;
    }
    return r;
  }

  static float exp_value(const T* x, int64_t j, ExpMap m) {
    return exp_nonpositive(to_float(x[j]) / m.temp - m.zmax);
  }

  static double exp_mass(const void* xv, int64_t n, ExpMap m) {
    const T* x = row(xv);
    return block_mass(n, [&](int64_t j) { return exp_value(x, j, m); });
  }

  static int64_t exp_scan(const void* xv, int64_t n, ExpMap m, double target) {
    const T* x = row(xv);
    return block_scan(n, [&](int64_t j) { return exp_value(x, j, m); }, target);
  }

  static float residual(float vp, float vq, float a, float b) {
    const float d = vp * a - vq * b;
    return d > 0.0f ? d : 0.0f;
  }

  static double prob_residual_mass(const void* pv, const void* qv, int64_t n, float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(n, [&](int64_t j) { return residual(to_float(p[j]), to_float(q[j]), a, b); });
  }

  static int64_t prob_residual_scan(const void* pv, const void* qv, int64_t n, float a, float b,
                                    double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n, [&](int64_t j) { return residual(to_float(p[j]), to_float(q[j]), a, b); }, target);
  }

  static double exp_residual_mass(const void* pv, const void* qv, int64_t n, ExpMap mp, ExpMap mq,
                                  float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(
        n, [&](int64_t j) { return residual(exp_value(p, j, mp), exp_value(q, j, mq), a, b); });
  }

  static int64_t exp_residual_scan(const void* pv, const void* qv, int64_t n, ExpMap mp,
                                   ExpMap mq, float a, float b, double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n, [&](int64_t j) { return residual(exp_value(p, j, mp), exp_value(q, j, mq), a, b); },
        target);
  }

  static RowKernels table() {
    return RowKernels{argmax,        prob_mass,          prob_scan,          logit_max,
                      exp_mass,      exp_scan,           prob_residual_mass, prob_residual_scan,
                      exp_residual_mass, exp_residual_scan, load};
  }
};

const RowKernels kReferenceF32 = Reference<float>::table();
const RowKernels kReferenceF16 = Reference<Half>::table();
const RowKernels kReferenceBF16 = Reference<BFloat16>::table();

}  // namespace

const RowKernels& reference_row_kernels(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return kReferenceF16;
    case DType::kBFloat16: return kReferenceBF16;
    default: return kReferenceF32;
  }
}

}  // namespace spec_edge
