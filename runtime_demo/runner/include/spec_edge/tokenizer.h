// The on-device tokenizer: a Hugging Face tokenizer.json read without Python, with encode and
// decode identical to the `tokenizers` library for the constructs of the families people deploy
// (GPT-2-style byte-level BPE, Llama 3, Qwen2, SmolLM2, SentencePiece-style BPE such as Llama 2):
// normalizers NFC, Prepend, Replace (string), Sequence; pre-tokenizers Split (the families'
// patterns), ByteLevel, Digits, Metaspace, Sequence; BPE with byte fallback, unknown token,
// ignore_merges; added tokens with their flags; TemplateProcessing / ByteLevel / Sequence
// post-processors; ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence
// decoders. Anything else in the file is refused by name at load: never a silent difference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spec_edge::runner {

class Tokenizer {
 public:
  // Throws RunnerError naming the file and what it does not support or what is wrong in it.
  static Tokenizer load(const std::string& path);
  // model_dir/tokenizer.json, refused when it has more tokens than the programs' vocabulary; BOS
  // and EOS from model_dir's tokenizer_config.json and generation_config.json when present.
  static Tokenizer load_for_programs(const std::string& model_dir, int64_t program_vocab_size);

  // Ill-formed UTF-8 in `text` reads as U+FFFD, as Python's errors="replace".
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const;
  // The words the model encodes (after added tokens, normalizers and pre-tokenizers; an added
  // token as its text): tokenizers' pre_tokenize_str, for tests and debugging.
  std::vector<std::string> pre_tokenize(const std::string& text) const;
  // Valid UTF-8 text; ids outside [0, vocab_size()) are an ArgumentError.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;
  // The id of a token ("<|endoftext|>"), or -1.
  int64_t token_id(const std::string& token) const;
  int64_t vocab_size() const;
  int64_t bos_id() const;                     // -1 when the checkpoint names none
  const std::vector<int64_t>& eos_ids() const;  // every id that ends generation

  struct Impl;

 private:
  friend class TextStream;
  std::shared_ptr<const Impl> impl_;
};

// Streaming text: push each round's tokens, get the text that became complete; a character whose
// bytes span tokens is held until its last byte arrives, never printed as U+FFFD.
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer, bool skip_special_tokens = true)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}
  std::string push(const std::vector<int64_t>& ids);
  std::string finish();  // what is left, ill-formed bytes as U+FFFD

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int64_t> ids_;
  size_t printed_ = 0;  // bytes of the decoded text already returned
};

}  // namespace spec_edge::runner
