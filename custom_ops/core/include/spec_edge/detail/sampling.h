// One row's sampling settings and the uniforms its draw consumes: what the CPU core
// (filters.h) and the CUDA build share, the latter on the host (settings, penalized ids, error
// names) and on the device (apply_penalty, DrawStream).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec_edge/ops.h"
#include "spec_edge/philox.h"
#include "spec_edge/status.h"

namespace spec_edge {

// "name[b, i" (or "name[b" for a [B, V] tensor): the row part of an element's index.
struct RowName {
  const char* name;
  int64_t b, i;
  std::string prefix() const;
};

// The repetition penalty of one logit (transformers' rule).
SPEC_EDGE_HD inline float apply_penalty(float x, float penalty) { return x < 0.0f ? x * penalty : x / penalty; }

// One row's sampling parameters, resolved from the per-row tensors.
struct RowSampling {
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f, penalty = 1.0f;
  bool filtered() const { return top_k > 0 || top_p < 1.0f || min_p > 0.0f; }
};

// Checks temperature/seed/offset counts and values and the filter parameters against a batch
// of B rows over a vocabulary of V.
Status check_sampling(int64_t B, int64_t V, PerRow<float> temperature, int64_t seed_count,
                      int64_t offset_count, const Filters& filters);
// Row b's settings over a vocabulary of V; top_k >= V keeps every token (transformers' warper
// clamps k to V), so it reads as off.
RowSampling row_sampling(PerRow<float> temperature, const Filters& filters, int64_t b, int64_t V);

// The distinct ids a row's repetition penalty applies to, ascending.
class PenalizedIds {
 public:
  // prev_tokens row b (padding skipped); empty when the penalty is off for the row.
  void reset(const Filters& filters, int64_t b, bool active);
  void insert(int64_t id);  // one more id seen (a draft token), if active
  const std::vector<int64_t>& ids() const { return ids_; }

 private:
  bool active_ = false;
  std::vector<int64_t> ids_;
};

// The uniforms a row's draw consumes, in order: `first`, then draws `next`, next + 1, ... of
// the Philox stream (seed, offset, row).
struct DrawStream {
  uint64_t seed, offset;
  uint32_t row;
  double first;
  uint64_t next;
  bool used_first = false;
  SPEC_EDGE_HD double operator()() {
    if (!used_first) {
      used_first = true;
      return first;
    }
    return philox_uniform(seed, offset, row, next++);
  }
};

// The seeded draw's envelope (docs/OPS.md, "The seeded draw from a softmax row"): its block
// weights are summed in runs of kEnvelopeRun blocks; after kMaxProposals rejections (probability
// below 1e-6: the envelope is within 68x of the mass) the draw falls back to the exact inverse CDF.
constexpr int64_t kEnvelopeRun = 32;
constexpr int kMaxProposals = 1024;

}  // namespace spec_edge
