// Where a round's proposals come from, and how many it makes: the draft model, prompt lookup
// (proposals copied from the text itself, prompt and output, for work whose output repeats its
// input), or both; a fixed K or one chosen from the rounds before. spec_edge.drafters is the same
// in Python, decision for decision.
//
// Prompt lookup: the last n tokens are looked up among the earlier n-grams, longest n first
// (max_ngram down to min_ngram); the tokens that followed the most recent earlier occurrence are
// the proposal. Where none recurs, the n tokens before the last one are looked up the same way
// (an edit: the last token replaced the one that followed them), and the proposal resumes after
// the replaced token. Every n-gram is indexed with its two most recent positions as its last
// token arrives, so a lookup is at most two hash probes per n: O(max_ngram^2) work per token,
// whatever the length of the text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spec_edge/program_format.h"  // the defaults and constants, the Python loop's too

namespace spec_edge::runner {

enum class Drafter { kModel, kLookup, kHybrid };

// The drafter's settings. The defaults are those of spec-edge-run, NativeRunner and the Python loop.
struct Drafting {
  Drafter drafter = Drafter::kModel;
  int min_ngram = kDefaultMinNgram, max_ngram = kDefaultMaxNgram;  // prompt lookup's n-gram lengths,
                                                                   // longest tried first
  int min_match = kDefaultMinMatch;  // hybrid: lookup serves a round when its n-gram is this long
  bool adaptive_k = false;           // K per round from the rounds before, up to the runner's k
  // Adaptive K's costs in target decode steps: one draft-model step, and one more row of the
  // verify step. Fixed settings, not timings, so that K follows from the tokens alone and a seed
  // gives the same tokens on every front end.
  double draft_step_cost = kDefaultDraftStepCost, verify_row_cost = kDefaultVerifyRowCost;
  // The verify step's cost with 1, 2, ... proposals, as measured on the device
  // (Runner::measure_step_costs, spec-edge-run --calibrate): real kernels cost in steps (a GEMM's
  // tile of rows), not per row. Empty: 1 + verify_row_cost per proposal.
  std::vector<double> verify_costs;
};

// A round's cost in target decode steps with k = 1..k_max proposals, what adaptive K weighs: the
// verify step's, plus k draft-model steps where the model drafts (`model_drafts`). Needs
// verify_costs empty or at least k_max long (Runner::load checks).
inline std::vector<double> round_costs(const Drafting& d, int k_max, bool model_drafts) {
  std::vector<double> costs;
  for (int k = 1; k <= k_max; ++k) {
    const double verify = d.verify_costs.empty() ? 1.0 + d.verify_row_cost * k : d.verify_costs[k - 1];
    costs.push_back(model_drafts ? verify + d.draft_step_cost * k : verify);
  }
  return costs;
}

// "model" / "lookup" / "hybrid"; std::invalid_argument naming the choices otherwise.
inline Drafter parse_drafter(const std::string& name) {
  if (name == "model") return Drafter::kModel;
  if (name == "lookup") return Drafter::kLookup;
  if (name == "hybrid") return Drafter::kHybrid;
  throw std::invalid_argument("drafter: expected one of model, lookup, hybrid, got '" + name + "'");
}

inline const char* drafter_name(Drafter d) {
  return d == Drafter::kModel ? "model" : d == Drafter::kLookup ? "lookup" : "hybrid";
}

class PromptLookup {
 public:
  // Needs 1 <= min_ngram <= max_ngram (the caller checks and names its flags).
  PromptLookup(int min_ngram, int max_ngram)
      : min_ngram_(min_ngram), max_ngram_(max_ngram), index_(max_ngram - min_ngram + 1) {}

  int min_ngram() const { return min_ngram_; }
  int max_ngram() const { return max_ngram_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }

  void clear() {
    tokens_.clear();
    for (auto& by_ngram : index_) by_ngram.clear();
  }

  void extend(const std::vector<int64_t>& tokens) {
    for (const int64_t t : tokens) append(t);
  }

  // The newest token. The n-grams ending one token earlier join the index now, so that a lookup
  // of the last n tokens finds an earlier occurrence, never the last n tokens themselves.
  void append(int64_t token) {
    tokens_.push_back(token);
    const int64_t end = static_cast<int64_t>(tokens_.size()) - 2;
    for (int n = min_ngram_; n <= max_ngram_ && n <= end + 1; ++n) {
      Positions& at = index_[n - min_ngram_].try_emplace(key(tokens_, end, n)).first->second;
      at = {end, at.latest};
    }
  }

  struct Proposal {
    int ngram = 0;                // the length of the matched n-gram (0: no match)
    std::vector<int64_t> tokens;  // up to k tokens
  };

  // Up to k tokens that followed the most recent earlier occurrence of the last n tokens, for
  // the largest n that has one. Where no n-gram of at least min_ngram tokens recurs, the text
  // may have been edited: the last token took the place of the one that followed the n tokens
  // before it (a renamed word), and the proposal is what came after the replaced token at their
  // most recent earlier occurrence, again for the largest n (only with `resume`). None when
  // neither finds one. `after`: tokens not yet in the text (a draft model's proposals) that the
  // last tokens end with; the occurrence and what followed it are still the text's.
  Proposal propose(int k, const std::vector<int64_t>& after = {}, bool resume = true) const {
    const int64_t size = static_cast<int64_t>(tokens_.size());
    const int64_t last = size + static_cast<int64_t>(after.size()) - 1;
    std::vector<int64_t> tail;  // the last max_ngram + 1 tokens of the text and `after`
    for (int64_t i = std::max<int64_t>(0, last - max_ngram_); i <= last; ++i)
      tail.push_back(i < size ? tokens_[i] : after[i - size]);
    // skip 0: the last n tokens recur; skip 1: the n before the last one do (an edit)
    for (int skip = 0; skip <= (resume ? 1 : 0); ++skip) {
      const int64_t end_at = last - skip;  // the n-gram's last position, in the text and `after`
      for (int n = static_cast<int>(std::min<int64_t>(max_ngram_, end_at)); n >= min_ngram_; --n) {
        const auto& by_ngram = index_[n - min_ngram_];
        const auto found = by_ngram.find(key(tail, static_cast<int64_t>(tail.size()) - 1 - skip, n));
        if (found == by_ngram.end()) continue;
        const Positions& at = found->second;
        const int64_t end = at.latest < end_at ? at.latest : at.previous;  // earlier, not this one
        const int64_t from = end + 1 + skip, to = std::min<int64_t>(from + k, size);
        if (end >= 0 && from < size) return {n, std::vector<int64_t>(tokens_.begin() + from, tokens_.begin() + to)};
      }
    }
    return {};
  }

 private:
  // The n tokens ending at `end`, as the bytes of their ids: an exact key (no collisions to
  // resolve, so the Python index, keyed by tuples, proposes the same).
  static std::string key(const std::vector<int64_t>& tokens, int64_t end, int n) {
    std::string k(sizeof(int64_t) * n, '\0');
    std::memcpy(k.data(), tokens.data() + end - n + 1, k.size());
    return k;
  }

  int min_ngram_, max_ngram_;
  std::vector<int64_t> tokens_;
  struct Positions {
    int64_t latest = -1, previous = -1;  // the n-gram's last two end positions (-1: none)
  };
  std::vector<std::unordered_map<std::string, Positions>> index_;  // per n: n-gram -> where it ended
};


// Adaptive K for one drafter: the K in 1..k_max that maximises the expected tokens per unit of
// time, E(K) / T(K) with E(K) = 1 + a + ... + a^K (an accepted prefix, then one token from the
// target, when each proposal is accepted with probability a) and T(K) the round's cost
// (round_costs). a is estimated from the rounds so far, each round's evidence decayed by
// `kAdaptiveKDecay` per later round, from a prior of one acceptance and one rejection. Only + - * / on
// doubles, in the same order as spec_edge.drafters.AdaptiveK: the same K in both.
class AdaptiveK {
 public:
  // costs[k - 1]: T(k), for k = 1..k_max
  explicit AdaptiveK(std::vector<double> costs) : costs_(std::move(costs)) {}

  int next() const {
    const double a = accepted_ / (accepted_ + rejected_);
    int best = 1;
    double best_rate = 0.0, expected = 1.0, power = 1.0;
    for (int k = 1; k <= static_cast<int>(costs_.size()); ++k) {
      power = power * a;
      expected = expected + power;
      const double rate = expected / costs_[k - 1];
      if (rate > best_rate) best = k, best_rate = rate;
    }
    return best;
  }

  // A round that proposed `proposed` tokens and had `accepted` of them accepted.
  void record(int proposed, int accepted) {
    accepted_ = accepted_ * kAdaptiveKDecay + accepted;
    rejected_ = rejected_ * kAdaptiveKDecay + (accepted < proposed ? 1.0 : 0.0);
  }

 private:
  std::vector<double> costs_;
  double accepted_ = 1.0, rejected_ = 1.0;
};

}  // namespace spec_edge::runner
