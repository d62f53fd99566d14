#include "spec_edge/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/platform.h>
#include <nlohmann/json.hpp>

#include "json_file.h"
#include "read_file.h"
#include "sha256.h"
#include "spec_edge/program_format.h"  // the manifest format, op versions, the round's constants
#include "spec_edge/ops.h"

namespace spec_edge::runner {
namespace {

using executorch::extension::from_blob;
using executorch::extension::make_tensor_ptr;
using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::Error;
using executorch::runtime::EValue;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* const kModelDirHint = "is the directory written by export/export_pair.py?";

// A program loaded with its methods, the KV caches shared between them (share_memory_arenas).
std::unique_ptr<Module> load_program(const std::string& path, const std::vector<std::string>& methods) {
  open_file(path, kModelDirHint);  // a clear error when the file is missing
  auto module = std::make_unique<Module>(path, Module::LoadMode::Mmap, nullptr, nullptr, nullptr,
                                         /*share_memory_arenas=*/true);
  if (module->load(executorch::runtime::Program::Verification::InternalConsistency) != Error::Ok)
    throw RunnerError(path + ": not a loadable ExecuTorch program (truncated or corrupted?)");
  for (const std::string& m : methods) {
    const Error e = module->load_method(m);
    if (e != Error::Ok)
      throw RunnerError(path + ": method '" + m + "' does not load (error " + std::to_string(static_cast<int>(e)) +
                        "); a missing operator means the runner was built without spec_edge's kernels "
                        "or XNNPACK");
  }
  return module;
}

// JSON's own error message, which quotes what it read, with bytes outside printable ASCII as
// \xNN: a damaged manifest's invalid UTF-8 must not reach a terminal or Python's str.
std::string malformed(const std::string& path, const char* what) {
  std::string out = path + ": malformed manifest (";
  for (const unsigned char c : std::string(what)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out + ")";
}

// A manifest number: an integer (not a boolean, not 8.5) in [lo, hi], or an error naming it.
int64_t manifest_int(const nlohmann::json& manifest, const std::string& path, const char* key, int64_t lo,
                     int64_t hi) {
  const nlohmann::json& v = manifest.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw RunnerError(path + ": " + key + " = " + v.dump() + ": expected an integer in [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

// The program's bytes against the manifest's sha256, before ExecuTorch reads them.
void check_hash(const nlohmann::json& manifest, const std::string& manifest_path, const std::string& dir,
                const std::string& name) {
  const nlohmann::json& programs = manifest.at("programs");
  if (!programs.is_object() || !programs.contains(name) || !programs.at(name).is_string())
    throw RunnerError(manifest_path + ": programs: expected the sha256 of " + name);
  const std::string path = dir + "/" + name;
  open_file(path, kModelDirHint);
  if (sha256_file(path) != programs.at(name).get<std::string>())
    throw RunnerError(path + ": does not match the manifest's sha256 (rebuilt or corrupted since export)");
}

int64_t constant(Module& program, const std::string& path, const std::string& method) {
  auto r = program.execute(method);
  if (!r.ok() || r.get().empty() || !r.get()[0].isInt())
    throw RunnerError(path + ": carries no " + method + "; export it again with this spec_edge");
  return r.get()[0].toInt();
}

// Size `dim` of input `index` of `method` in a loaded program (the largest, where it is dynamic).
int64_t input_size(Module& program, const std::string& path, const char* method, size_t index, size_t dim) {
  const auto meta = program.method_meta(method);
  if (meta.ok())
    if (const auto info = meta->input_tensor_meta(index); info.ok() && info->sizes().size() > dim)
      return info->sizes()[dim];
  throw RunnerError(path + ": " + method + " has no input " + std::to_string(index) + " of rank > " +
                    std::to_string(dim) + "; export it again with this spec_edge");
}

// The <sampling> inputs follow a step's tokens and position; their sixth, prev_tokens, is
// [1, max_context_len] (spec_edge.export.sampling_example).
constexpr size_t kPrevTokensInput = 2 + 5;

// Inputs as TensorPtrs: they own the tensors the EValues only point to, for the whole call.
std::vector<EValue> call(Module& program, const std::string& method, const std::vector<TensorPtr>& inputs) {
  const std::vector<EValue> values(inputs.begin(), inputs.end());
  auto r = program.execute(method, values);
  if (!r.ok())
    throw RunnerError(method + " failed (ExecuTorch error " + std::to_string(static_cast<int>(r.error())) + ")");
  return std::move(r.get());
}

TensorPtr int64s(std::vector<int64_t> values, std::vector<executorch::aten::SizesType> sizes) {
  return make_tensor_ptr(std::move(sizes), std::move(values));
}
TensorPtr float1(float v) { return make_tensor_ptr({1}, std::vector<float>{v}); }

const Drafting& checked(const Drafting& d) {
  if (d.min_ngram < 1 || d.max_ngram < d.min_ngram || d.max_ngram > kMaxNgram)
    throw ArgumentError("min_ngram, max_ngram: expected 1 <= min_ngram <= max_ngram <= " + std::to_string(kMaxNgram) +
                        ", got " + std::to_string(d.min_ngram) + ", " + std::to_string(d.max_ngram));
  if (d.drafter == Drafter::kHybrid && (d.min_match < d.min_ngram || d.min_match > d.max_ngram))
    throw ArgumentError("min_match: expected min_ngram <= min_match <= max_ngram (" + std::to_string(d.min_ngram) +
                        ".." + std::to_string(d.max_ngram) + "), got " + std::to_string(d.min_match));
  for (const auto& [name, cost] : {std::pair<const char*, double>{"draft_step_cost", d.draft_step_cost},
                                   std::pair<const char*, double>{"verify_row_cost", d.verify_row_cost}})
    if (!std::isfinite(cost) || cost < 0 || cost > 1e6)
      throw ArgumentError(std::string(name) + ": expected a cost in [0, 1e6] target decode steps, got " +
                          std::to_string(cost));
  for (const double cost : d.verify_costs)
    if (!std::isfinite(cost) || cost <= 0 || cost > 1e6)
      throw ArgumentError("verify_costs: expected costs in (0, 1e6] target decode steps, got " + std::to_string(cost));
  return d;
}

// measure_step_costs without a prompt: a context this long.
constexpr int64_t kCalibrationContext = 128;

class ModuleRunner final : public Runner {
 public:
  ModuleRunner(const std::string& dir, std::optional<int> k, const Drafting& drafting)
      : dir_(dir), drafting_(checked(drafting)), lookup_(drafting.min_ngram, drafting.max_ngram) {
    nlohmann::json manifest;
    const std::string manifest_path = dir + "/manifest.json";
    try {
      const std::string text = read_file(manifest_path, kModelDirHint);
      check_json_depth(text, manifest_path);
      manifest = nlohmann::json::parse(text);
      const nlohmann::json& format = manifest.at("format");
      if (!format.is_number_integer() || format.get<int64_t>() != kManifestFormat)
        throw RunnerError(manifest_path + ": manifest format " + manifest.at("format").dump() +
                          "; this runner reads format " + std::to_string(kManifestFormat));
      vocab_ = manifest_int(manifest, manifest_path, "vocab_size", 1, int64_t{1} << 31);
      context_ = manifest_int(manifest, manifest_path, "max_context_len", 2, int64_t{1} << 31);
      max_k_ = static_cast<int>(manifest_int(manifest, manifest_path, "k", 1, std::min<int64_t>(context_ - 1, 4096)));
      chunk_ = manifest_int(manifest, manifest_path, "prefill_chunk", 1, context_);
      if (manifest.at("ops").get<std::map<std::string, int64_t>>() != kOpVersions)
        throw RunnerError(manifest_path + ": programs built for op versions " + manifest.at("ops").dump() +
                          ", this runner has others: export them again");
    } catch (const nlohmann::json::exception& e) {
      throw RunnerError(malformed(manifest_path, e.what()));
    }
    k_ = k.value_or(max_k_);
    if (k_ < 1 || k_ > max_k_)
      throw RunnerError("k: the programs were exported for K up to " + std::to_string(max_k_) + ", got k=" +
                        std::to_string(k_));
    // --calibrate prints a cost for every K the programs verify: k..max_k values are taken.
    const int64_t costs = static_cast<int64_t>(drafting_.verify_costs.size());
    if (costs != 0 && (costs < k_ || costs > max_k_))
      throw ArgumentError("verify_costs: expected a cost for each K in 1.." + std::to_string(k_) + " (k=" +
                          std::to_string(k_) + "), and at most one for each K the programs verify (" +
                          std::to_string(max_k_) + "), got " + std::to_string(costs));
    const bool model_drafts = drafting.drafter != Drafter::kLookup;
    if (model_drafts && !file_exists(dir + "/draft.pte"))
      throw RunnerError(dir + "/draft.pte: not found; drafter " + drafter_name(drafting.drafter) +
                        " needs the draft model (drafter lookup runs on target.pte alone)");
    try {
      if (model_drafts) check_hash(manifest, manifest_path, dir, "draft.pte");
      check_hash(manifest, manifest_path, dir, "target.pte");
    } catch (const nlohmann::json::exception& e) {
      throw RunnerError(malformed(manifest_path, e.what()));
    }
    if (model_drafts) draft_ = load_program(dir + "/draft.pte", {"prefill", "draft_step"});
    target_ = load_program(dir + "/target.pte", {"prefill", "decode_step", "verify"});
    std::vector<std::pair<Module*, const char*>> loaded = {{target_.get(), "target.pte"}};
    if (draft_) loaded.emplace_back(draft_.get(), "draft.pte");
    for (const auto& [program, name] : loaded) {
      const std::string path = dir + "/" + name;
      for (const auto& [op, version] : kOpVersions) {
        const int64_t built = constant(*program, path, "spec_edge_op_version_" + op.substr(op.find("::") + 2));
        if (built != version)
          throw RunnerError(path + ": built for " + op + " version " + std::to_string(built) +
                            ", this runner has version " + std::to_string(version) + ": export it again");
      }
      if (constant(*program, path, "vocab_size") != vocab_)
        throw RunnerError(path + ": vocabulary does not match the manifest's " + std::to_string(vocab_) +
                          " (draft and target must share a tokenizer)");
      // The manifest's context and prefill chunk against the program's own input shapes: a
      // manifest that disagrees would fail the first call inside ExecuTorch.
      const char* step = program == target_.get() ? "decode_step" : "draft_step";
      if (const int64_t context = input_size(*program, path, step, kPrevTokensInput, 1); context != context_)
        throw RunnerError(manifest_path + ": max_context_len = " + std::to_string(context_) + ", but " + path +
                          " was exported for a context of " + std::to_string(context));
      if (const int64_t chunk = input_size(*program, path, "prefill", 0, 1); chunk < chunk_)
        throw RunnerError(manifest_path + ": prefill_chunk = " + std::to_string(chunk_) + ", but " + path +
                          " takes prefill chunks of up to " + std::to_string(chunk) + " tokens");
    }
    if (const int64_t exported_k = constant(*target_, dir + "/target.pte", "k"); exported_k != max_k_)
      throw RunnerError(dir + "/target.pte: exported for K=" + std::to_string(exported_k) + ", the manifest says K=" +
                        std::to_string(max_k_));
    draft_rows_.resize(static_cast<size_t>(k_ * vocab_));  // the programs' own vocabulary, checked above
  }

  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new, const Sampling& s,
                                bool speculative, const std::vector<int64_t>& eos,
                                const std::function<void(const std::vector<int64_t>&)>& on_tokens) override {
    check(prompt, max_new, s);
    stop_requested_.store(false);
    const auto t_start = std::chrono::steady_clock::now();
    stats_ = GenerationStats{};
    stats_.accepted_histogram.assign(k_ + 1, 0);
    std::vector<int64_t> context = prompt;
    const int64_t prompt_end = static_cast<int64_t>(prompt.size()) - 1;  // the last token goes with the first step
    prefill(*target_, prompt, 0, prompt_end);
    if (speculative && draft_) prefill(*draft_, prompt, 0, prompt_end);
    lookup_.clear();
    lookup_.extend(prompt);
    Round r{0, prompt_end, AdaptiveK(round_costs(drafting_, k_, true)), AdaptiveK(round_costs(drafting_, k_, false))};
    stats_.prefill_seconds = seconds_since(t_start);
    std::vector<int64_t> out;
    while (static_cast<int64_t>(out.size()) < max_new && !stop_requested_.load()) {
      std::vector<int64_t> emitted;
      if (!speculative) {
        emitted = {decode_step(context, s, r.offset)};
        r.offset += 1;
      } else {
        emitted = round(context, s, r);
      }
      if (static_cast<int64_t>(emitted.size()) > max_new - static_cast<int64_t>(out.size()))
        emitted.resize(max_new - out.size());
      const auto stop = std::find_first_of(emitted.begin(), emitted.end(), eos.begin(), eos.end());
      const bool at_eos = stop != emitted.end();
      if (at_eos) emitted.erase(stop + 1, emitted.end());
      out.insert(out.end(), emitted.begin(), emitted.end());
      context.insert(context.end(), emitted.begin(), emitted.end());
      lookup_.extend(emitted);
      if (on_tokens) on_tokens(emitted);
      if (at_eos) break;
    }
    stats_.total_seconds = seconds_since(t_start);
    stats_.new_tokens = static_cast<int64_t>(out.size());
    return out;
  }

  StepCosts measure_step_costs(const std::vector<int64_t>& given, const Sampling& s, int repeats) override {
    std::vector<int64_t> prompt = given;
    if (prompt.empty())  // any tokens cost the same: the context's length is what counts
      for (int64_t i = 0; i < std::min<int64_t>(kCalibrationContext, context_ - k_ - 1); ++i)
        prompt.push_back(i % vocab_);
    check(prompt, 0, s);
    if (repeats < 1) throw ArgumentError("repeats: expected >= 1, got " + std::to_string(repeats));
    const int64_t pos = static_cast<int64_t>(prompt.size()) - 1;
    prefill(*target_, prompt, 0, pos);
    if (draft_) prefill(*draft_, prompt, 0, pos);
    stats_ = GenerationStats{};
    stats_.accepted_histogram.assign(k_ + 1, 0);
    const std::vector<int64_t> proposed(k_, prompt.back());  // any tokens cost the same
    if (s.temperature != 0.0f)  // the draft rows the verify step reads: point masses, any will do
      for (int i = 0; i < k_; ++i) point_mass_row(i, prompt.back());
    std::vector<double> decode, drafting;
    std::vector<std::vector<double>> verifying(k_);
    const auto timed = [](std::vector<double>& into, const std::function<void()>& step) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      into.push_back(seconds_since(t0));
    };
    for (int rep = 0; rep <= repeats; ++rep) {  // the first pass warms up and is dropped
      timed(decode, [&] { decode_step(prompt, s, 0); });
      for (int k = 1; k <= k_; ++k)
        timed(verifying[k - 1],
              [&] { verify(prompt, std::vector<int64_t>(proposed.begin(), proposed.begin() + k), s, 0); });
      if (draft_)
        timed(drafting, [&] {
          call(*draft_, "draft_step",
               with_sampling({int64s({prompt.back()}, {1, 1}), int64s({pos}, {1})}, s, prompt, 0));
        });
    }
    stats_ = GenerationStats{};  // the steps above were no generation
    stats_.accepted_histogram.assign(k_ + 1, 0);
    const auto median = [](std::vector<double> v) {
      v.erase(v.begin());  // the warm-up pass
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    StepCosts costs;
    costs.context = static_cast<int64_t>(prompt.size());
    costs.decode_step_seconds = median(decode);
    if (draft_) costs.draft_step_cost = median(drafting) / costs.decode_step_seconds;
    for (const auto& v : verifying) costs.verify_costs.push_back(median(v) / costs.decode_step_seconds);
    return costs;
  }

  void stop() override { stop_requested_.store(true); }
  const GenerationStats& stats() const override { return stats_; }
  int k() const override { return k_; }
  int max_k() const override { return max_k_; }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context_len() const override { return context_; }

 private:
  void check(const std::vector<int64_t>& prompt, int64_t max_new, const Sampling& s) const {
    if (prompt.empty()) throw ArgumentError("prompt: expected at least one token");
    for (int64_t t : prompt)
      if (t < 0 || t >= vocab_)
        throw ArgumentError("prompt: ids must be in [0, " + std::to_string(vocab_) + "), got " + std::to_string(t));
    if (max_new < 0) throw ArgumentError("max_new: expected >= 0, got " + std::to_string(max_new));
    if (max_new > context_ || static_cast<int64_t>(prompt.size()) + max_new + k_ + 1 > context_)  // no overflow
      throw ArgumentError("prompt (" + std::to_string(prompt.size()) + " tokens) + max_new (" + std::to_string(max_new) +
                        ") + K+1 (" + std::to_string(k_ + 1) + ") exceeds the context length " +
                        std::to_string(context_));
    // The ops' own checks and messages, before any program runs (not an ExecuTorch error code
    // from inside one).
    spec_edge::Filters f;
    f.top_k = {&s.top_k, 1};
    f.top_p = {&s.top_p, 1};
    f.min_p = {&s.min_p, 1};
    f.repetition_penalty = {&s.repetition_penalty, 1};
    const spec_edge::Status status = spec_edge::check_sampling_settings(vocab_, s.temperature, f);
    if (!status.is_ok()) throw ArgumentError(status.message());
  }

  // tokens[begin, end) into the program's cache at their positions, a chunk at a time.
  void prefill(Module& program, const std::vector<int64_t>& tokens, int64_t begin, int64_t end) {
    for (int64_t at = begin; at < end; at += chunk_) {
      const int64_t len = std::min(chunk_, end - at);
      std::vector<int64_t> chunk(tokens.begin() + at, tokens.begin() + at + len);
      call(program, "prefill", {int64s(std::move(chunk), {1, static_cast<int>(len)}), int64s({at}, {1})});
    }
  }

  // The <sampling> inputs after `inputs`: the context becomes prev_tokens, padded with -1, when
  // the penalty reads it.
  std::vector<TensorPtr> with_sampling(std::vector<TensorPtr> inputs, const Sampling& s,
                                       const std::vector<int64_t>& context, int64_t offset) const {
    std::vector<int64_t> prev(context_, -1);
    if (s.repetition_penalty != 1.0f) std::copy(context.begin(), context.end(), prev.begin());
    for (TensorPtr t : {float1(s.temperature), int64s({s.top_k}, {1}), float1(s.top_p), float1(s.min_p),
                        float1(s.repetition_penalty), int64s(std::move(prev), {1, static_cast<int>(context_)}),
                        int64s({s.seed}, {1}), int64s({offset}, {1})})
      inputs.push_back(std::move(t));
    return inputs;
  }

  // Where the loop stands between rounds: the next Philox offset, how much of the context the
  // draft's cache holds, and adaptive K's evidence per drafter.
  struct Round {
    int64_t offset, draft_seen;
    AdaptiveK model_k, lookup_k;
  };

  // One token from the target alone, at Philox offset `offset`.
  int64_t decode_step(const std::vector<int64_t>& context, const Sampling& s, int64_t offset) {
    const int64_t pos = static_cast<int64_t>(context.size()) - 1;  // the last token is not in the caches yet
    const auto t0 = std::chrono::steady_clock::now();
    auto r = call(*target_, "decode_step",
                  with_sampling({int64s({context.back()}, {1, 1}), int64s({pos}, {1})}, s, context, offset));
    stats_.target_seconds += seconds_since(t0);
    return r[0].toTensor().const_data_ptr<int64_t>()[0];
  }

  // One round: proposals from the drafter (prompt lookup's when it serves the round, the draft
  // model's otherwise), one fused verify step; returns the emitted tokens. A round proposing K
  // tokens takes Philox offsets offset..offset+K (draft steps, then the verify step).
  std::vector<int64_t> round(const std::vector<int64_t>& context, const Sampling& s, Round& r) {
    const Drafter d = drafting_.drafter;
    PromptLookup::Proposal lookup;
    // The hybrid gives a round to lookup on an exact match only: the draft model predicts better
    // than a guess past an edit, until its own drafts make the edit (below).
    if (d != Drafter::kModel)
      lookup = lookup_.propose(drafting_.adaptive_k ? r.lookup_k.next() : k_, {}, d == Drafter::kLookup);
    if (d == Drafter::kLookup || (d == Drafter::kHybrid && lookup.ngram >= drafting_.min_match)) {
      if (lookup.tokens.empty()) {  // nothing to verify: the target decodes one token
        stats_.plain_steps += 1;
        return {decode_step(context, s, r.offset++)};
      }
      const int k = static_cast<int>(lookup.tokens.size());
      if (s.temperature != 0.0f)
        for (int i = 0; i < k; ++i) point_mass_row(i, lookup.tokens[i]);
      std::vector<int64_t> emitted = verify(context, lookup.tokens, s, r.offset + k);
      const int accepted = static_cast<int>(emitted.size()) - 1;
      r.lookup_k.record(k, accepted);
      stats_.lookup_rounds += 1, stats_.lookup_proposed += k, stats_.lookup_accepted += accepted;
      r.offset += k + 1;
      return emitted;  // the draft's cache is left behind; it catches up when it next drafts
    }
    const int planned = drafting_.adaptive_k ? r.model_k.next() : k_;
    int stepped = planned;  // draft-model steps: fewer where prompt lookup took over
    const std::vector<int64_t> drafted = draft(context, s, r, planned, stepped);
    const int k = static_cast<int>(drafted.size());
    std::vector<int64_t> emitted = verify(context, drafted, s, r.offset + k);
    const int accepted = static_cast<int>(emitted.size()) - 1;
    r.model_k.record(k, accepted);
    stats_.model_rounds += 1, stats_.model_proposed += k, stats_.model_accepted += accepted;
    // The draft saw the context and its drafts up to the last it stepped to, which it only proposed.
    const int64_t pos = static_cast<int64_t>(context.size()) - 1;
    r.draft_seen = std::min(pos + static_cast<int64_t>(emitted.size()), pos + stepped);
    r.offset += k + 1;
    return emitted;
  }

  // Draft row i as a point mass on `token` (-inf elsewhere): a proposal that is a function of the
  // context alone, verified through the exact draft-free rule.
  void point_mass_row(int i, int64_t token) {
    float* row = draft_rows_.data() + static_cast<size_t>(i) * vocab_;
    std::fill(row, row + vocab_, -std::numeric_limits<float>::infinity());
    row[token] = 0.0f;
  }

  // k proposals from draft-model steps at Philox offsets r.offset.. (their logits rows into
  // draft_rows_ when sampling). The first step also feeds the draft what it has not seen of the
  // context. The hybrid drafter hands over to prompt lookup as soon as the context and the drafts
  // so far end with a match of min_match tokens, or the last draft replaced the token after one
  // (the model bridges a stretch the text does not repeat, a renamed word say): lookup's tokens
  // complete the proposal, each a point mass, and `stepped` says how many the model drafted.
  std::vector<int64_t> draft(const std::vector<int64_t>& context, const Sampling& s, Round& r, int k, int& stepped) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t pos = static_cast<int64_t>(context.size()) - 1;
    if (context.size() - r.draft_seen > kDraftStepTokens) {  // behind after lookup rounds
      prefill(*draft_, context, r.draft_seen, pos);
      r.draft_seen = pos;
    }
    std::vector<int64_t> drafted, seen = context;
    // Greedy verification reads no draft row (the tokens decide): only sampling copies them out.
    const bool sampled = s.temperature != 0.0f;
    for (int i = 0; i < k; ++i) {
      std::vector<int64_t> step = i == 0 ? std::vector<int64_t>(context.begin() + r.draft_seen, context.end())
                                         : std::vector<int64_t>{drafted.back()};
      const int64_t at = pos + i - static_cast<int64_t>(step.size()) + 1;
      const int len = static_cast<int>(step.size());
      auto out = call(*draft_, "draft_step",
                      with_sampling({int64s(std::move(step), {1, len}), int64s({at}, {1})}, s, seen, r.offset + i));
      drafted.push_back(out[0].toTensor().const_data_ptr<int64_t>()[0]);
      seen.push_back(drafted.back());
      if (sampled)
        std::memcpy(draft_rows_.data() + i * vocab_, out[1].toTensor().const_data_ptr<float>(), sizeof(float) * vocab_);
      if (drafting_.drafter != Drafter::kHybrid || i + 1 == k) continue;
      const PromptLookup::Proposal tail = lookup_.propose(k - i - 1, drafted);
      if (tail.ngram < drafting_.min_match || tail.tokens.empty()) continue;
      stepped = i + 1;
      for (const int64_t t : tail.tokens) {
        if (sampled) point_mass_row(static_cast<int>(drafted.size()), t);
        drafted.push_back(t);
      }
      break;
    }
    stats_.draft_seconds += seconds_since(t0);
    return drafted;
  }

  // The fused verify step over the last token and `proposed` (their draft rows in draft_rows_),
  // at Philox offset `offset`: the accepted prefix and one more token.
  std::vector<int64_t> verify(const std::vector<int64_t>& context, const std::vector<int64_t>& proposed,
                              const Sampling& s, int64_t offset) {
    const auto t0 = std::chrono::steady_clock::now();
    const int k = static_cast<int>(proposed.size());
    std::vector<int64_t> tokens = {context.back()};
    tokens.insert(tokens.end(), proposed.begin(), proposed.end());
    auto r = call(*target_, "verify",
                  with_sampling({int64s(std::move(tokens), {1, k + 1}),
                                 int64s({static_cast<int64_t>(context.size()) - 1}, {1}),
                                 from_blob(draft_rows_.data(), {1, k, static_cast<int>(vocab_)})},
                                s, context, offset));
    const int64_t n = r[0].toTensor().const_data_ptr<int64_t>()[0];
    const int64_t* out = r[1].toTensor().const_data_ptr<int64_t>();
    stats_.target_seconds += seconds_since(t0);
    stats_.rounds += 1;
    stats_.proposed += k;
    stats_.accepted += n;
    stats_.accepted_histogram[n] += 1;
    return std::vector<int64_t>(out, out + n + 1);
  }

  std::string dir_;
  int64_t vocab_ = 0, context_ = 0, chunk_ = 0;
  int max_k_ = 0, k_ = 0;
  Drafting drafting_;
  PromptLookup lookup_;                // the context so far, indexed
  std::unique_ptr<Module> draft_, target_;  // no draft_ for the lookup drafter
  std::vector<float> draft_rows_;  // a round's draft logits [K, V], the verify step's input
  GenerationStats stats_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace

double GenerationStats::tokens_per_second() const {
  const double decode = total_seconds - prefill_seconds;
  return decode > 0 ? new_tokens / decode : 0.0;
}

double GenerationStats::acceptance_rate() const { return proposed ? static_cast<double>(accepted) / proposed : 0.0; }

Drafting drafting_settings(const std::string& drafter, bool adaptive_k, int min_ngram, int max_ngram, int min_match,
                           double draft_step_cost, double verify_row_cost,
                           const std::vector<double>& verify_costs) {
  Drafting d;
  try {
    d.drafter = parse_drafter(drafter);
  } catch (const std::invalid_argument& e) {
    throw ArgumentError(e.what());
  }
  d.adaptive_k = adaptive_k, d.min_ngram = min_ngram, d.max_ngram = max_ngram, d.min_match = min_match;
  d.draft_step_cost = draft_step_cost, d.verify_row_cost = verify_row_cost, d.verify_costs = verify_costs;
  return d;
}

std::unique_ptr<Runner> Runner::load(const std::string& model_dir, std::optional<int> k, const Drafting& drafting) {
  return std::make_unique<ModuleRunner>(model_dir, k, drafting);
}

namespace {
std::atomic<bool> g_executorch_info{true};
pal_emit_log_message_method g_executorch_emitter = nullptr;

void emit_executorch_log(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename,
                         const char* function, size_t line, const char* message, size_t length) {
  if ((level == kInfo || level == kDebug) && !g_executorch_info) return;
  g_executorch_emitter(timestamp, level, filename, function, line, message, length);
}
}  // namespace

void show_executorch_info(bool show) {
  g_executorch_info = show;
  // Installed once (a second installation would take this filter for the emitter before it), in
  // the live table get_pal_impl() returns rather than through register_pal, which logs an error
  // when a table is already registered, as ExecuTorch's Python bindings register one.
  static const bool installed = [] {
    auto* table = const_cast<executorch::runtime::PalImpl*>(executorch::runtime::get_pal_impl());
    g_executorch_emitter = table->emit_log_message != nullptr ? table->emit_log_message : et_pal_emit_log_message;
    table->emit_log_message = emit_executorch_log;
    return true;
  }();
  (void)installed;
}

}  // namespace spec_edge::runner
