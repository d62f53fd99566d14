// The speculative loop over draft.pte + target.pte on ExecuTorch's Module API, without Python:
// what runs on the device. Proposals come from the draft model, prompt lookup or both
// (drafting.h). Token for token the loop of spec_edge.runtime.PteSpeculativeDecoder
// (same prefill chunks, draft catch-up, Philox offsets and sampling inputs), so the two agree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec_edge/drafting.h"

namespace spec_edge::runner {

// A model directory, manifest, program or argument the runner cannot use; the message names it.
class RunnerError : public std::runtime_error {
 public:
  // The message as valid UTF-8 (ill-formed bytes quoted from a file read as U+FFFD), so that
  // every front end can show it (Python's str, Java's String).
  explicit RunnerError(const std::string& what);
};

// An argument of generate (prompt, max_new, sampling) out of range; the message names it.
class ArgumentError : public RunnerError {
 public:
  using RunnerError::RunnerError;
};

// The sampling parameters both programs take at run time (temperature 0: greedy).
struct Sampling {
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t seed = 0;
};

// What one generate call did, and where the time went: the fields of spec_edge.GenerationStats
// (Python) and org.specedge.GenerationStats (Java).
struct GenerationStats {
  int64_t new_tokens = 0, rounds = 0, proposed = 0, accepted = 0;
  std::vector<int64_t> accepted_histogram;  // verify rounds by accepted length 0..K
  // By drafter: verify rounds served, tokens proposed and accepted; plain_steps: rounds in which
  // prompt lookup had no proposal, decoded by the target alone (one token each).
  int64_t model_rounds = 0, model_proposed = 0, model_accepted = 0;
  int64_t lookup_rounds = 0, lookup_proposed = 0, lookup_accepted = 0, plain_steps = 0;
  double prefill_seconds = 0.0, draft_seconds = 0.0, target_seconds = 0.0, total_seconds = 0.0;
  double tokens_per_second() const;
  double acceptance_rate() const;
};

// Drafting settings from the values the bindings (Python, Java) receive: ArgumentError naming a
// drafter that is not one of model, lookup, hybrid. Runner::load checks the rest.
Drafting drafting_settings(const std::string& drafter, bool adaptive_k, int min_ngram, int max_ngram, int min_match,
                           double draft_step_cost, double verify_row_cost,
                           const std::vector<double>& verify_costs = {});

// What each step costs on this device, in target decode steps: the settings adaptive K weighs
// (Drafting::draft_step_cost, Drafting::verify_costs), measured rather than guessed.
struct StepCosts {
  int64_t context = 0;               // the positions of context the steps ran at
  double decode_step_seconds = 0.0;  // the median target decode step the costs are relative to
  double draft_step_cost = 0.0;      // one draft-model step (0 without a draft model)
  std::vector<double> verify_costs;  // the verify step with 1..k proposals
};

class Runner {
 public:
  // Loads model_dir (manifest.json, draft.pte, target.pte, written by export/export_pair.py) and
  // checks the programs against the manifest; the lookup drafter needs no draft.pte. k: proposals
  // per round, 1..the exported K (none: the exported K); with adaptive K, the most per round.
  static std::unique_ptr<Runner> load(const std::string& model_dir, std::optional<int> k = std::nullopt,
                                      const Drafting& drafting = {});
  virtual ~Runner() = default;

  // Up to max_new token ids after prompt (fewer when one of the ids in eos is emitted: it is kept,
  // and ends generation). on_tokens receives the tokens of each round (or step) as soon as they
  // are decided.
  virtual std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new,
                                        const Sampling& sampling, bool speculative = true,
                                        const std::vector<int64_t>& eos = {},
                                        const std::function<void(const std::vector<int64_t>&)>& on_tokens = {}) = 0;

  // Ends the generate call in flight after the round being decided (that round's tokens are
  // still returned and streamed); callable from any thread, and from on_tokens. A call made while
  // no generate runs has no effect on the next one.
  virtual void stop() = 0;

  // Times each step at the end of `prompt` (prefilled first; empty: 128 tokens, fewer where the
  // context is shorter), with `sampling`'s settings: the
  // median of `repeats` runs of a target decode step, a draft step and a verify step for each K in
  // 1..k, interleaved so that a slow stretch of the machine falls on all of them alike.
  virtual StepCosts measure_step_costs(const std::vector<int64_t>& prompt, const Sampling& sampling,
                                       int repeats) = 0;

  virtual const GenerationStats& stats() const = 0;
  virtual int k() const = 0;
  virtual int max_k() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context_len() const = 0;
};

// ExecuTorch's own messages in this process: its errors always, its info and debug messages (CPU
// probing, program loading) only when `show`; the messages kept go to the emitter that was active
// before the first call. The command-line runner and the Python module start with show = false.
void show_executorch_info(bool show);

}  // namespace spec_edge::runner
