// Unicode for the tokenizer: UTF-8 decoding with U+FFFD for ill-formed input (maximal subparts,
// as Python's errors="replace" and Rust's from_utf8_lossy), the classes of the pre-tokenizers'
// patterns, and NFC. Tables: unicode_tables.h (generated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spec_edge::runner::unicode {

struct Char {
  uint32_t cp;
  size_t at, len;  // byte offset and length in the text
};

// The well-formed sequence at s[0..n) or the maximal ill-formed subpart there: its length, and
// the code point or -1 (complete = false when it is ill-formed only because the input ends).
struct Decoded {
  size_t len;
  int32_t cp;
  bool complete;
};
Decoded decode_one(const unsigned char* s, size_t n);

// Code points of valid UTF-8 (as sanitize() makes it).
std::vector<Char> chars(std::string_view s);
// Ill-formed subparts replaced by U+FFFD.
std::string sanitize(std::string_view s);
// The length of the longest prefix that does not end inside an incomplete sequence.
size_t complete_prefix(std::string_view s);

bool is_space(uint32_t cp);   // White_Space: \s
bool is_letter(uint32_t cp);  // \p{L}
bool is_number(uint32_t cp);  // \p{N}
bool is_word(uint32_t cp);    // \w
std::string nfc(std::string_view s);

}  // namespace spec_edge::runner::unicode
