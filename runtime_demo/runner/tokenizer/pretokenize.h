// Pre-tokenizers of Hugging Face tokenizer.json files (Split, ByteLevel, Digits, Metaspace, in a
// Sequence): each splits the pieces between added tokens into the words the model encodes. The
// Split patterns of the supported families are written by hand (the GPT-2, Llama 3 and Qwen2
// regexes, with Oniguruma's leftmost-first semantics); any other regex is refused at load.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spec_edge::runner {

struct Piece {
  std::string text;
  int64_t token = -1;     // an added token's id: the piece is final
  bool at_start = false;  // begins at the input's first byte (Metaspace's "first")
};
using Pieces = std::vector<Piece>;

struct PreTokenizer {
  enum class Type { kSplit, kByteLevel, kDigits, kMetaspace } type;
  enum class Pattern { kLiteral, kGpt2, kLlama3, kQwen2 } pattern = Pattern::kLiteral;
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  std::string literal;  // Split's String pattern; Metaspace's replacement
  Behavior behavior = Behavior::kIsolated;
  bool invert = false, add_prefix_space = false, use_regex = true, individual_digits = false, split = true;
  Prepend prepend = Prepend::kAlways;
};

// A pre_tokenizer value (null: none) as a list; `refuse` throws, naming what is unsupported.
std::vector<PreTokenizer> parse_pre_tokenizers(const nlohmann::json& j,
                                               const std::function<void(const std::string&)>& refuse);
void pre_tokenize(const std::vector<PreTokenizer>& steps, Pieces& pieces);

// GPT-2's reversible map from bytes to printable characters (ByteLevel), and back (-1: none).
const std::array<std::string, 256>& byte_symbols();
int byte_of_symbol(uint32_t cp);

}  // namespace spec_edge::runner
