// The row passes on compiler-generic 128-bit vectors (GCC/Clang vector extensions): SSE2 on
// any x86-64, NEON on any aarch64, plain scalar code elsewhere. Same operations in the same
// order as the scalar reference (numerics.h), so the same bits.
#include <algorithm>
#include <cstring>
#include <limits>

#include "block_reduce.h"
#include "row_kernels.h"

namespace spec_edge {
namespace {

using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));
using u32x4 = uint32_t __attribute__((vector_size(16)));

constexpr int kVecs = static_cast<int>(kBlock / 4);  // vectors per block
constexpr float kInf = std::numeric_limits<float>::infinity();

inline f32x4 splat(float x) { return f32x4{x, x, x, x}; }
inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Vector casts between same-size vector types reinterpret the bits (GCC/Clang semantics).
inline f32x4 select(i32x4 mask, f32x4 a, f32x4 b) {
  return (f32x4)((mask & (i32x4)a) | (~mask & (i32x4)b));
}

// exp_nonpositive of numerics.h, lane-wise.
inline f32x4 exp4(f32x4 d) {
  const f32x4 lo = splat(-87.0f), round = splat(12582912.0f);
  const i32x4 in_range = d >= lo;
  const f32x4 x = select(in_range, d, lo);
  const f32x4 n = (x * splat(1.44269504088896341f) + round) - round;
  f32x4 r = x - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  f32x4 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r;
  p = p + splat(1.0f);
  const i32x4 bits = (__builtin_convertvector(n, i32x4) + 127) << 23;
  return select(in_range, p * (f32x4)bits, splat(0.0f));
}

// The halving fold of numerics.h over 16 vectors (vector k holds elements 4k..4k+3).
inline float fold(const f32x4* s) {
  f32x4 t[8];
  for (int k = 0; k < 8; ++k) t[k] = s[k] + s[k + 8];
  for (int k = 0; k < 4; ++k) t[k] = t[k] + t[k + 4];
  for (int k = 0; k < 2; ++k) t[k] = t[k] + t[k + 2];
  const f32x4 v = t[0] + t[1];
  return (v[0] + v[2]) + (v[1] + v[3]);
}

// A block's values as float vectors, zero-padded past m.
template <class T>
inline void load_block(const T* x, int64_t m, f32x4* s) {
  if constexpr (std::is_same_v<T, float>) {
    if (m == kBlock) {
      for (int k = 0; k < kVecs; ++k) s[k] = load4(x + 4 * k);
      return;
    }
  }
  alignas(16) float buf[kBlock];
  for (int64_t j = 0; j < m; ++j) buf[j] = to_float(x[j]);
  for (int64_t j = m; j < kBlock; ++j) buf[j] = 0.0f;
  for (int k = 0; k < kVecs; ++k) s[k] = load4(buf + 4 * k);
}

// Zeroes lanes past m (for maps whose value at a padding 0 is not 0, e.g. exp).
inline void clear_tail(f32x4* s, int64_t m) {
  if (m == kBlock) return;
  alignas(16) float buf[kBlock];
  std::memcpy(buf, s, sizeof buf);
  for (int64_t j = m; j < kBlock; ++j) buf[j] = 0.0f;
  std::memcpy(s, buf, sizeof buf);
}

using Block = f32x4[kVecs];

template <class Fill>
double block_mass(int64_t n, const Fill& fill) {
  return spec_edge::block_mass<Block>(n, fill, fold);
}

template <class Fill>
int64_t block_scan(int64_t n, const Fill& fill, double target) {
  return spec_edge::block_scan<Block>(n, fill, fold, target);
}

template <class T>
struct Portable {
  static const T* row(const void* x) { return static_cast<const T*>(x); }

  static float load(const void* x, int64_t j) { return to_float(row(x)[j]); }

  struct MaxScan {
    float max;
    bool nan, pos_inf;
  };
  static MaxScan max_scan(const T* x, int64_t n) {
    f32x4 m[4] = {splat(-kInf), splat(-kInf), splat(-kInf), splat(-kInf)};
    i32x4 nan = {0, 0, 0, 0}, inf = {0, 0, 0, 0};
    f32x4 s[kVecs];
    int64_t base = 0;
    for (; base + kBlock <= n; base += kBlock) {
      load_block(x + base, kBlock, s);
      for (int k = 0; k < kVecs; ++k) {
        const f32x4 v = s[k];
        m[k & 3] = select(v > m[k & 3], v, m[k & 3]);
        nan |= v != v;
        inf |= v == splat(kInf);
      }
    }
    MaxScan r{-kInf, false, false};
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 4; ++l) r.max = m[k][l] > r.max ? m[k][l] : r.max;
    for (int l = 0; l < 4; ++l) {
      r.nan |= nan[l] != 0;
      r.pos_inf |= inf[l] != 0;
    }
    for (int64_t j = base; j < n; ++j) {
      const float v = to_float(x[j]);
      r.max = v > r.max ? v : r.max;
      r.nan |= v != v;
      r.pos_inf |= v == kInf;
    }
    return r;
  }

  static ArgmaxResult argmax(const void* xv, int64_t n) {
    const T* x = row(xv);
    const MaxScan s = max_scan(x, n);
    ArgmaxResult r;
    if (s.nan) {
      for (int64_t j = 0; j < n; ++j)
        if (to_float(x[j]) != to_float(x[j])) {
          r.nan_at = j;
          return r;
        }
    }
    // First index equal to the maximum: whole blocks tested with vectors, then element-wise.
    r.index = 0;
    const f32x4 mx = splat(s.max);
    f32x4 b[kVecs];
    int64_t base = 0;
    for (; base + kBlock <= n; base += kBlock) {
      load_block(x + base, kBlock, b);
      i32x4 hit = {0, 0, 0, 0};
      for (int k = 0; k < kVecs; ++k) hit |= b[k] == mx;
      if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
    }
    for (int64_t j = base; j < n; ++j)
      if (to_float(x[j]) == s.max) {
        r.index = j;
        break;
      }
    return r;
  }

  static MaxResult logit_max(const void* xv, int64_t n) {
    const MaxScan s = max_scan(row(xv), n);
    return MaxResult{s.max, !(s.nan || s.pos_inf)};
  }

  static void exclude_lane(f32x4* s, int64_t base, int64_t m, int64_t exclude) {
    if (exclude >= base && exclude < base + m) {
      const int64_t j = exclude - base;
      s[j / 4][j % 4] = 0.0f;
    }
  }

  static MassResult prob_mass(const void* xv, int64_t n, int64_t exclude) {
    const T* x = row(xv);
    u32x4 signs = {0, 0, 0, 0};
    const double mass = block_mass(n, [&](int64_t base, int64_t m, f32x4* s) {
      load_block(x + base, m, s);
      for (int k = 0; k < kVecs; ++k) signs |= (u32x4)s[k];
      exclude_lane(s, base, m, exclude);
    });
    const uint32_t any = signs[0] | signs[1] | signs[2] | signs[3];
    return MassResult{mass, (any >> 31) == 0 && mass <= std::numeric_limits<double>::max()};
  }

  static int64_t prob_scan(const void* xv, int64_t n, int64_t exclude, double target) {
    const T* x = row(xv);
    return block_scan(
        n,
        [&](int64_t base, int64_t m, f32x4* s) {
          load_block(x + base, m, s);
          exclude_lane(s, base, m, exclude);
        },
        target);
  }

  static void fill_exp(const T* x, ExpMap e, int64_t base, int64_t m, f32x4* s) {
    load_block(x + base, m, s);
    const f32x4 xmax = splat(e.xmax), inv_temp = splat(e.inv_temp);
    for (int k = 0; k < kVecs; ++k) s[k] = exp4((s[k] - xmax) * inv_temp);
    clear_tail(s, m);
  }

  static double exp_mass(const void* xv, int64_t n, ExpMap e) {
    const T* x = row(xv);
    return block_mass(n, [&](int64_t base, int64_t m, f32x4* s) { fill_exp(x, e, base, m, s); });
  }

  static int64_t exp_scan(const void* xv, int64_t n, ExpMap e, double target) {
    const T* x = row(xv);
    return block_scan(
        n, [&](int64_t base, int64_t m, f32x4* s) { fill_exp(x, e, base, m, s); }, target);
  }

  static void residual(f32x4* s, const f32x4* t, float a, float b) {
    const f32x4 va = splat(a), vb = splat(b), zero = splat(0.0f);
    for (int k = 0; k < kVecs; ++k) {
      const f32x4 d = s[k] * va - t[k] * vb;
      s[k] = select(d > zero, d, zero);
    }
  }

  static double prob_residual_mass(const void* pv, const void* qv, int64_t n, float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(n, [&](int64_t base, int64_t m, f32x4* s) {
      f32x4 t[kVecs];
      load_block(p + base, m, s);
      load_block(q + base, m, t);
      residual(s, t, a, b);
    });
  }

  static int64_t prob_residual_scan(const void* pv, const void* qv, int64_t n, float a, float b,
                                    double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n,
        [&](int64_t base, int64_t m, f32x4* s) {
          f32x4 t[kVecs];
          load_block(p + base, m, s);
          load_block(q + base, m, t);
          residual(s, t, a, b);
        },
        target);
  }

  static double exp_residual_mass(const void* pv, const void* qv, int64_t n, ExpMap mp, ExpMap mq,
                                  float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(n, [&](int64_t base, int64_t m, f32x4* s) {
      f32x4 t[kVecs];
      fill_exp(p, mp, base, m, s);
      fill_exp(q, mq, base, m, t);
      residual(s, t, a, b);
    });
  }

  static int64_t exp_residual_scan(const void* pv, const void* qv, int64_t n, ExpMap mp,
                                   ExpMap mq, float a, float b, double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n,
        [&](int64_t base, int64_t m, f32x4* s) {
          f32x4 t[kVecs];
          fill_exp(p, mp, base, m, s);
          fill_exp(q, mq, base, m, t);
          residual(s, t, a, b);
        },
        target);
  }

  static RowKernels table() {
    return RowKernels{argmax,        prob_mass,          prob_scan,          logit_max,
                      exp_mass,      exp_scan,           prob_residual_mass, prob_residual_scan,
                      exp_residual_mass, exp_residual_scan, load};
  }
};

const RowKernels kPortableF32 = Portable<float>::table();
const RowKernels kPortableF16 = Portable<Half>::table();
const RowKernels kPortableBF16 = Portable<BFloat16>::table();

}  // namespace

const RowKernels& portable_row_kernels(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return kPortableF16;
    case DType::kBFloat16: return kPortableBF16;
    default: return kPortableF32;
  }
}

}  // namespace spec_edge
