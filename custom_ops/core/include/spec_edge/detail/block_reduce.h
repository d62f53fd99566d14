// The block-ordered mass and inverse-CDF scan of numerics.h, and the row passes built on them,
// shared by every CPU path.
//
// A path supplies its block type (kBlock floats, e.g. float[64] or 16 four-lane vectors),
// `fill(base, m, block)` writing the m values of the block at `base` and zeros past them, and
// `sum(block)`, the halving fold. The walk over blocks is the same code for every path.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/numerics.h"

namespace spec_edge {

template <class Block>
SPEC_EDGE_HD static inline void block_values(const Block& block, float* out) {
  static_assert(sizeof(Block) == kBlock * sizeof(float), "a block holds kBlock floats");
  std::memcpy(out, &block, sizeof(Block));
}

// Sum over [0, n): block sums in float, accumulated left to right in double. With `sums`, the
// block sums are also stored there (one per block), for a later block_scan.
template <class Block, class Fill, class Sum>
static double block_mass(int64_t n, const Fill& fill, const Sum& sum, float* sums = nullptr) {
  double total = 0.0;
  alignas(64) Block block;
  for (int64_t base = 0; base < n; base += kBlock) {
    fill(base, n - base < kBlock ? n - base : kBlock, block);
    const float s = sum(block);
    if (sums != nullptr) sums[base / kBlock] = s;
    total += static_cast<double>(s);
  }
  return total;
}

// Inverse CDF (also the CUDA build's, on one thread): the first j at which the running total exceeds `target`, walking the block
// sums of block_mass and, inside the crossing block, single values in double. Values are
// >= 0, so j always has a positive value. When rounding leaves no crossing (target at the very
// top of the mass), the last positive value is returned; -1 only for an all-zero row. `sums`,
// when given, holds the block sums block_mass stored: only the crossing block is filled again.
template <class Block, class Fill, class Sum>
SPEC_EDGE_HD static int64_t block_scan(int64_t n, const Fill& fill, const Sum& sum, double target,
                          const float* sums = nullptr) {
  double cum = 0.0;
  int64_t last_positive_block = -1;
  alignas(64) Block block;
  alignas(64) float v[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = n - base < kBlock ? n - base : kBlock;
    if (sums == nullptr) fill(base, m, block);
    const float s = sums != nullptr ? sums[base / kBlock] : sum(block);
    if (s > 0.0f) {
      if (cum + static_cast<double>(s) > target) {
        if (sums != nullptr) fill(base, m, block);
        block_values(block, v);
        double c = cum;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          if (v[j] > 0.0f) {
            c += static_cast<double>(v[j]);
            last = base + j;
            if (c > target) return last;
          }
        }
        return last;
      }
      last_positive_block = base;
    }
    cum += static_cast<double>(s);
  }
  if (last_positive_block < 0) return -1;
  const int64_t m = n - last_positive_block < kBlock ? n - last_positive_block : kBlock;
  fill(last_positive_block, m, block);
  block_values(block, v);
  for (int64_t j = m - 1; j >= 0; --j)
    if (v[j] > 0.0f) return last_positive_block + j;
  return -1;
}

// Writes the patches that fall in [base, base + m) through set(lane, value).
template <class Set>
static inline void apply_patches(const Patches& p, int64_t base, int64_t m, const Set& set) {
  if (p.count == 0 || p.index[p.count - 1] < base || p.index[0] >= base + m) return;
  int64_t lo = 0, hi = p.count;  // first patch >= base
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (p.index[mid] < base) lo = mid + 1;
    else hi = mid;
  }
  for (int64_t i = lo; i < p.count && p.index[i] < base + m; ++i) set(p.index[i] - base, p.value[i]);
}

namespace {

// A row's maximum (NaN ignored, or unspecified when a NaN is present), and whether a NaN or +inf
// was seen: what each path's max scan returns.
struct MaxScan {
  float max;
  bool nan, pos_inf;
};

// The row passes every path builds the same way from its block fills. `Path` provides Elem (the
// row's element type), Block, sum(block) (the fold), load, max_scan(x, n),
// first_index_of(x, n, value), prob_mass, collect, block_max(block, m) (the maximum of the
// first m values), BoundState and block_bound (see bound_pass), and the fills, each writing
// the m values of the block at `base` and zeros past them:
//   fill_probs(x, exclude, base, m, s), fill_exp(x, map, base, m, s) (patches applied),
//   fill_prob_residual(p, q, a, b, base, m, s).
template <class Path>
struct BlockPasses {
  using T = typename Path::Elem;
  using Block = typename Path::Block;
  static const T* row(const void* x) { return static_cast<const T*>(x); }

  static ArgmaxResult argmax(const void* xv, int64_t n) {
    const T* x = row(xv);
    const MaxScan s = Path::max_scan(x, n);
    ArgmaxResult r;
    if (!s.nan) {
      r.index = Path::first_index_of(x, n, s.max);
      return r;
    }
    for (int64_t j = 0; j < n; ++j)
      if (to_float(x[j]) != to_float(x[j])) {
        r.nan_at = j;
        break;
      }
    return r;
  }

  static MaxResult logit_max(const void* x, int64_t n) {
    const MaxScan s = Path::max_scan(row(x), n);
    return MaxResult{s.max, !(s.nan || s.pos_inf)};
  }

  static float patched_max(const void* x, int64_t n, Patches patches) {
    float best = -std::numeric_limits<float>::infinity();
    alignas(64) Block block;
    for (int64_t base = 0; base < n; base += kBlock) {
      const int64_t m = n - base < kBlock ? n - base : kBlock;
      Path::fill_patched(row(x), patches, base, m, block);
      const float v = Path::block_max(block, m);
      best = v > best ? v : best;
    }
    return best;
  }

  template <class Fill>
  static double mass(int64_t n, const Fill& fill, float* sums = nullptr) {
    return block_mass<Block>(n, fill, Path::sum, sums);
  }
  template <class Fill>
  static int64_t scan(int64_t n, const Fill& fill, double target, const float* sums = nullptr) {
    return block_scan<Block>(n, fill, Path::sum, target, sums);
  }

  static int64_t prob_scan(const void* x, int64_t n, int64_t exclude, double target) {
    return scan(
        n, [&](int64_t base, int64_t m, Block& s) { Path::fill_probs(row(x), exclude, base, m, s); },
        target);
  }
  static double exp_mass(const void* x, int64_t n, ExpMap e) {
    return mass(n, [&](int64_t base, int64_t m, Block& s) { Path::fill_exp(row(x), e, base, m, s); });
  }
  // exp_mass's block sums of the listed blocks (the first `count`, in order, when `blocks` is
  // null) and, with `values` (room for n), their numerators: the same fill and fold as
  // exp_mass, so the same bits.
  static void exp_blocks(const void* x, int64_t n, ExpMap e, const int64_t* blocks,
                         int64_t count, float* sums, float* values) {
    alignas(64) Block block;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t base = (blocks != nullptr ? blocks[i] : i) * kBlock;
      const int64_t m = n - base < kBlock ? n - base : kBlock;
      Path::fill_exp(row(x), e, base, m, block);
      sums[base / kBlock] = Path::sum(block);
      if (values != nullptr) std::memcpy(values + base, &block, m * sizeof(float));
    }
  }
  static int64_t exp_scan(const void* x, int64_t n, ExpMap e, const float* sums, double target) {
    return scan(
        n, [&](int64_t base, int64_t m, Block& s) { Path::fill_exp(row(x), e, base, m, s); },
        target, sums);
  }
  // Each path's BoundState holds the running maximum (max()) and whether a NaN was seen (nan());
  // block_bound(x, patches, base, m, a, state) folds the block's patched values into it and
  // returns the fold of their bounds relative to the updated maximum; bound_run(x, blocks, a,
  // state, ref, sum) does the same for `blocks` whole blocks without patches from x on.
  static MaxResult bound_pass(const void* x, int64_t n, Patches patches, float a, float* ref,
                              float* sum) {
    typename Path::BoundState state;
    by_runs(
        n, patches,
        [&](int64_t base, int64_t blocks) {
          Path::bound_run(row(x) + base, blocks, a, state, ref + base / kBlock, sum + base / kBlock);
        },
        [&](int64_t base, int64_t m, const Patches& here) {
          sum[base / kBlock] = Path::block_bound(row(x), here, base, m, a, state);
          ref[base / kBlock] = state.max();
        });
    const float max = state.max();
    return MaxResult{max, !(state.nan() || max == std::numeric_limits<float>::infinity())};
  }
  // Path::maxima_run(x, blocks, state, max) folds `blocks` whole blocks without patches into the
  // state as bound_run does, writing each block's maximum; other blocks are filled and scanned.
  static MaxResult block_maxima(const void* x, int64_t n, Patches patches, float* max) {
    typename Path::BoundState state;
    float others = -std::numeric_limits<float>::infinity();
    bool nan = false;
    by_runs(
        n, patches,
        [&](int64_t base, int64_t blocks) {
          Path::maxima_run(row(x) + base, blocks, state, max + base / kBlock);
        },
        [&](int64_t base, int64_t m, const Patches& here) {
          alignas(64) Block block;
          alignas(64) float v[kBlock];
          Path::fill_patched(row(x), here, base, m, block);
          block_values(block, v);
          float bm = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < m; ++j) {
            bm = v[j] > bm ? v[j] : bm;
            nan |= v[j] != v[j];
          }
          max[base / kBlock] = bm;
          others = bm > others ? bm : others;
        });
    const float row_max = state.max() > others ? state.max() : others;
    return MaxResult{row_max, !(nan || state.nan() || row_max == std::numeric_limits<float>::infinity())};
  }
  // The blocks of [0, n) in order: runs of whole blocks without patches as run(base, blocks),
  // every other block as block(base, m, its patches).
  template <class Run, class One>
  static void by_runs(int64_t n, const Patches& patches, const Run& run, const One& block) {
    const int64_t whole_end = n / kBlock * kBlock;
    int64_t first = 0;  // the first patch at or after `base` (patch indices ascend)
    for (int64_t base = 0; base < n;) {
      // Whole blocks up to the next one with a patch.
      const int64_t run_end =
          first < patches.count && patches.index[first] < whole_end
              ? patches.index[first] / kBlock * kBlock
              : whole_end;
      if (run_end > base) {
        run(base, (run_end - base) / kBlock);
        base = run_end;
        continue;
      }
      const int64_t m = n - base < kBlock ? n - base : kBlock;
      int64_t end = first;
      while (end < patches.count && patches.index[end] < base + m) ++end;
      block(base, m, Patches{patches.index + first, patches.value + first, end - first});
      first = end;
      base += kBlock;
    }
  }
  static double prob_residual_mass(const void* p, const void* q, int64_t n, float a, float b) {
    return mass(n, [&](int64_t base, int64_t m, Block& s) {
      Path::fill_prob_residual(row(p), row(q), a, b, base, m, s);
    });
  }
  static int64_t prob_residual_scan(const void* p, const void* q, int64_t n, float a, float b,
                                    double target) {
    return scan(
        n,
        [&](int64_t base, int64_t m, Block& s) {
          Path::fill_prob_residual(row(p), row(q), a, b, base, m, s);
        },
        target);
  }
  static RowKernels table() {
    return RowKernels{argmax,             Path::prob_mass,    prob_scan,
                      logit_max,          exp_mass,           exp_blocks,
                      exp_scan,           bound_pass,         block_maxima,
                      prob_residual_mass, prob_residual_scan, Path::load,
                      patched_max,        Path::collect,      Path::exp_values};
  }
};

}  // namespace
}  // namespace spec_edge
