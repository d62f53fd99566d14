// Byte-level BPE from a Hugging Face tokenizer.json, for the runner's --prompt and its streamed
// text: ids identical to the `tokenizers` library for what spec_edge's exports ship (a BPE model
// without dropout or unknown token, a ByteLevel pre-tokenizer with its GPT-2 pattern, added tokens
// matched first). Anything else in the file is refused by name at load.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spec_edge::runner {

class Tokenizer {
 public:
  // Throws RunnerError naming the file and the setting it does not support.
  static Tokenizer load(const std::string& path);
  // model_dir/tokenizer.json, refused when it has more tokens than the programs' vocabulary.
  static Tokenizer load_for_programs(const std::string& model_dir, int64_t program_vocab_size);

  std::vector<int64_t> encode(const std::string& text) const;
  // The bytes of the tokens (the text, once every token of a character has arrived).
  std::string decode(const std::vector<int64_t>& ids) const;
  // The id of a token ("<|endoftext|>"), or -1.
  int64_t token_id(const std::string& token) const;
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  void encode_segment(const std::string& text, std::vector<int64_t>& out) const;
  void encode_word(const std::string& bytes, std::vector<int64_t>& out) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::vector<std::pair<std::string, int64_t>> added_;  // longest content first
  std::array<std::string, 256> byte_symbol_;           // GPT-2's byte -> printable character
  std::unordered_map<std::string, uint8_t> symbol_byte_;
  bool add_prefix_space_ = false;
};

}  // namespace spec_edge::runner
