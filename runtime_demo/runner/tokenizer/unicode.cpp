#include "unicode.h"

#include <algorithm>
#include <iterator>

#include "spec_edge/utf8.h"
#include "unicode_tables.h"

namespace spec_edge::runner::unicode {
namespace {

template <size_t N>
bool in_table(const CodeRange (&table)[N], uint32_t cp) {
  const CodeRange* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                         [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(table) && cp <= (it - 1)->last;
}

uint8_t combining_class(uint32_t cp) {
  const ClassRun* it = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                        [](uint32_t c, const ClassRun& r) { return c < r.first; });
  return it != std::begin(kCombiningClasses) && cp <= (it - 1)->last ? (it - 1)->ccc : 0;
}

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                             [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == std::end(kDecompositions) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionPool + it->at, kDecompositionPool + it->at + it->len);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* it = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b),
      [](const Composition& c, const std::pair<uint32_t, uint32_t>& k) {
        return c.first != k.first ? c.first < k.first : c.second < k.second;
      });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

Decoded decode_one(const unsigned char* s, size_t n) {
  const unsigned b = s[0];
  if (b < 0x80) return {1, static_cast<int32_t>(b), true};
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b >= 0xC2 && b <= 0xDF) len = 2;
  else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
  else return {1, -1, true};
  uint32_t cp = b & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) {
    if (i >= n) return {i, -1, false};
    const unsigned c = s[i];
    if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return {i, -1, true};
    cp = (cp << 6) | (c & 0x3F);
  }
  return {len, static_cast<int32_t>(cp), true};
}

std::vector<Char> chars(std::string_view s) {
  std::vector<Char> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_one(p + i, s.size() - i);
    out.push_back({d.cp < 0 ? 0xFFFDu : static_cast<uint32_t>(d.cp), i, d.len});
    i += d.len;
  }
  return out;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_one(p + i, s.size() - i);
    if (d.cp < 0) append_utf8(out, 0xFFFD);
    else out.append(s.data() + i, d.len);
    i += d.len;
  }
  return out;
}

size_t complete_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_one(p + i, s.size() - i);
    if (!d.complete) return i;
    i += d.len;
  }
  return s.size();
}

bool is_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}
bool is_letter(uint32_t cp) { return in_table(kLetters, cp); }
bool is_number(uint32_t cp) { return in_table(kNumbers, cp); }
bool is_word(uint32_t cp) { return in_table(kWordChars, cp); }

std::string nfc(std::string_view s) {
  // ASCII is already NFC: the common case costs one scan.
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(s);
  std::vector<uint32_t> cps;
  for (const Char& c : chars(s)) decompose(c.cp, cps);
  // Canonical order: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition (the reference algorithm of UAX #15).
  size_t out = 0;
  if (!cps.empty()) {
    size_t starter = 0;
    int last_class = combining_class(cps[0]) == 0 ? 0 : 256;
    out = 1;
    for (size_t i = 1; i < cps.size(); ++i) {
      const uint32_t c = cps[i];
      const int cls = combining_class(c);
      const uint32_t composite = compose(cps[starter], c);
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        cps[starter] = composite;
        continue;
      }
      if (cls == 0) starter = out;
      last_class = cls;
      cps[out++] = c;
    }
  }
  std::string text;
  for (size_t i = 0; i < out; ++i) append_utf8(text, cps[i]);
  return text;
}

}  // namespace spec_edge::runner::unicode
