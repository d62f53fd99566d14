// The row passes on compiler-generic vectors of W floats (GCC/Clang vector extensions).
//
// One source for every vector path: included by a translation unit compiled for its ISA
// (W = 4: SSE2 on x86-64, NEON on aarch64; W = 8: AVX2; W = 16: AVX-512). Same operations in
// the same order as the scalar reference (numerics.h), so the same bits. Everything here has
// internal linkage so that code compiled for one ISA is never shared with another translation
// unit.
#pragma once

#include <cstdint>
#include <cstring>

#include "spec_edge/detail/block_reduce.h"
#include "spec_edge/detail/row_kernels.h"
#include "vector_lanes.h"

namespace spec_edge {
namespace {

template <int W>
struct VectorKernels : VectorLanes<W> {
  using Lanes = VectorLanes<W>;
  using typename Lanes::F;
  using typename Lanes::I;
  using typename Lanes::U;
  using typename Lanes::Block;
  using Lanes::splat;
  using Lanes::load;
  using Lanes::select;
  using Lanes::keep;
  using Lanes::min64;
  using Lanes::exp_n;
  using Lanes::exp;
  using Lanes::exp_bound;
  using Lanes::note_unordered;
  using Lanes::lane_max;
  using Lanes::greater_or;
  using Lanes::fold;
  using Lanes::fold_vectors;
  using Lanes::fold_lanes;
  using Lanes::reduce_lanes;
  using Lanes::load_elems;
  using Lanes::load_block;
  using Lanes::shuffle;
  using Lanes::iota;
  using Lanes::clear_tail;
  using Lanes::kVecs;
  using Lanes::kPrefetchBlocks;
  using Lanes::kExpChains;

  template <class T>
  struct Row {
    using Elem = T;
    using Block = typename VectorKernels::Block;
    static const T* row(const void* x) { return static_cast<const T*>(x); }
    static float sum(const Block& s) { return fold(s); }
    static float load(const void* x, int64_t j) { return to_float(row(x)[j]); }

    // One step of the maximum scan with each ISA's own max instruction (the maximum is exact,
    // so any order gives the same value): NEON's fmax propagates NaN into the maximum, x86's
    // max ignores a NaN operand, which a separate unordered compare records.
    static void max_step(F& m, I& nan, F v) {
#if defined(__ARM_NEON)
      if constexpr (W == 4) {
        m = (F)vmaxq_f32((float32x4_t)m, (float32x4_t)v);
        return;
      }
#endif
      m = greater_or(v, m);
      note_unordered(nan, v, v);
    }

    // The maximum (unspecified when the row holds a NaN), with four independent accumulators
    // so the loop is not latency-bound; +inf is seen in the maximum itself.
    static MaxScan max_scan(const T* x, int64_t n) {
      F m[4] = {splat(-kInfinity), splat(-kInfinity), splat(-kInfinity), splat(-kInfinity)};
      I nan = {};
      F s[kVecs];
      int64_t base = 0;
      for (; base + kBlock <= n; base += kBlock) {
        load_block(x + base, kBlock, s);
        for (int k = 0; k < kVecs; ++k) max_step(m[k & 3], nan, s[k]);
      }
      MaxScan r{-kInfinity, false, false};
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < W; ++l) {
          r.max = m[k][l] > r.max ? m[k][l] : r.max;
          r.nan |= nan[l] != 0 || m[k][l] != m[k][l];
        }
      for (int64_t j = base; j < n; ++j) {
        const float v = to_float(x[j]);
        r.max = v > r.max ? v : r.max;
        r.nan |= v != v;
      }
      r.pos_inf = r.max == kInfinity;
      return r;
    }

    // First index holding `value`: whole blocks tested with vectors, then element-wise.
    static int64_t first_index_of(const T* x, int64_t n, float value) {
      const F mx = splat(value);
      F b[kVecs];
      int64_t base = 0;
      for (; base + kBlock <= n; base += kBlock) {
        load_block(x + base, kBlock, b);
        I hit = {};
        for (int k = 0; k < kVecs; ++k) hit |= b[k] == mx;
        if (lane_bits(hit) != 0) break;
      }
      for (int64_t j = base; j < n; ++j)
        if (to_float(x[j]) == value) return j;
      return 0;
    }

    static void exclude_lane(F* s, int64_t base, int64_t m, int64_t exclude) {
      if (exclude >= base && exclude < base + m) {
        const int64_t j = exclude - base;
        s[j / W][j % W] = 0.0f;
      }
    }

    // A NaN or +inf makes the mass non-finite; a negative value sets a sign bit. Either marks
    // the row for the caller's exact check.
    static MassResult prob_mass(const void* xv, int64_t n, int64_t exclude) {
      const T* x = row(xv);
      U signs = {};
      const double total = block_mass<Block>(
          n,
          [&](int64_t base, int64_t m, F* s) {
            load_block(x + base, m, s);
            for (int k = 0; k < kVecs; ++k) signs |= (U)s[k];
            exclude_lane(s, base, m, exclude);
          },
          sum);
      uint32_t any = 0;
      for (int l = 0; l < W; ++l) any |= signs[l];
      return MassResult{total, (any >> 31) == 0 && total <= std::numeric_limits<double>::max()};
    }

    static void fill_probs(const T* x, int64_t exclude, int64_t base, int64_t m, F* s) {
      load_block(x + base, m, s);
      exclude_lane(s, base, m, exclude);
    }

    static void fill_patched(const T* x, const Patches& p, int64_t base, int64_t m, F* s) {
      load_block(x + base, m, s);
      apply_patches(p, base, m, [&](int64_t j, float v) {  // lane selects, no stores
        const I lanes = iota();
        for (int k = 0; k < kVecs; ++k) s[k] = select(lanes + W * k == static_cast<int32_t>(j), splat(v), s[k]);
      });
    }

    static float block_max(const F* s, int64_t m) {
      float r = -kInfinity;
      if (m == kBlock) {
        F v = s[0];
        I unused = {};
        for (int k = 1; k < kVecs; ++k) max_step(v, unused, s[k]);
        for (int l = 0; l < W; ++l) r = v[l] > r ? v[l] : r;
        return r;
      }
      for (int64_t j = 0; j < m; ++j) r = s[j / W][j % W] > r ? s[j / W][j % W] : r;
      return r;
    }

    // Bit l set where lane l of the all-ones/all-zeros mask is set.
    static uint32_t lane_bits(I mask) {
#if defined(__AVX512F__)
      if constexpr (W == 16) return static_cast<uint32_t>(_mm512_movepi32_mask((__m512i)mask));
#endif
#if defined(__AVX2__)
      if constexpr (W == 8) return static_cast<uint32_t>(_mm256_movemask_ps((__m256)mask));
#endif
#if defined(__SSE2__)
      if constexpr (W == 4) return static_cast<uint32_t>(_mm_movemask_ps((__m128)mask));
#endif
#if defined(__ARM_NEON)
      if constexpr (W == 4) {
        const uint32x4_t weights = {1, 2, 4, 8};
        return vaddvq_u32(vandq_u32((uint32x4_t)mask, weights));
      }
#endif
      uint32_t bits = 0;
      for (int l = 0; l < W; ++l) bits |= (mask[l] != 0 ? 1u : 0u) << l;
      return bits;
    }

    // Whole blocks are tested with vectors; the hits of a block come out of its lane mask in
    // ascending order, so the indices are those of the scalar rule.
    static CollectResult collect(const void* xv, int64_t n, ExpMap e, float threshold,
                                 int64_t* index, float* value) {
      const T* x = row(xv);
      const F xmax = splat(e.xmax), inv_temp = splat(e.inv_temp), thr = splat(threshold);
      const F inf = splat(kInfinity);
      CollectResult r;
      I bad = {};
      F s[kVecs];
      int64_t base = 0;
      for (; base + kBlock <= n; base += kBlock) {
        load_block(x + base, kBlock, s);
        uint64_t hits = 0;
        for (int k = 0; k < kVecs; ++k) {
          bad |= (s[k] != s[k]) | (s[k] == inf);
          hits |= static_cast<uint64_t>(lane_bits((s[k] - xmax) * inv_temp >= thr)) << (k * W);
        }
        if (__builtin_popcountll(hits) > kBlock / 4) {  // dense: every lane, branch-free
          for (int64_t j = 0; j < kBlock; ++j) {
            index[r.count] = base + j;
            value[r.count] = s[j / W][j % W];
            r.count += (hits >> j) & 1;
          }
          continue;
        }
        for (; hits != 0; hits &= hits - 1) {
          const int j = __builtin_ctzll(hits);
          index[r.count] = base + j;
          value[r.count++] = s[j / W][j % W];
        }
      }
      for (int l = 0; l < W; ++l) r.clean &= bad[l] == 0;
      for (int64_t j = base; j < n; ++j) {
        const float v = to_float(x[j]);
        r.clean &= v == v && v != kInfinity;
        index[r.count] = j;
        value[r.count] = v;
        r.count += (v - e.xmax) * e.inv_temp >= threshold;
      }
      return r;
    }

    static void exp_values(const float* y, int64_t n, ExpMap e, float* out) {
      const F xmax = splat(e.xmax), inv_temp = splat(e.inv_temp);
      int64_t j = 0;
      for (; j + kExpChains * W <= n; j += kExpChains * W) {
        F v[kExpChains];
        for (int k = 0; k < kExpChains; ++k) v[k] = (Lanes::load(y + j + k * W) - xmax) * inv_temp;
        Lanes::template exp_n<kExpChains>(v);
        std::memcpy(out + j, v, sizeof v);
      }
      for (; j + W <= n; j += W) {
        const F v = exp((Lanes::load(y + j) - xmax) * inv_temp);
        std::memcpy(out + j, &v, sizeof v);
      }
      for (; j < n; ++j) out[j] = exp_nonpositive((y[j] - e.xmax) * e.inv_temp);
    }

    static void fill_exp(const T* x, const ExpMap& e, int64_t base, int64_t m, F* s) {
      fill_patched(x, e.patches, base, m, s);
      const F xmax = splat(e.xmax), inv_temp = splat(e.inv_temp);
      for (int k = 0; k < kVecs; ++k) s[k] = (s[k] - xmax) * inv_temp;
      for (int k = 0; k < kVecs; k += kExpChains) Lanes::template exp_n<kExpChains>(s + k);
      clear_tail(s, m);
    }

    // bound_pass (block_reduce.h) in vector registers: the running maximum in every lane, NaN
    // lanes noted.
    struct BoundState {
      F running = splat(-kInfinity);
      I nan_lanes = {};
      float max() const { return running[0]; }
      bool nan() const {
        bool any = false;
        for (int l = 0; l < W; ++l) any |= nan_lanes[l] != 0;
        return any;
      }
    };

    // A block with patches or short of kBlock: its maximum folded into the state, then its
    // bounds. Lanes past m hold -inf, out of the maximum and with a bound in range (cleared).
    static float block_bound(const T* x, const Patches& p, int64_t base, int64_t m, float a,
                             BoundState& st) {
      F s[kVecs], t[kVecs];
      fill_patched(x, p, base, m, s);
      const I lanes = iota();
      for (int k = 0; k < kVecs; ++k)
        t[k] = s[k] = select(lanes + W * k < static_cast<int32_t>(m), s[k], splat(-kInfinity));
      st.running = greater_or(all_lanes_max(tree_max(t, st.nan_lanes)), st.running);
      const F va = splat(a);
      for (int k = 0; k < kVecs; ++k) s[k] = exp_bound(s[k] - st.running, va);
      clear_tail(s, m);
      return fold(s);
    }

    // A run of whole blocks without patches, the common case, W blocks at a time (the rest one
    // by one), software-pipelined: the running maxima of the next group are reduced before this
    // group's bounds are folded, so that the reduction's latency overlaps the folds instead of
    // stalling every group. Inlined so that GCC keeps the state in registers (on aarch64 it
    // would not).
    __attribute__((always_inline)) static void bound_run(const T* x, int64_t blocks, float a,
                                                         BoundState& st, float* ref, float* sum) {
      int64_t b = 0;
      if (blocks >= W) {
        group_refs(x, st, ref);
        for (; b + 2 * W <= blocks; b += W) {
          group_refs(x + (b + W) * kBlock, st, ref + b + W);
          group_sums(x + b * kBlock, a, ref + b, sum + b);
        }
        group_sums(x + b * kBlock, a, ref + b, sum + b);
        b += W;
      }
      for (; b < blocks; ++b) {
        const T* xb = x + b * kBlock;
        st.running = greater_or(all_lanes_max(lane_maxima<true>(xb, st.nan_lanes)), st.running);
        ref[b] = st.max();
        sum[b] = fold_lanes(block_bounds(xb, st.running, a));
      }
    }

    // block_maxima's runs: bound_run's first half, the maxima alone.
    __attribute__((always_inline)) static void maxima_run(const T* x, int64_t blocks,
                                                          BoundState& st, float* max) {
      int64_t b = 0;
      for (; b + W <= blocks; b += W) {
        I nan_lanes = {};  // a local, so that it stays in a register
        const F block_max = group_maxima<false>(x + b * kBlock, nan_lanes);
        st.nan_lanes |= nan_lanes;
        std::memcpy(max + b, &block_max, sizeof block_max);
        st.running = greater_or(all_lanes_max(block_max), st.running);
      }
      for (; b < blocks; ++b) {
        const F m = all_lanes_max(lane_maxima<false>(x + b * kBlock, st.nan_lanes));
        max[b] = m[0];
        st.running = greater_or(m, st.running);
      }
    }

    // W whole blocks, in two halves that bound_run interleaves across groups. group_refs: each
    // block's maximum (group_maxima) turned into the running maxima ref[0..W). group_sums: each
    // block's bounds relative to its ref, their folds finished across lanes at once. No step
    // waits on one block's reduction, so the blocks overlap; they are read twice, the second
    // time from L1.
    static void group_refs(const T* x, BoundState& st, float* ref) {
      I nan_lanes = {};
      const F block_max = group_maxima<true>(x, nan_lanes);
      st.nan_lanes |= nan_lanes;
      const F running = greater_or(prefix_max(block_max), st.running);
      std::memcpy(ref, &running, sizeof running);
      st.running = splat(running[W - 1]);
    }
    static void group_sums(const T* x, float a, const float* ref, float* sum) {
      F folds[W];
      for (int g = 0; g < W; ++g) folds[g] = block_bounds(x + g * kBlock, splat(ref[g]), a);
      const F sums = reduce_lanes(folds, [](F p, F q) { return p + q; });
      std::memcpy(sum, &sums, sizeof sums);
    }

    // Lane g: the maximum of whole block g of the W from x, their lane-wise maxima reduced
    // across lanes at once.
    template <bool kPrefetch>
    static F group_maxima(const T* x, I& nan_lanes) {
      F maxima[W];
      for (int g = 0; g < W; ++g) maxima[g] = lane_maxima<kPrefetch>(x + g * kBlock, nan_lanes);
      return reduce_lanes(maxima, [](F p, F q) { return greater_or(p, q); });
    }

    // The lane-wise maximum of the whole block at x (prefetching ahead with kPrefetch).
    template <bool kPrefetch>
    static F lane_maxima(const T* x, I& nan_lanes) {
      if constexpr (kPrefetch) prefetch_ahead(x);
      F t[kVecs];
      for (int k = 0; k < kVecs; ++k) t[k] = load_elems(x + W * k);
      return tree_max(t, nan_lanes);
    }

    // Lane g: the maximum of lanes 0 .. g (log2(W) shifts).
    template <int S = 1>
    static F prefix_max(F v) {
      if constexpr (S == W) {
        return v;
      } else {
        const F shifted = shuffle(v, splat(-kInfinity), [](int l) { return l < S ? W + l : l - S; });
        return prefix_max<2 * S>(greater_or(v, shifted));
      }
    }

    // The fold's vector steps over the bounds of a whole block relative to `ref`.
    static F block_bounds(const T* x, F ref, float a) {
      const F va = splat(a);
      F s[kVecs];
      for (int k = 0; k < kVecs; ++k) s[k] = exp_bound(load_elems(x + W * k) - ref, va);
      return fold_vectors(s);
    }

    // The block kPrefetchBlocks ahead of x, so that its reads overlap this block's arithmetic
    // (the hardware prefetcher alone leaves the bound pass waiting on memory). Past the row's
    // end this is harmless: prefetches do not fault. The maxima pass has too little arithmetic
    // to hide reads behind; there prefetches only compete with the hardware's (on an AMD Zen 3,
    // DRAM-resident rows took 15-20% longer with them, cache-resident ones 5% less), so it
    // does not prefetch.
    static void prefetch_ahead(const T* x) {
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(x) + kPrefetchBlocks * kBlock * sizeof(T);
      for (size_t off = 0; off < kBlock * sizeof(T); off += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(ahead + off));
    }

    // The lane-wise maximum of t[0..kVecs) by a tree of maxima (short dependency chains; t is
    // overwritten), NaN noted pairwise on x86, whose max drops it, and carried into the
    // maximum by NEON's.
    static F tree_max(F* t, I& nan_lanes) {
      for (int k = 0; k < kVecs / 2; ++k) {
        // x86's max is NaN where its second operand is, so comparing the first with the max
        // notes a NaN in either from registers (comparing the two operands reloads one).
        const F m = lane_max(t[2 * k], t[2 * k + 1]);
        note_unordered(nan_lanes, t[2 * k], m);
        t[k] = m;
      }
      for (int h = kVecs / 4; h >= 1; h /= 2)
        for (int k = 0; k < h; ++k) t[k] = lane_max(t[k], t[k + h]);
#if defined(__ARM_NEON)
      if constexpr (W == 4) nan_lanes |= t[0] != t[0];
#endif
      return t[0];
    }

    // The maximum of the lanes, in every lane (a NaN lane is dropped: fold_max has noted it).
    template <int D = W / 2>
    static F all_lanes_max(F v) {
      if constexpr (D == 0) {
        return v;
      } else {  // each lane against the lane D apart
        return all_lanes_max<D / 2>(greater_or(v, shuffle(v, v, [](int l) { return l ^ D; })));
      }
    }

    static void residual(F* s, const F* t, float a, float b) {
      const F va = splat(a), vb = splat(b), zero = splat(0.0f);
      for (int k = 0; k < kVecs; ++k) {
        const F d = s[k] * va - t[k] * vb;
        s[k] = keep(d > zero, d);
      }
    }

    static void fill_prob_residual(const T* p, const T* q, float a, float b, int64_t base,
                                   int64_t m, F* s) {
      F t[kVecs];
      load_block(p + base, m, s);
      load_block(q + base, m, t);
      residual(s, t, a, b);
    }
  };

  static const RowKernels& get(DType dtype) {
    static const RowKernels f32 = BlockPasses<Row<float>>::table(),
                            f16 = BlockPasses<Row<Half>>::table(),
                            bf16 = BlockPasses<Row<BFloat16>>::table();
    switch (dtype) {
      case DType::kFloat16: return f16;
      case DType::kBFloat16: return bf16;
      default: return f32;
    }
  }
};

}  // namespace
}  // namespace spec_edge
