#include "spec_edge/tokenizer.h"
#include "spec_edge/utf8.h"

#include <algorithm>
#include <climits>

#include <nlohmann/json.hpp>

#include "read_file.h"
#include "spec_edge/runner.h"
#include "unicode_tables.h"

namespace spec_edge::runner {
namespace {

template <size_t N>
bool in_table(const CodeRange (&table)[N], uint32_t cp) {
  const CodeRange* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                         [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(table) && cp <= (it - 1)->last;
}

// White_Space, the class of \s in the pattern.
bool is_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}
bool is_letter(uint32_t cp) { return in_table(kLetters, cp); }
bool is_number(uint32_t cp) { return in_table(kNumbers, cp); }
bool is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// Code points with the byte offset each starts at; a byte that does not start a valid UTF-8
// sequence stands for itself (class: other).
struct Char {
  uint32_t cp;
  size_t at, len;
};
std::vector<Char> decode_utf8(const std::string& s) {
  std::vector<Char> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool valid = len > 0 && i + len <= s.size();
    for (size_t j = 1; valid && j < len; ++j) {
      const auto c = static_cast<unsigned char>(s[i + j]);
      valid = (c >> 6) == 2;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!valid) {
      len = 1;
      cp = 0xFFFD;
    }
    out.push_back({cp, i, len});
    i += len;
  }
  return out;
}

bool is_contraction(const std::vector<Char>& c, size_t i, size_t* len) {
  if (c[i].cp != '\'' || i + 1 >= c.size()) return false;
  const uint32_t a = c[i + 1].cp, b = i + 2 < c.size() ? c[i + 2].cp : 0;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
    *len = 3;
    return true;
  }
  if (a == 's' || a == 't' || a == 'm' || a == 'd') {
    *len = 2;
    return true;
  }
  return false;
}

// The GPT-2 pattern, alternative by alternative, leftmost first:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Returns the length, in characters, of the match at i.
size_t match_at(const std::vector<Char>& c, size_t i) {
  size_t len = 0;
  if (is_contraction(c, i, &len)) return len;
  const size_t start = c[i].cp == ' ' && i + 1 < c.size() ? i + 1 : i;
  for (bool (*cls)(uint32_t) : {is_letter, is_number, is_other}) {
    if (!cls(c[start].cp)) continue;
    size_t j = start;
    while (j < c.size() && cls(c[j].cp)) ++j;
    return j - i;
  }
  size_t j = i;  // whitespace: a run, leaving its last character to the word after it
  while (j < c.size() && is_space(c[j].cp)) ++j;
  if (j < c.size() && j - i > 1) return j - i - 1;
  return j - i;
}

}  // namespace

Tokenizer Tokenizer::load_for_programs(const std::string& model_dir, int64_t program_vocab_size) {
  const std::string path = model_dir + "/tokenizer.json";
  Tokenizer t = load(path);
  if (t.vocab_size() > program_vocab_size)
    throw RunnerError(path + ": " + std::to_string(t.vocab_size()) + " tokens, more than the programs' vocabulary of " +
                      std::to_string(program_vocab_size));
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  Tokenizer t;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, "the model directory needs its tokenizer"));
  } catch (const nlohmann::json::exception& e) {
    throw RunnerError(path + ": not a readable tokenizer (" + e.what() + ")");
  }
  const auto refuse = [&](const std::string& what) { throw RunnerError(path + ": unsupported tokenizer: " + what); };
  try {
    const auto& model = j.at("model");
    if (model.at("type") != "BPE") refuse("model type " + model.at("type").dump() + " (expected BPE)");
    if (!model.value("dropout", nlohmann::json()).is_null()) refuse("BPE dropout");
    if (!j.value("normalizer", nlohmann::json()).is_null()) refuse("a normalizer");
    const auto& pre = j.at("pre_tokenizer");
    if (pre.is_null() || pre.at("type") != "ByteLevel" || !pre.value("use_regex", true))
      refuse("pre-tokenizer " + pre.dump() + " (expected ByteLevel with its pattern)");
    if (model.value("ignore_merges", false)) refuse("ignore_merges");
    t.add_prefix_space_ = pre.value("add_prefix_space", false);
    for (const auto& [token, id] : model.at("vocab").items()) t.vocab_[token] = id.get<int64_t>();
    int rank = 0;
    for (const auto& m : model.at("merges"))
      t.merge_rank_[m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>()] =
          rank++;
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      t.vocab_[a.at("content")] = a.at("id").get<int64_t>();
      t.added_.emplace_back(a.at("content").get<std::string>(), a.at("id").get<int64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw RunnerError(path + ": malformed tokenizer (" + e.what() + ")");
  }
  std::sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  int64_t size = 0;
  for (const auto& [token, id] : t.vocab_) size = std::max(size, id + 1);
  t.id_to_token_.assign(size, "");
  t.special_.assign(size, false);
  for (const auto& [token, id] : t.vocab_) t.id_to_token_[id] = token;
  for (const auto& [content, id] : t.added_) t.special_[id] = true;
  // GPT-2's reversible map from bytes to printable characters.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t.byte_symbol_[b] = utf8(printable ? b : 256 + n++);
    t.symbol_byte_[t.byte_symbol_[b]] = static_cast<uint8_t>(b);
  }
  return t;
}

int64_t Tokenizer::token_id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int64_t> out;
  size_t segment = 0;
  for (size_t i = 0; i < text.size();) {
    const auto hit = std::find_if(added_.begin(), added_.end(),
                                  [&](const auto& a) { return !a.first.empty() && text.compare(i, a.first.size(), a.first) == 0; });
    if (hit == added_.end()) {
      ++i;
      continue;
    }
    encode_segment(text.substr(segment, i - segment), out);
    out.push_back(hit->second);
    i += hit->first.size();
    segment = i;
  }
  encode_segment(text.substr(segment), out);
  return out;
}

void Tokenizer::encode_segment(const std::string& segment, std::vector<int64_t>& out) const {
  if (segment.empty()) return;
  const std::string text = add_prefix_space_ && segment[0] != ' ' ? " " + segment : segment;
  const std::vector<Char> c = decode_utf8(text);
  for (size_t i = 0; i < c.size();) {
    const size_t len = match_at(c, i);
    const size_t from = c[i].at, to = c[i + len - 1].at + c[i + len - 1].len;
    encode_word(text.substr(from, to - from), out);
    i += len;
  }
}

// BPE over the word's byte symbols: merge the lowest-ranked adjacent pair everywhere (left to
// right), until no pair has a rank.
void Tokenizer::encode_word(const std::string& bytes, std::vector<int64_t>& out) const {
  std::vector<std::string> symbols;
  for (unsigned char b : bytes) symbols.push_back(byte_symbol_[b]);
  for (;;) {
    int best = INT_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merge_rank_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != merge_rank_.end()) best = std::min(best, it->second);
    }
    if (best == INT_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size()) {
        const auto it = merge_rank_.find(symbols[i] + " " + symbols[i + 1]);
        if (it != merge_rank_.end() && it->second == best) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(symbols[i]);
    }
    symbols.swap(merged);
  }
  for (const std::string& s : symbols) {
    const auto it = vocab_.find(s);
    if (it == vocab_.end()) throw RunnerError("tokenizer: no id for the piece '" + s + "'");
    out.push_back(it->second);
  }
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) throw ArgumentError("decode: id " + std::to_string(id) + " is not in the vocabulary");
    if (special_[id]) continue;
    const std::string& token = id_to_token_[id];
    for (const Char& ch : decode_utf8(token)) {
      const auto it = symbol_byte_.find(token.substr(ch.at, ch.len));
      if (it != symbol_byte_.end()) out += static_cast<char>(it->second);
    }
  }
  return out;
}

}  // namespace spec_edge::runner
