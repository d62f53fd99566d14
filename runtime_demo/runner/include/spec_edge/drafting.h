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
//
// The text is also followed as a copy: once its last n tokens recur, the next token is expected
// to be the one that followed them, and so on while the text keeps copying. Where it leaves the
// copy (an edit), the copy is taken to advance with the text (a replaced token) until the text
// copies again from near where it left, at most kMaxRewriteTokens on: what the edit replaced and
// what took its place are then a rewrite, applied wherever the copy meets the replaced tokens
// again (a renamed name's next use), and forgotten when the text does not follow it. Proposals
// continue the copy, so an edit made once costs one round, not one per use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
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
    copy_ = {}, matched_ = 0, run_ = {}, edit_.reset(), rewrites_.clear();
  }

  void extend(const std::vector<int64_t>& tokens) {
    for (const int64_t t : tokens) append(t);
  }

  // The newest token. The n-grams ending one token earlier join the index now, so that a lookup
  // of the last n tokens finds an earlier occurrence, never the last n tokens themselves.
  void append(int64_t token) {
    const std::optional<Step> expected = next(copy_);
    tokens_.push_back(token);
    const int64_t end = static_cast<int64_t>(tokens_.size()) - 2;
    for (int n = min_ngram_; n <= max_ngram_ && n <= end + 1; ++n) {
      Positions& at = index_[n - min_ngram_].try_emplace(key(tokens_, end, n)).first->second;
      at = {end, at.latest};
    }
    follow(token, expected);
  }

  struct Proposal {
    int ngram = 0;                // how many of the last tokens the proposal's source matches
                                  // (0: none, or a guess past an edit)
    std::vector<int64_t> tokens;  // up to k tokens
  };

  // Up to k tokens: the copy's continuation where the text follows one (with `resume`, also a
  // guess past an edit), else what followed the most recent earlier occurrence of the last n
  // tokens, for the largest n that has one. Where no n-gram of at least min_ngram tokens recurs,
  // the text may have been edited: the last token took the place of the one that followed the n
  // tokens before it (a renamed word), and the proposal is what came after the replaced token at
  // their most recent earlier occurrence, again for the largest n (only with `resume`). None when
  // neither finds one. `after`: tokens not yet in the text (a draft model's proposals) that the
  // last tokens end with; the occurrence and what followed it are still the text's.
  Proposal propose(int k, const std::vector<int64_t>& after = {}, bool resume = true) const {
    std::optional<Copy> copy = copy_;
    int matched = matched_;
    for (const int64_t t : after) {
      const std::optional<Step> step = next(*copy);
      if (!step || step->token != t) {
        copy.reset();
        break;
      }
      copy = step->copy, matched += 1;
    }
    // a guess past an edit while it is the last token (with `resume`) or the text follows it
    const bool just_edited = edit_ && edit_->second == static_cast<int64_t>(tokens_.size()) - 1;
    if (copy && (matched > 0 || (resume && just_edited))) {
      Proposal p{matched, {}};
      for (std::optional<Step> step; static_cast<int>(p.tokens.size()) < k && (step = next(*copy));)
        p.tokens.push_back(step->token), copy = step->copy;
      if (!p.tokens.empty()) return p;
    }
    const int64_t size = static_cast<int64_t>(tokens_.size());
    const int64_t last = size + static_cast<int64_t>(after.size()) - 1;
    std::vector<int64_t> tail;  // the last max_ngram + 1 tokens of the text and `after`
    for (int64_t i = std::max<int64_t>(0, last - max_ngram_); i <= last; ++i)
      tail.push_back(i < size ? tokens_[i] : after[i - size]);
    // skip 0: the last n tokens recur; skip 1: the n before the last one do (an edit)
    for (int skip = 0; skip <= (resume ? 1 : 0); ++skip) {
      const int64_t end_at = last - skip;  // the n-gram's last position, in the text and `after`
      for (int n = static_cast<int>(std::min<int64_t>(max_ngram_, end_at)); n >= min_ngram_; --n) {
        const int64_t end = earlier(tail, static_cast<int64_t>(tail.size()) - 1 - skip, n, end_at).latest;
        const int64_t from = end + 1 + skip, to = std::min<int64_t>(from + k, size);
        if (end >= 0 && from < size) return {n, std::vector<int64_t>(tokens_.begin() + from, tokens_.begin() + to)};
      }
    }
    return {};
  }

 private:
  // The copy: the position of the token expected next (-1: none), a rewrite's tokens expected
  // before it, and that rewrite's key (its first replaced token) while they are.
  struct Copy {
    int64_t at = -1;
    std::vector<int64_t> pending;
    std::optional<int64_t> rewrite;
  };
  struct Step {
    int64_t token;                    // the token the copy expects next
    Copy copy;                        // the copy after it
    std::optional<int64_t> rewrite;  // the rewrite it comes from
  };
  struct Positions {
    int64_t latest = -1, previous = -1;  // the n-gram's last two end positions (-1: none)
  };
  struct Rewrite {
    std::vector<int64_t> old_tokens, new_tokens;  // what an edit replaced, and what took its place
  };

  std::optional<Step> next(const Copy& c) const {
    if (!c.pending.empty()) {
      std::vector<int64_t> rest(c.pending.begin() + 1, c.pending.end());
      const std::optional<int64_t> still = rest.empty() ? std::nullopt : c.rewrite;
      return Step{c.pending.front(), Copy{c.at, std::move(rest), still}, c.rewrite};
    }
    const int64_t size = static_cast<int64_t>(tokens_.size());
    if (c.at < 0 || c.at >= size) return std::nullopt;
    const int64_t first = tokens_[c.at];
    const auto found = rewrites_.find(first);
    if (found != rewrites_.end()) {
      const Rewrite& r = found->second;
      const int64_t len = static_cast<int64_t>(r.old_tokens.size());
      if (c.at + len <= size && std::equal(r.old_tokens.begin(), r.old_tokens.end(), tokens_.begin() + c.at)) {
        std::vector<int64_t> rest(r.new_tokens.begin() + 1, r.new_tokens.end());
        const std::optional<int64_t> still = rest.empty() ? std::nullopt : std::optional<int64_t>(first);
        return Step{r.new_tokens.front(), Copy{c.at + len, std::move(rest), still}, first};
      }
    }
    return Step{first, Copy{c.at + 1, {}, std::nullopt}, std::nullopt};
  }

  // Moves the copy past the newest token, at the end of the text: `expected` is what the copy
  // expected of it.
  void follow(int64_t token, const std::optional<Step>& expected) {
    const int64_t at = static_cast<int64_t>(tokens_.size()) - 1;
    if (expected && expected->token == token) {
      if (matched_ == 0) run_ = {copy_.at, at};
      copy_ = expected->copy, matched_ += 1;
      if (edit_ && matched_ >= min_ngram_) learn(run_.first, run_.second);
      return;
    }
    if (expected) {
      if (expected->rewrite) rewrites_.erase(*expected->rewrite);  // the text did not follow it
      if (!edit_) edit_ = std::make_pair(copy_.at, at);
    }
    matched_ = 0;
    for (int n = static_cast<int>(std::min<int64_t>(max_ngram_, at)); n >= min_ngram_; --n) {
      const Positions ends = earlier(tokens_, at, n, at);
      if (ends.latest < 0) continue;
      int64_t end = ends.latest;
      if (edit_) {
        for (const int64_t e : {ends.latest, ends.previous}) {
          if (e >= 0 && e - n + 1 - edit_->first >= 0 && e - n + 1 - edit_->first <= kMaxRewriteTokens) {
            end = e;
            learn(end - n + 1, at - n + 1);
            break;
          }
        }
        edit_.reset();
      }
      copy_ = Copy{end + 1, {}, std::nullopt}, matched_ = n;
      return;
    }
    // No n-gram recurs: past an edit the copy advances with the text, as if a token was
    // replaced, while the text may still copy again (a run of min_ngram tokens, the earliest from
    // the next token on) within kMaxRewriteTokens of where it left.
    if (edit_ && at + 2 - min_ngram_ - edit_->second <= kMaxRewriteTokens) {
      copy_ = Copy{copy_.at + 1, {}, std::nullopt};
    } else {
      copy_ = Copy{}, edit_.reset();
    }
  }

  // The edit ends where the text copies again, from `source` at `text`: what it replaced, and
  // what took its place, become a rewrite.
  void learn(int64_t source, int64_t text) {
    const auto [edit_source, edit_text] = *edit_;
    edit_.reset();
    const int64_t old_len = source - edit_source, new_len = text - edit_text;
    if (old_len > 0 && old_len <= kMaxRewriteTokens && new_len > 0 && new_len <= kMaxRewriteTokens)
      rewrites_[tokens_[edit_source]] = {std::vector<int64_t>(tokens_.begin() + edit_source, tokens_.begin() + source),
                                         std::vector<int64_t>(tokens_.begin() + edit_text, tokens_.begin() + text)};
  }

  // Where the n tokens of `tokens` ending at `end` last ended before position `before`, and once
  // more before that (-1: none): an occurrence earlier than the one being looked up.
  Positions earlier(const std::vector<int64_t>& tokens, int64_t end, int n, int64_t before) const {
    const auto& by_ngram = index_[n - min_ngram_];
    const auto found = by_ngram.find(key(tokens, end, n));
    if (found == by_ngram.end()) return {};
    return found->second.latest < before ? found->second : Positions{found->second.previous, -1};
  }

  // The n tokens ending at `end`, as the bytes of their ids: an exact key (no collisions to
  // resolve, so the Python index, keyed by tuples, proposes the same).
  static std::string key(const std::vector<int64_t>& tokens, int64_t end, int n) {
    std::string k(sizeof(int64_t) * n, '\0');
    std::memcpy(k.data(), tokens.data() + end - n + 1, k.size());
    return k;
  }

  int min_ngram_, max_ngram_;
  std::vector<int64_t> tokens_;
  std::vector<std::unordered_map<std::string, Positions>> index_;  // per n: n-gram -> where it ended
  Copy copy_;
  int matched_ = 0;                                  // tokens in a row that followed the copy
  std::pair<int64_t, int64_t> run_;                  // the copy's and the text's positions where that run began
  std::optional<std::pair<int64_t, int64_t>> edit_;  // the same where the text left the copy, until it copies again
  std::unordered_map<int64_t, Rewrite> rewrites_;    // by the first token each replaced
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
