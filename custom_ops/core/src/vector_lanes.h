// The lane-level building blocks of the vector paths on compiler-generic vectors of W floats
// (GCC/Clang vector extensions): splats, loads and conversions, selects, the lane-wise exp and
// bound of numerics.h, maxima, the halving fold and lane reductions. vector_kernels.h builds the
// row passes on them. Internal linkage, as there: included only by a translation unit compiled
// for its ISA.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "spec_edge/numerics.h"

#if defined(__SSE2__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace spec_edge {
namespace {

template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(4 * W)));
  typedef int32_t i __attribute__((vector_size(4 * W)));
  typedef uint32_t u __attribute__((vector_size(4 * W)));
  typedef uint16_t h __attribute__((vector_size(2 * W)));
};

constexpr float kInfinity = std::numeric_limits<float>::infinity();

template <int W>
struct VectorLanes {
  using F = typename Vec<W>::f;
  using I = typename Vec<W>::i;
  using U = typename Vec<W>::u;
  static constexpr int kVecs = static_cast<int>(kBlock) / W;  // vectors per block
  // How far ahead the bound pass prefetches: at least the next group of W blocks, which is
  // then fetched while this group is computed.
  static constexpr size_t kPrefetchBlocks = W < 8 ? 8 : W;
  using Block = F[kVecs];
  // Vectors exp_n works on at once in the mass passes: enough independent chains to keep the
  // vector units busy, few enough to stay (mostly) in registers; 8 measured no better on AVX2
  // and worse on SSE2.
  static constexpr int kExpChains = 4;
  static_assert(kVecs % kExpChains == 0, "a block is a whole number of exp_n groups");

  static F splat(float x) { return F{} + x; }
  static F load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  // Vector casts between same-size vector types reinterpret the bits (GCC/Clang semantics).
  // Lane-wise mask ? a : b (a blend on AVX2 / NEON); masks are all-ones or all-zeros lanes.
  static F select(I mask, F a, F b) { return mask ? a : b; }
  // mask ? a : 0, as one AND.
  static F keep(I mask, F a) { return (F)(mask & (I)a); }
  static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

  // exp_nonpositive of numerics.h, lane-wise, on N vectors in place. Each step runs on all N
  // before the next: the same operations per lane, but N independent chains reach the
  // scheduler together (one vector's chain of ~25 dependent operations, issued alone, leaves
  // the vector units mostly waiting).
  template <int N>
  static void exp_n(F* d) {
    const F lo = splat(-87.0f), round = splat(12582912.0f);
    I in_range[N];
    F n[N], r[N], p[N];
    for (int k = 0; k < N; ++k) {
      in_range[k] = d[k] >= lo;
      d[k] = select(in_range[k], d[k], lo);
    }
    for (int k = 0; k < N; ++k) n[k] = (d[k] * splat(1.44269504088896341f) + round) - round;
    for (int k = 0; k < N; ++k) r[k] = d[k] - n[k] * splat(0.693359375f);
    for (int k = 0; k < N; ++k) r[k] = r[k] - n[k] * splat(-2.12194440e-4f);
    for (int k = 0; k < N; ++k) p[k] = splat(1.9875691500e-4f) * r[k] + splat(1.3981999507e-3f);
    for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + splat(8.3334519073e-3f);
    for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + splat(4.1665795894e-2f);
    for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + splat(1.6666665459e-1f);
    for (int k = 0; k < N; ++k) p[k] = p[k] * r[k] + splat(5.0000001201e-1f);
    for (int k = 0; k < N; ++k) p[k] = p[k] * (r[k] * r[k]) + r[k];
    for (int k = 0; k < N; ++k) p[k] = p[k] + splat(1.0f);
    for (int k = 0; k < N; ++k) {
      const I bits = (__builtin_convertvector(n[k], I) + 127) << 23;
      d[k] = keep(in_range[k], p[k] * (F)bits);
    }
  }
  static F exp(F d) {
    exp_n<1>(&d);
    return d;
  }

  // exp_upper_bound of numerics.h, lane-wise (the float-to-int conversion truncates, as the
  // scalar cast does).
  static F exp_bound(F s, F a) {
    const F t = s * a;
    return (F)(__builtin_convertvector(greater_or(t, splat(kBoundFloor)), I) + kBoundBias);
  }

  // Sets the lanes of `nan` where a or b is NaN: one compare and one OR on x86 (one masked
  // set on AVX-512, whose compares give masks); nothing on NEON, whose lane_max carries NaN.
  static void note_unordered(I& nan, F a, F b) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      nan = (I)_mm512_mask_set1_epi32((__m512i)nan, _mm512_cmp_ps_mask((__m512)a, (__m512)b, _CMP_UNORD_Q), -1);
      return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) {
      nan |= (I)_mm256_cmp_ps((__m256)a, (__m256)b, _CMP_UNORD_Q);
      return;
    }
#endif
#if defined(__SSE2__)
    if constexpr (W == 4) {
      nan |= (I)_mm_cmpunord_ps((__m128)a, (__m128)b);
      return;
    }
#endif
#if defined(__ARM_NEON)
    if constexpr (W == 4) return;
#endif
    nan |= (a != a) | (b != b);
  }

  // The lane-wise maximum (exact; a NaN operand is dropped on x86, carried on NEON).
  static F lane_max(F a, F b) {
#if defined(__ARM_NEON)
    if constexpr (W == 4) return (F)vmaxq_f32((float32x4_t)a, (float32x4_t)b);
#endif
    return greater_or(a, b);
  }

  // a > b ? a : b (b for a NaN a), as one max instruction.
  static F greater_or(F a, F b) {
#if defined(__AVX512F__)
    if constexpr (W == 16) return (F)_mm512_max_ps((__m512)a, (__m512)b);
#endif
#if defined(__AVX2__)
    if constexpr (W == 8) return (F)_mm256_max_ps((__m256)a, (__m256)b);
#endif
#if defined(__SSE2__)
    if constexpr (W == 4) return (F)_mm_max_ps((__m128)a, (__m128)b);
#endif
#if defined(__ARM_NEON)
    if constexpr (W == 4) return (F)vmaxnmq_f32((float32x4_t)a, (float32x4_t)b);
#endif
    return select(a > b, a, b);
  }

  // The halving fold of numerics.h: vector k holds elements W*k .. W*k+W-1, so folding vector
  // k with vector k + half adds element j to element j + 32, then j + 16, ...; the last
  // vector's lanes are folded the same way.
  static float fold(const F* s) { return fold_lanes(fold_vectors(s)); }
  // The fold's vector steps: lane l of the result is the fold of elements l, l + W, ....
  static F fold_vectors(const F* s) {
    F t[kVecs];
    for (int k = 0; k < kVecs; ++k) t[k] = s[k];
    for (int h = kVecs / 2; h >= 1; h /= 2)
      for (int k = 0; k < h; ++k) t[k] = t[k] + t[k + h];
    return t[0];
  }
  // Lane j plus lane j + W/2, then j + W/4, ...: the halves as shuffles, in registers.
  static float fold_lanes(F v) {
    typedef float f4 __attribute__((vector_size(16)));
    typedef float f2 __attribute__((vector_size(8)));
    typedef float f8 __attribute__((vector_size(32)));
    f4 v4;
    if constexpr (W == 16) {
      const f8 v8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
      v4 = __builtin_shufflevector(v8, v8, 0, 1, 2, 3) + __builtin_shufflevector(v8, v8, 4, 5, 6, 7);
    } else if constexpr (W == 8) {
      v4 = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
    } else {
      static_assert(W == 4, "vectors of 4, 8 or 16 floats");
      v4 = v;
    }
    const f2 v2 = __builtin_shufflevector(v4, v4, 0, 1) + __builtin_shufflevector(v4, v4, 2, 3);
    return v2[0] + v2[1];
  }

  // Lane g of the result is op over the lanes of v[g], combined in fold_lanes' order (lane j
  // with lane j + W/2, then j + W/4, ...): W vectors reduced at once by a transpose network,
  // log2(W) steps of two shuffles and one op, instead of W reductions one after another.
  template <class Op>
  static F reduce_lanes(const F* v, Op op) {
    if constexpr (W == 16) {
      // Lane j op lane j + 8: block g in the low half, block g + 8 in the high half; then the
      // steps of W = 8 in each half at once.
      F h[8], p[4], q[2];
      for (int g = 0; g < 8; ++g)
        h[g] = op(__builtin_shufflevector(v[g], v[g + 8], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                  __builtin_shufflevector(v[g], v[g + 8], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
      for (int g = 0; g < 4; ++g)
        p[g] = op(__builtin_shufflevector(h[g], h[g + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                  __builtin_shufflevector(h[g], h[g + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31));
      for (int g = 0; g < 2; ++g)
        q[g] = op(__builtin_shufflevector(p[2 * g], p[2 * g + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                  __builtin_shufflevector(p[2 * g], p[2 * g + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31));
      return op(__builtin_shufflevector(q[0], q[1], 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30),
                __builtin_shufflevector(q[0], q[1], 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31));
    } else if constexpr (W == 8) {
      F p[4], q[2];
      for (int g = 0; g < 4; ++g)  // low half: v[g] lane j op lane j + 4; high half: v[g + 4]'s
        p[g] = op(__builtin_shufflevector(v[g], v[g + 4], 0, 1, 2, 3, 8, 9, 10, 11),
                  __builtin_shufflevector(v[g], v[g + 4], 4, 5, 6, 7, 12, 13, 14, 15));
      for (int g = 0; g < 2; ++g)  // per half: lane j op lane j + 2, of two vectors
        q[g] = op(__builtin_shufflevector(p[2 * g], p[2 * g + 1], 0, 1, 8, 9, 4, 5, 12, 13),
                  __builtin_shufflevector(p[2 * g], p[2 * g + 1], 2, 3, 10, 11, 6, 7, 14, 15));
      return op(__builtin_shufflevector(q[0], q[1], 0, 2, 8, 10, 4, 6, 12, 14),
                __builtin_shufflevector(q[0], q[1], 1, 3, 9, 11, 5, 7, 13, 15));
    } else {
      F p[2];
      for (int g = 0; g < 2; ++g)  // lane j op lane j + 2, of two vectors
        p[g] = op(__builtin_shufflevector(v[2 * g], v[2 * g + 1], 0, 1, 4, 5),
                  __builtin_shufflevector(v[2 * g], v[2 * g + 1], 2, 3, 6, 7));
      return op(__builtin_shufflevector(p[0], p[1], 0, 2, 4, 6),
                __builtin_shufflevector(p[0], p[1], 1, 3, 5, 7));
    }
  }

  // W consecutive elements as floats (exact conversions).
  template <class T>
  static F load_elems(const T* x) {
    if constexpr (std::is_same_v<T, float>) {
      return load(x);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      typename Vec<W>::h b;
      std::memcpy(&b, x, sizeof b);
      return (F)(__builtin_convertvector(b, U) << 16);
    } else {
#if defined(__AVX512F__)
      if constexpr (W == 16) {
        return (F)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
      }
#endif
#if defined(__F16C__)
      if constexpr (W == 8) {
        return (F)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
      }
#endif
#if defined(__ARM_NEON)
      if constexpr (W == 4) {
        uint16x4_t bits;
        std::memcpy(&bits, x, sizeof bits);
        return (F)vcvt_f32_f16(vreinterpret_f16_u16(bits));
      }
#endif
      float buf[W];
      for (int l = 0; l < W; ++l) buf[l] = to_float(x[l]);
      return load(buf);
    }
  }

  // A block's values as float vectors, zero-padded past m.
  template <class T>
  static void load_block(const T* x, int64_t m, F* s) {
    if (m == kBlock) {
      for (int k = 0; k < kVecs; ++k) s[k] = load_elems(x + W * k);
      return;
    }
    alignas(64) float buf[kBlock];
    for (int64_t j = 0; j < m; ++j) buf[j] = to_float(x[j]);
    for (int64_t j = m; j < kBlock; ++j) buf[j] = 0.0f;
    for (int k = 0; k < kVecs; ++k) s[k] = load(buf + W * k);
  }

  // Lane l of the result is lane pick(l) of (a, b) (b's lanes numbered W .. 2W-1); pick is a
  // constexpr function of the lane.
  template <class Pick, int... L>
  static F shuffle(F a, F b, Pick pick, std::integer_sequence<int, L...>) {
    return __builtin_shufflevector(a, b, pick(L)...);
  }
  template <class Pick>
  static F shuffle(F a, F b, Pick pick) {
    return shuffle(a, b, pick, std::make_integer_sequence<int, W>{});
  }

  // Lane indices 0 .. W-1.
  static I iota() {
    I v;
    for (int l = 0; l < W; ++l) v[l] = l;
    return v;
  }

  // Zeroes lanes past m (for maps whose value at a padding 0 is not 0, e.g. exp); lane masks
  // rather than stores, so a block can stay in registers.
  static void clear_tail(F* s, int64_t m) {
    if (m == kBlock) return;
    const I lanes = iota();
    for (int k = 0; k < kVecs; ++k) s[k] = keep(lanes + W * k < static_cast<int32_t>(m), s[k]);
  }

};

}  // namespace
}  // namespace spec_edge
