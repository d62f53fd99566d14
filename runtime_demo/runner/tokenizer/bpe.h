// The BPE model of a tokenizer.json: a word's characters as vocabulary symbols (byte fallback,
// unknown token), merged lowest rank first, leftmost first, as `tokenizers` does.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace spec_edge::runner {

class Bpe {
 public:
  // `refuse` throws, naming the unsupported setting; `malformed` for a broken model.
  Bpe(const nlohmann::json& model, const std::function<void(const std::string&)>& refuse,
      const std::function<void(const std::string&)>& malformed);

  void encode(std::string_view word, std::vector<int64_t>& out) const;
  int64_t id(const std::string& token) const;  // -1 when absent
  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int64_t result;
  };
  void merge_word(std::string_view word, std::vector<int64_t>& out) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  int64_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int64_t, 256> byte_ids_{};  // "<0xAB>" tokens, -1 when absent
  // Words seen before (bounded): tokenizers caches the same way.
  mutable std::mutex cache_lock_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace spec_edge::runner
