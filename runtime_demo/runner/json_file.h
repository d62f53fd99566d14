// JSON from the files beside the programs (manifest, tokenizer, configurations): untrusted, so
// the nesting is bounded before anything recurses over it, and every error names the file.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "spec_edge/runner.h"

namespace spec_edge::runner {

// Deeper than any file a checkpoint ships (tokenizer.json nests about 6 levels), shallow enough
// that the recursive readers of the tokenizer and nlohmann's own DOM never exhaust a stack.
constexpr int kMaxJsonDepth = 64;

// A RunnerError naming `path` where `text` nests arrays and objects more than kMaxJsonDepth deep.
inline void check_json_depth(const std::string& text, const std::string& path) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw RunnerError(path + ": JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at byte " +
                          std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// `text`, the contents of `path`, parsed: a RunnerError "<path>: <not_readable> (why)" otherwise.
inline nlohmann::json parse_json(const std::string& text, const std::string& path,
                                 const std::string& not_readable = "not readable JSON") {
  check_json_depth(text, path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw RunnerError(path + ": " + not_readable + " (" + e.what() + ")");
  }
}

}  // namespace spec_edge::runner
