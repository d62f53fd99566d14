#include "bpe.h"

#include <cstdio>
#include <queue>

#include "unicode.h"

namespace spec_edge::runner {
namespace {

constexpr size_t kCacheWords = 100000, kCacheWordBytes = 256;

uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

bool set_string(const nlohmann::json& model, const char* name) {
  return model.contains(name) && model.at(name).is_string() && !model.at(name).get<std::string>().empty();
}

}  // namespace

Bpe::Bpe(const nlohmann::json& model, const std::function<void(const std::string&)>& refuse,
         const std::function<void(const std::string&)>& malformed) {
  if (model.at("type") != "BPE") refuse("model type " + model.at("type").dump() + " (expected BPE)");
  const auto& dropout = model.value("dropout", nlohmann::json());
  if (!dropout.is_null() && dropout.get<double>() != 0.0) refuse("BPE dropout");
  if (set_string(model, "continuing_subword_prefix")) refuse("BPE continuing_subword_prefix");
  if (set_string(model, "end_of_word_suffix")) refuse("BPE end_of_word_suffix");
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  for (const auto& [token, id] : model.at("vocab").items()) {
    if (!id.is_number_integer()) malformed("vocab id " + id.dump() + " of '" + token + "' is not an integer");
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i >= (int64_t{1} << 31)) malformed("vocab id " + std::to_string(i) + " of '" + token + "' is out of range");
    vocab_[token] = i;
  }
  const auto& unk = model.value("unk_token", nlohmann::json());
  if (!unk.is_null()) {
    unk_ = id(unk.get<std::string>());
    if (unk_ < 0) malformed("unk_token '" + unk.get<std::string>() + "' is not in the vocabulary");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = id(name);
  }
  int32_t rank = 0;
  for (const auto& m : model.at("merges")) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        malformed("merge \"" + s + "\" is not two tokens separated by one space");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      left = m.at(0), right = m.at(1);
    }
    const int64_t a = id(left), b = id(right), c = id(left + right);
    if (a < 0 || b < 0 || c < 0)
      malformed("merge \"" + left + " " + right + "\" names a token that is not in the vocabulary ('" +
                (a < 0 ? left : b < 0 ? right : left + right) + "')");
    merges_[pair_key(a, b)] = {rank++, c};  // a repeated pair: the later rank, as tokenizers
  }
}

int64_t Bpe::id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void Bpe::encode(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_lock_);
    const auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_lock_);
    if (cache_.size() >= kCacheWords) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

// tokenizers' Word::merge_all: a queue of (rank, position) over symbols that only ever merge
// into their left neighbour; an entry is stale when its pair changed since it was queued.
void Bpe::merge_word(std::string_view word, std::vector<int64_t>& out) const {
  struct Symbol {
    int64_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  const auto add = [&](int64_t id) {
    const int n = static_cast<int>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  };
  bool pending_unk = false;
  for (const unicode::Char& ch : unicode::chars(word)) {
    const std::string s(word.substr(ch.at, ch.len));
    const int64_t i = id(s);
    if (i >= 0) {
      if (pending_unk) add(unk_), pending_unk = false;
      add(i);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
      if (all) {  // (a pending unknown token stays pending, as in tokenizers)
        for (unsigned char b : s) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_ < 0) continue;  // no unknown token: the character is dropped, as in tokenizers
    if (pending_unk && !fuse_unk_) add(unk_);
    pending_unk = true;
  }
  if (pending_unk) add(unk_);
  if (!sym.empty()) sym.back().next = -1;

  struct Entry {
    int32_t rank;
    int pos;
    int64_t result;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const auto push = [&](int pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const auto it = merges_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.result});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    const auto it = merges_.find(pair_key(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.result != top.result) continue;
    Symbol& right = sym[left.next];
    left.id = top.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    push(left.prev);
    push(top.pos);
  }
  for (const Symbol& s : sym)
    if (s.alive) out.push_back(s.id);
}

}  // namespace spec_edge::runner
