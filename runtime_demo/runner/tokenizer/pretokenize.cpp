#include "pretokenize.h"

#include <algorithm>
#include <utility>

#include "spec_edge/utf8.h"
#include "unicode.h"

namespace spec_edge::runner {
namespace {

using unicode::Char;
using unicode::is_letter;
using unicode::is_number;
using unicode::is_space;
using Span = std::pair<size_t, size_t>;  // bytes [first, second)
using Pattern = PreTokenizer::Pattern;
using Behavior = PreTokenizer::Behavior;

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }
bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// 's|'t|'re|'ve|'m|'ll|'d at i, as characters matched (0: none). Case-insensitively, Unicode
// case folding adds only U+017F (long s) folding to 's'.
size_t contraction(const std::vector<Char>& c, size_t i, bool fold_case) {
  if (c[i].cp != '\'' || i + 1 >= c.size()) return 0;
  const auto lower = [&](size_t j) -> uint32_t {
    if (j >= c.size()) return 0;
    const uint32_t cp = c[j].cp;
    if (!fold_case) return cp;
    if (cp == 0x17F) return 's';
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  };
  const uint32_t a = lower(i + 1), b = lower(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  return 0;
}

size_t run(const std::vector<Char>& c, size_t j, bool (*cls)(uint32_t)) {
  while (j < c.size() && cls(c[j].cp)) ++j;
  return j;
}

// \s+(?!\S)|\s+ at i (c[i] is a space): the run, less its last character when a non-space follows.
size_t spaces(const std::vector<Char>& c, size_t i) {
  const size_t e = run(c, i, is_space);
  return e < c.size() && e - i > 1 ? e - i - 1 : e - i;
}

// The GPT-2 pattern's match at i, in characters.
size_t match_gpt2(const std::vector<Char>& c, size_t i) {
  if (size_t n = contraction(c, i, false)) return n;
  const size_t start = c[i].cp == ' ' && i + 1 < c.size() ? i + 1 : i;
  for (bool (*cls)(uint32_t) : {is_letter, is_number, is_other})
    if (cls(c[start].cp)) return run(c, start, cls) - i;
  return spaces(c, i);
}

// The Llama 3 pattern (Qwen2's with max_digits 1) at i, in characters.
size_t match_llama3(const std::vector<Char>& c, size_t i, size_t max_digits) {
  if (size_t n = contraction(c, i, true)) return n;
  const uint32_t x = c[i].cp;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_newline(x) && !is_letter(x) && !is_number(x) && i + 1 < c.size() && is_letter(c[i + 1].cp))
    return run(c, i + 1, is_letter) - i;
  if (is_letter(x)) return run(c, i, is_letter) - i;
  if (is_number(x)) {  // \p{N}{1,max}
    size_t j = i;
    while (j < c.size() && j - i < max_digits && is_number(c[j].cp)) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t start = x == ' ' && i + 1 < c.size() && is_other(c[i + 1].cp) ? i + 1 : i;
  if (is_other(c[start].cp)) return run(c, run(c, start, is_other), is_newline) - i;
  // \s*[\r\n]+: the whitespace run up to and including its last newline
  const size_t e = run(c, i, is_space);
  for (size_t j = e; j > i; --j)
    if (is_newline(c[j - 1].cp)) return j - i;
  return spaces(c, i);
}

std::vector<Span> regex_matches(const std::string& text, Pattern pattern) {
  const std::vector<Char> c = unicode::chars(text);
  std::vector<Span> out;
  for (size_t i = 0; i < c.size();) {
    const size_t n = pattern == Pattern::kGpt2     ? match_gpt2(c, i)
                     : pattern == Pattern::kLlama3 ? match_llama3(c, i, 3)
                                                   : match_llama3(c, i, 1);
    out.emplace_back(c[i].at, c[i + n - 1].at + c[i + n - 1].len);
    i += n;
  }
  return out;
}

std::vector<Span> literal_matches(const std::string& text, const std::string& literal) {
  std::vector<Span> out;
  if (literal.empty()) return out;
  for (size_t at = text.find(literal); at != std::string::npos; at = text.find(literal, at + literal.size()))
    out.emplace_back(at, at + literal.size());
  return out;
}

// Tokenizers' NormalizedString::split: the piece cut at the matches, by behaviour; empty
// pieces dropped. A piece keeps at_start when it begins where its parent did.
void split(const Piece& piece, const std::vector<Span>& matches, Behavior behavior, bool invert, Pieces& out) {
  struct Segment {
    size_t from, to;
    bool match;
  };
  std::vector<Segment> seg;
  size_t at = 0;
  for (const Span& m : matches) {
    if (m.first > at) seg.push_back({at, m.first, invert});
    seg.push_back({m.first, m.second, !invert});
    at = m.second;
  }
  if (at < piece.text.size()) seg.push_back({at, piece.text.size(), invert});
  std::vector<Segment> kept;
  if (behavior == Behavior::kMergedWithNext) {  // the mirror image of MergedWithPrevious
    bool next_match = false;
    for (size_t k = seg.size(); k-- > 0;) {
      if (seg[k].match && !next_match && !kept.empty()) kept.back().from = seg[k].from;
      else kept.push_back({seg[k].from, seg[k].to, false});
      next_match = seg[k].match;
    }
    std::reverse(kept.begin(), kept.end());
  } else {
    bool previous_match = false;
    for (const Segment& s : seg) {
      if (behavior == Behavior::kRemoved && s.match) continue;
      const bool merge = behavior == Behavior::kMergedWithPrevious ? s.match && !previous_match
                         : behavior == Behavior::kContiguous       ? s.match == previous_match
                                                                   : false;
      if (merge && !kept.empty()) kept.back().to = s.to;
      else kept.push_back(s);
      previous_match = s.match;
    }
  }
  for (const Segment& s : kept)
    if (s.to > s.from) out.push_back({piece.text.substr(s.from, s.to - s.from), -1, piece.at_start && s.from == 0});
}

// Each code point matching `cls` is a match of its own.
std::vector<Span> char_matches(const std::string& text, bool (*cls)(uint32_t)) {
  std::vector<Span> out;
  for (const Char& ch : unicode::chars(text))
    if (cls(ch.cp)) out.emplace_back(ch.at, ch.at + ch.len);
  return out;
}

void apply(const PreTokenizer& p, Pieces& pieces) {
  Pieces out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    if (piece.token >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    switch (p.type) {
      case PreTokenizer::Type::kSplit:
        split(piece, p.pattern == Pattern::kLiteral ? literal_matches(piece.text, p.literal)
                                                    : regex_matches(piece.text, p.pattern),
              p.behavior, p.invert, out);
        break;
      case PreTokenizer::Type::kDigits:
        split(piece, char_matches(piece.text, is_number),
              p.individual_digits ? Behavior::kIsolated : Behavior::kContiguous, false, out);
        break;
      case PreTokenizer::Type::kMetaspace: {
        std::string text;
        for (char ch : piece.text) text += ch == ' ' ? p.literal : std::string(1, ch);
        const bool starts = text.compare(0, p.literal.size(), p.literal) == 0;
        if (!starts && (p.prepend == PreTokenizer::Prepend::kAlways ||
                        (p.prepend == PreTokenizer::Prepend::kFirst && piece.at_start)))
          text = p.literal + text;
        piece.text = std::move(text);
        if (p.split) split(piece, literal_matches(piece.text, p.literal), Behavior::kMergedWithNext, false, out);
        else if (!piece.text.empty()) out.push_back(std::move(piece));
        break;
      }
      case PreTokenizer::Type::kByteLevel: {
        if (p.add_prefix_space && piece.text.compare(0, 1, " ") != 0) piece.text = " " + piece.text;
        Pieces words;
        if (p.use_regex) split(piece, regex_matches(piece.text, Pattern::kGpt2), Behavior::kIsolated, false, words);
        else if (!piece.text.empty()) words.push_back(std::move(piece));
        for (Piece& w : words) {
          std::string mapped;
          for (unsigned char b : w.text) mapped += byte_symbols()[b];
          w.text = std::move(mapped);
          out.push_back(std::move(w));
        }
        break;
      }
    }
  }
  pieces.swap(out);
}

}  // namespace

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], printable ? b : 256 + n++);
    }
    return t;
  }();
  return table;
}

int byte_of_symbol(uint32_t cp) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[unicode::chars(byte_symbols()[b])[0].cp] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

std::vector<PreTokenizer> parse_pre_tokenizers(const nlohmann::json& j,
                                               const std::function<void(const std::string&)>& refuse) {
  std::vector<PreTokenizer> out;
  if (j.is_null()) return out;
  const std::string type = j.at("type");
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers"))
      for (PreTokenizer& q : parse_pre_tokenizers(p, refuse)) out.push_back(std::move(q));
    return out;
  }
  PreTokenizer p{};
  if (type == "Split") {
    p.type = PreTokenizer::Type::kSplit;
    const auto& pattern = j.at("pattern");
    if (pattern.contains("String")) {
      p.literal = pattern.at("String");
    } else {
      const std::string regex = pattern.at("Regex");
      if (regex == kGpt2Regex) p.pattern = Pattern::kGpt2;
      else if (regex == kLlama3Regex) p.pattern = Pattern::kLlama3;
      else if (regex == kQwen2Regex) p.pattern = Pattern::kQwen2;
      else refuse("Split pattern " + pattern.dump() + " (the GPT-2, Llama 3 and Qwen2 patterns are supported)");
    }
    const std::string behavior = j.at("behavior");
    const std::pair<const char*, Behavior> names[] = {
        {"Isolated", Behavior::kIsolated}, {"Removed", Behavior::kRemoved},
        {"MergedWithPrevious", Behavior::kMergedWithPrevious}, {"MergedWithNext", Behavior::kMergedWithNext},
        {"Contiguous", Behavior::kContiguous}};
    bool known = false;
    for (const auto& [name, b] : names)
      if (behavior == name) p.behavior = b, known = true;
    if (!known) refuse("Split behavior " + behavior);
    p.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    p.type = PreTokenizer::Type::kByteLevel;
    p.add_prefix_space = j.value("add_prefix_space", true);
    p.use_regex = j.value("use_regex", true);
  } else if (type == "Digits") {
    p.type = PreTokenizer::Type::kDigits;
    p.individual_digits = j.value("individual_digits", false);
  } else if (type == "Metaspace") {
    p.type = PreTokenizer::Type::kMetaspace;
    p.literal = j.value("replacement", std::string("\xE2\x96\x81"));
    if (unicode::chars(p.literal).size() != 1) refuse("Metaspace replacement '" + p.literal + "' (one character)");
    p.split = j.value("split", true);
    const std::string scheme = j.value("prepend_scheme", std::string("always"));
    p.prepend = scheme == "first" ? PreTokenizer::Prepend::kFirst
                : scheme == "never" ? PreTokenizer::Prepend::kNever
                                    : PreTokenizer::Prepend::kAlways;
    if (scheme != "first" && scheme != "never" && scheme != "always") refuse("Metaspace prepend_scheme " + scheme);
    if (j.contains("add_prefix_space") && !j.at("add_prefix_space").get<bool>()) p.prepend = PreTokenizer::Prepend::kNever;
  } else {
    refuse("pre-tokenizer " + type);
  }
  out.push_back(std::move(p));
  return out;
}

void pre_tokenize(const std::vector<PreTokenizer>& steps, Pieces& pieces) {
  for (const PreTokenizer& p : steps) apply(p, pieces);
}

}  // namespace spec_edge::runner
