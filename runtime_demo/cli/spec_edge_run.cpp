// spec-edge-run: speculative decoding over an exported model directory, on the device.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "spec_edge/runner.h"
#include "spec_edge/tokenizer.h"

namespace {

const char kUsage[] =
    "usage: spec-edge-run --model-dir DIR (--prompt TEXT | --prompt-ids ID,ID,...) [--max-new N] [--k-max K]\n"
    "                     [--drafter model|lookup|hybrid] [--adaptive-k] [--min-ngram N --max-ngram N --min-match N]\n"
    "                     [--temperature T --top-k K --top-p P --min-p P --repetition-penalty R --seed S]\n"
    "                     [--draft-step-cost C] [--verify-row-cost C | --verify-costs C,C,...]\n"
    "                     [--eos ID] [--no-spec] [--stats-json FILE] [--verbose]\n"
    "       spec-edge-run --model-dir DIR --calibrate [--prompt TEXT | --prompt-ids ...] [--k-max K] [--drafter D]\n"
    "--k-max (or --k): proposals per round, the most per round with --adaptive-k (default: the exported K)\n"
    "--drafter: the draft model (default), prompt lookup (n-grams of prompt and output, resuming after\n"
    "    an edit; no draft.pte needed), or hybrid: lookup when its exact match has --min-match tokens,\n"
    "    the draft model otherwise (until its drafts end with such a match or an edit after one:\n"
    "    lookup completes the round)\n"
    "--adaptive-k weighs each K's expected tokens against its cost in target decode steps: a draft\n"
    "    step's (--draft-step-cost) and the verify step's with K proposals (--verify-costs, one per K;\n"
    "    else 1 + --verify-row-cost per proposal)\n"
    "--calibrate times those steps on this device (at the end of the prompt; 128 tokens without one)\n"
    "    and prints the flags that set them, in place of decoding\n"
    "--verbose also prints ExecuTorch's info messages (its errors are always printed)\n";

[[noreturn]] void fail(const std::string& message, int code = 2) {
  std::fprintf(stderr, "spec-edge-run: %s\n", message.c_str());
  std::exit(code);
}

// A float32 setting; its range is the ops' check (Runner::generate). One that rounds to 0 is
// refused here: a temperature of 1e-300 would silently mean greedy.
float number(const char* flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') fail(std::string(flag) + ": expected a number, got '" + text + "'");
  if (v != 0.0 && static_cast<float>(v) == 0.0f)
    fail(std::string(flag) + ": " + text + " is too small: it rounds to 0 in float32");
  return static_cast<float>(v);
}

// A file that can be written, checked before any program runs (the decoding is not wasted).
void writable_or_fail(const std::string& flag, const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK) != 0)
    fail(flag + ": the directory '" + dir + "' does not exist or is not writable");
}

// Text as bytes: a NUL inside (a token of byte 0) is printed too, where fputs would stop.
void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// A decimal integer in [lo, hi]: no silent wrap (--k 4294967297), no clamping (--seed 1e30).
int64_t integer(const char* flag, const char* text, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0') fail(std::string(flag) + ": expected an integer, got '" + text + "'");
  if (errno == ERANGE || v < lo || v > hi)
    fail(std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
         "], got '" + text + "'");
  return v;
}

// A cost in target decode steps, as a double (the Python loop's float: the same K from the same
// text); its range is the runner's check.
double cost(const char* flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') fail(std::string(flag) + ": expected a number, got '" + text + "'");
  return v;
}

// The comma-separated items of `text`, each parsed by `parse`.
template <typename T, typename Parse>
std::vector<T> items(const char* text, Parse parse) {
  std::vector<T> out;
  std::string s = text;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    out.push_back(parse(item.c_str()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// --calibrate: each step's cost, as the flags that set it (stdout) and in words (stderr).
void calibrate(spec_edge::runner::Runner& runner, const std::vector<int64_t>& prompt,
               const spec_edge::runner::Sampling& sampling, const std::string& stats_json) {
  constexpr int kRepeats = 9;
  const auto costs = runner.measure_step_costs(prompt, sampling, kRepeats);
  std::string list;
  for (const double c : costs.verify_costs) {
    char item[32];
    std::snprintf(item, sizeof item, "%s%.3f", list.empty() ? "" : ",", c);
    list += item;
  }
  std::fprintf(stderr, "at %lld positions of context, medians of %d: a target decode step %.2f ms; a draft step "
               "%.3f decode steps; the verify step with 1..%d proposals %s decode steps\n",
               static_cast<long long>(costs.context), kRepeats, 1e3 * costs.decode_step_seconds, costs.draft_step_cost,
               runner.k(), list.c_str());
  std::printf("--draft-step-cost %.3f --verify-costs %s\n", costs.draft_step_cost, list.c_str());
  if (!stats_json.empty()) {
    const nlohmann::json j = {{"context", costs.context}, {"decode_step_seconds", costs.decode_step_seconds},
                              {"draft_step_cost", costs.draft_step_cost}, {"verify_costs", costs.verify_costs}};
    std::ofstream out(stats_json);
    if (!(out << j.dump(2) << "\n")) fail("--stats-json: cannot write " + stats_json, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, stats_json, text;
  bool have_text = false, have_eos = false;
  std::vector<int64_t> prompt;
  int64_t max_new = 64, eos = -1;
  std::optional<int> k;  // none: the exported K
  bool speculative = true, verbose = false, calibrating = false;
  spec_edge::runner::Sampling sampling;
  spec_edge::runner::Drafting drafting;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--no-spec") {
      speculative = false;
      continue;
    }
    if (flag == "--verbose") {
      verbose = true;
      continue;
    }
    if (flag == "--adaptive-k") {
      drafting.adaptive_k = true;
      continue;
    }
    if (flag == "--calibrate") {
      calibrating = true;
      continue;
    }
    if (i + 1 >= argc) fail(flag + ": expected a value\n" + kUsage);
    const char* value = argv[++i];
    if (flag == "--model-dir") model_dir = value;
    else if (flag == "--prompt-ids")
      prompt = items<int64_t>(value, [](const char* t) { return integer("--prompt-ids", t); });
    else if (flag == "--prompt") text = value, have_text = true;
    else if (flag == "--max-new") max_new = integer("--max-new", value, 0);
    else if (flag == "--k" || flag == "--k-max") k = static_cast<int>(integer(flag.c_str(), value, INT32_MIN, INT32_MAX));
    else if (flag == "--drafter") {
      try {
        drafting.drafter = spec_edge::runner::parse_drafter(value);
      } catch (const std::invalid_argument& e) {
        fail(std::string("--") + e.what());
      }
    }
    else if (flag == "--min-ngram") drafting.min_ngram = static_cast<int>(integer("--min-ngram", value, 1, 64));
    else if (flag == "--max-ngram") drafting.max_ngram = static_cast<int>(integer("--max-ngram", value, 1, 64));
    else if (flag == "--min-match") drafting.min_match = static_cast<int>(integer("--min-match", value, 1, 64));
    else if (flag == "--draft-step-cost") drafting.draft_step_cost = cost("--draft-step-cost", value);
    else if (flag == "--verify-row-cost") drafting.verify_row_cost = cost("--verify-row-cost", value);
    else if (flag == "--verify-costs")
      drafting.verify_costs = items<double>(value, [](const char* t) { return cost("--verify-costs", t); });
    else if (flag == "--temperature") sampling.temperature = number("--temperature", value);
    else if (flag == "--top-k") sampling.top_k = integer("--top-k", value, 0);
    else if (flag == "--top-p") sampling.top_p = number("--top-p", value);
    else if (flag == "--min-p") sampling.min_p = number("--min-p", value);
    else if (flag == "--repetition-penalty") sampling.repetition_penalty = number(flag.c_str(), value);
    else if (flag == "--seed") sampling.seed = integer("--seed", value);
    else if (flag == "--eos") eos = integer("--eos", value), have_eos = true;
    else if (flag == "--stats-json") stats_json = value, writable_or_fail(flag, stats_json);
    else fail("unknown flag '" + flag + "'\n" + kUsage);
  }
  if (model_dir.empty()) fail(std::string("--model-dir is required\n") + kUsage);
  // One prompt, as text or ids; --calibrate makes its own when given none.
  if ((have_text && !prompt.empty()) || (!have_text && prompt.empty() && !calibrating))
    fail(std::string("give one of --prompt and --prompt-ids\n") + kUsage);
  spec_edge::runner::show_executorch_info(verbose);
  try {
    auto runner = spec_edge::runner::Runner::load(model_dir, k, drafting);
    std::unique_ptr<spec_edge::runner::Tokenizer> tokenizer;
    if (have_text) {  // text in, text out, with the model directory's tokenizer
      tokenizer = std::make_unique<spec_edge::runner::Tokenizer>(
          spec_edge::runner::Tokenizer::load_for_programs(model_dir, runner->vocab_size()));
      prompt = tokenizer->encode(text);
      if (!calibrating) print(text);
    }
    if (calibrating) {
      calibrate(*runner, prompt, sampling, stats_json);
      return 0;
    }
    // --eos, else the checkpoint's end tokens (Llama 3 has three), when the text is ours.
    const std::vector<int64_t> stop_ids = have_eos ? std::vector<int64_t>{eos}
                                          : tokenizer ? tokenizer->eos_ids() : std::vector<int64_t>{};
    std::optional<spec_edge::runner::TextStream> stream;
    if (tokenizer) stream.emplace(*tokenizer);
    runner->generate(prompt, max_new, sampling, speculative, stop_ids, [&](const std::vector<int64_t>& tokens) {
      if (stream) print(stream->push(tokens));
      else for (int64_t t : tokens) std::printf("%lld ", static_cast<long long>(t));
      std::fflush(stdout);
    });
    if (stream) print(stream->finish());
    std::printf("\n");
    std::fflush(stdout);
    const auto& s = runner->stats();
    std::fprintf(stderr, "%lld tokens, %.1f tokens/s (%s), prefill %.3f s\n", static_cast<long long>(s.new_tokens),
                 s.tokens_per_second(), speculative ? "speculative" : "target only", s.prefill_seconds);
    if (speculative) {
      std::fprintf(stderr, "acceptance %.3f over %lld rounds; accepted length histogram:", s.acceptance_rate(),
                   static_cast<long long>(s.rounds));
      for (size_t n = 0; n < s.accepted_histogram.size(); ++n)
        std::fprintf(stderr, " %zu:%lld", n, static_cast<long long>(s.accepted_histogram[n]));
      const double decode = s.total_seconds - s.prefill_seconds;
      std::fprintf(stderr, "\ntime split: draft %.0f%%, target verify %.0f%%, loop %.0f%%\n",
                   100 * s.draft_seconds / decode, 100 * s.target_seconds / decode, 100 * (decode - s.draft_seconds - s.target_seconds) / decode);
      if (drafting.drafter != spec_edge::runner::Drafter::kModel)
        std::fprintf(stderr, "draft model: %lld rounds, %lld/%lld accepted; lookup: %lld rounds, %lld/%lld accepted; "
                     "target alone: %lld steps\n", static_cast<long long>(s.model_rounds),
                     static_cast<long long>(s.model_accepted), static_cast<long long>(s.model_proposed),
                     static_cast<long long>(s.lookup_rounds), static_cast<long long>(s.lookup_accepted),
                     static_cast<long long>(s.lookup_proposed), static_cast<long long>(s.plain_steps));
    }
    if (!stats_json.empty()) {
      nlohmann::json j = {{"new_tokens", s.new_tokens}, {"rounds", s.rounds},     {"proposed", s.proposed},
                          {"accepted", s.accepted},     {"accepted_histogram", s.accepted_histogram},
                          {"prefill_seconds", s.prefill_seconds},   {"draft_seconds", s.draft_seconds}, {"target_seconds", s.target_seconds},
                          {"total_seconds", s.total_seconds},       {"tokens_per_second", s.tokens_per_second()},
                          {"model_rounds", s.model_rounds}, {"model_proposed", s.model_proposed},
                          {"model_accepted", s.model_accepted}, {"lookup_rounds", s.lookup_rounds},
                          {"lookup_proposed", s.lookup_proposed}, {"lookup_accepted", s.lookup_accepted},
                          {"plain_steps", s.plain_steps}};
      std::ofstream out(stats_json);
      if (!(out << j.dump(2) << "\n")) fail("--stats-json: cannot write " + stats_json, 1);
    }
  } catch (const spec_edge::runner::RunnerError& e) {
    fail(e.what(), 1);
  }
  return 0;
}
