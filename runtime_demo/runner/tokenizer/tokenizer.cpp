#include "spec_edge/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "bpe.h"
#include "pretokenize.h"
#include "json_file.h"
#include "read_file.h"
#include "spec_edge/runner.h"
#include "spec_edge/utf8.h"
#include "unicode.h"

namespace spec_edge::runner {
namespace {

using Refuse = std::function<void(const std::string&)>;
using json = nlohmann::json;

struct Normalizer {
  enum class Type { kNfc, kPrepend, kReplace } type;
  std::string a, b;  // Prepend's text; Replace's pattern and content
};

struct Decoder {
  enum class Type { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } type;
  std::string a, b;  // Metaspace's replacement; Replace's pattern and content; Strip's character
  bool drop_first = true;  // Metaspace: prepend_scheme is not "never"
  int64_t start = 0, stop = 0;
};

struct AddedToken {
  std::string content;
  int64_t id;
  bool special, single_word, lstrip, rstrip, normalized;
};

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, at)) {
    out.append(s, at, hit - at).append(to);
    at = hit + from.size();
  }
  return out.append(s, at, std::string::npos);
}

// Leftmost-longest matching of added tokens, as tokenizers' tries, with their flags: a byte trie,
// so a text costs its length times the longest token's at most, however many tokens share a
// prefix (20,000 added tokens starting with the same byte took seconds over 100 KB as a list).
class AddedMatcher {
 public:
  void add(const std::string& pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    int32_t node = 0;
    for (const char c : pattern) {
      const int32_t next = child(node, c);
      if (next >= 0) {
        node = next;
        continue;
      }
      nodes_[node].children.push_back({c, static_cast<int32_t>(nodes_.size())});
      node = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    if (nodes_[node].token == nullptr) nodes_[node].token = token;  // a repeat: the first one
  }

  void split(Piece piece, Pieces& out) const {
    const std::string& s = piece.text;
    size_t from = 0, i = 0;
    while (i < s.size()) {
      const AddedToken* hit = nullptr;  // the longest token starting at i
      size_t length = 0;
      int32_t node = 0;
      for (size_t j = i; j < s.size() && (node = child(node, s[j])) >= 0; ++j)
        if (nodes_[node].token != nullptr) hit = nodes_[node].token, length = j - i + 1;
      if (!hit) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + length;
      i = stop;
      const AddedToken& t = *hit;
      if (t.single_word && ((start > 0 && unicode::is_word(char_before(s, start))) ||
                            (stop < s.size() && unicode::is_word(unicode::chars(s.substr(stop, 4))[0].cp))))
        continue;  // not a word of its own: discarded, and the scan goes on after it
      while (t.lstrip && start > from && unicode::is_space(char_before(s, start))) start = previous(s, start);
      while (t.rstrip && stop < s.size() && unicode::is_space(unicode::chars(s.substr(stop, 4))[0].cp))
        stop += unicode::chars(s.substr(stop, 4))[0].len;
      if (start > from) out.push_back({s.substr(from, start - from), -1, piece.at_start && from == 0});
      out.push_back({s.substr(start, stop - start), t.id, false});
      from = i = stop;
    }
    if (from < s.size()) out.push_back({s.substr(from), -1, piece.at_start && from == 0});
  }

 private:
  static size_t previous(const std::string& s, size_t at) {
    do --at;
    while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80);
    return at;
  }
  static uint32_t char_before(const std::string& s, size_t at) {
    const size_t p = previous(s, at);
    return unicode::chars(s.substr(p, at - p))[0].cp;
  }

  int32_t child(int32_t node, char c) const {
    for (const auto& [byte, next] : nodes_[node].children)
      if (byte == c) return next;
    return -1;
  }

  struct Node {
    std::vector<std::pair<char, int32_t>> children;
    const AddedToken* token = nullptr;  // the token that ends here
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

void parse_normalizers(const json& j, std::vector<Normalizer>& out, const Refuse& refuse) {
  if (j.is_null()) return;
  const std::string type = j.at("type");
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) parse_normalizers(n, out, refuse);
  } else if (type == "NFC") {
    out.push_back({Normalizer::Type::kNfc, "", ""});
  } else if (type == "Prepend") {
    out.push_back({Normalizer::Type::kPrepend, j.at("prepend"), ""});
  } else if (type == "Replace") {
    if (!j.at("pattern").contains("String")) refuse("Replace normalizer with pattern " + j.at("pattern").dump());
    out.push_back({Normalizer::Type::kReplace, j.at("pattern").at("String"), j.at("content")});
  } else {
    refuse("normalizer " + type);
  }
}

void parse_decoders(const json& j, std::vector<Decoder>& out, const Refuse& refuse) {
  if (j.is_null()) return;
  const std::string type = j.at("type");
  Decoder d{};
  if (type == "Sequence") {
    for (const auto& n : j.at("decoders")) parse_decoders(n, out, refuse);
    return;
  } else if (type == "ByteLevel") {
    d.type = Decoder::Type::kByteLevel;
  } else if (type == "Metaspace") {
    d.type = Decoder::Type::kMetaspace;
    d.a = j.value("replacement", std::string("\xE2\x96\x81"));
    d.drop_first = j.value("prepend_scheme", std::string("always")) != "never" && j.value("add_prefix_space", true);
  } else if (type == "Replace") {
    if (!j.at("pattern").contains("String")) refuse("Replace decoder with pattern " + j.at("pattern").dump());
    d = {Decoder::Type::kReplace, j.at("pattern").at("String"), j.at("content")};
  } else if (type == "ByteFallback") {
    d.type = Decoder::Type::kByteFallback;
  } else if (type == "Fuse") {
    d.type = Decoder::Type::kFuse;
  } else if (type == "Strip") {
    d = {Decoder::Type::kStrip, j.at("content"), ""};
    d.start = j.at("start"), d.stop = j.at("stop");
    if (unicode::chars(d.a).size() != 1) refuse("Strip decoder content '" + d.a + "' (one character)");
  } else {
    refuse("decoder " + type);
  }
  out.push_back(std::move(d));
}

// How many times longer a step can make a text, at most (bytes out per byte in; what it prepends
// aside). A file chaining steps into an exponential blow-up (10,000 ByteLevel pre-tokenizers, a
// Replace of one byte by a megabyte) is refused at load instead of exhausting memory on the first
// prompt; the supported families' steps grow a text at most 6-fold.
constexpr double kMaxGrowth = 64;

double replace_growth(const std::string& from, const std::string& to) {
  return from.empty() ? 1.0 : std::max(1.0, static_cast<double>(to.size()) / static_cast<double>(from.size()));
}

double growth(const Normalizer& n) {
  return n.type == Normalizer::Type::kNfc ? 3.0 : n.type == Normalizer::Type::kReplace ? replace_growth(n.a, n.b) : 1.0;
}

double growth(const PreTokenizer& p) {
  return p.type == PreTokenizer::Type::kByteLevel ? 2.0
         : p.type == PreTokenizer::Type::kMetaspace ? std::max<double>(1.0, static_cast<double>(p.literal.size()))
                                                    : 1.0;
}

double growth(const Decoder& d) { return d.type == Decoder::Type::kReplace ? replace_growth(d.a, d.b) : 1.0; }

template <typename Step>
double total_growth(const std::vector<Step>& steps) {
  double g = 1.0;
  for (const Step& s : steps) g = std::min(g * growth(s), 1e300);
  return g;
}

// The ids a post-processor puts around one sequence (add_special_tokens).
void parse_post_processor(const json& j, std::vector<int64_t>& prefix, std::vector<int64_t>& suffix,
                          const Refuse& refuse, const Refuse& malformed) {
  if (j.is_null()) return;
  const std::string type = j.at("type");
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post_processor(p, prefix, suffix, refuse, malformed);
  } else if (type == "TemplateProcessing") {
    std::vector<int64_t> before, after;
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        if (seen_sequence || item.at("Sequence").at("id") != "A")
          refuse("TemplateProcessing single template " + j.at("single").dump().substr(0, 200) + " (one $A is read)");
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id");
      for (const auto& id : j.at("special_tokens").at(name).at("ids")) {
        if (!id.is_number_integer()) malformed("post-processor id " + id.dump() + " of '" + name + "' is not an integer");
        (seen_sequence ? after : before).push_back(id.get<int64_t>());
      }
    }
    if (!seen_sequence) refuse("TemplateProcessing single template without $A");
    prefix.insert(prefix.begin(), before.begin(), before.end());
    suffix.insert(suffix.end(), after.begin(), after.end());
  } else if (type != "ByteLevel") {
    refuse("post-processor " + type);
  }
}

// Text that ends inside a UTF-8 sequence keeps those bytes when `hold_tail` (streaming), else
// each ill-formed subpart reads as U+FFFD.
std::string lossy(const std::string& bytes, bool hold_tail) {
  if (!hold_tail) return unicode::sanitize(bytes);
  const size_t p = unicode::complete_prefix(bytes);
  return unicode::sanitize(std::string_view(bytes).substr(0, p)) + bytes.substr(p);
}

std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens, bool hold_tail) {
  const auto byte_of = [](const std::string& t) -> int {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>' || !std::isxdigit(t[3]) || !std::isxdigit(t[4]))
      return -1;
    return std::stoi(t.substr(3, 2), nullptr, 16);
  };
  std::vector<std::string> out;
  std::string run;
  size_t run_tokens = 0;
  const auto flush = [&](bool at_end) {
    if (run_tokens == 0) return;
    const size_t p = unicode::complete_prefix(run);
    if (unicode::sanitize(run) == run) out.push_back(run);
    else if (at_end && hold_tail && p < run.size() && unicode::sanitize(run.substr(0, p)) == run.substr(0, p))
      out.push_back(run);  // a character still arriving
    else for (size_t i = 0; i < run_tokens; ++i) out.push_back("\xEF\xBF\xBD");
    run.clear();
    run_tokens = 0;
  };
  for (const std::string& t : tokens) {
    const int b = byte_of(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      ++run_tokens;
      continue;
    }
    flush(false);
    out.push_back(t);
  }
  flush(true);
  return out;
}

std::vector<std::string> apply_decoder(const Decoder& d, std::vector<std::string> tokens, bool hold_tail) {
  switch (d.type) {
    case Decoder::Type::kByteLevel: {
      std::string bytes;
      for (const std::string& t : tokens) {
        std::string mapped;
        bool all = true;
        for (const unicode::Char& c : unicode::chars(t)) {
          const int b = byte_of_symbol(c.cp);
          if (b < 0) all = false;
          else mapped += static_cast<char>(b);
        }
        bytes += all ? mapped : t;
      }
      return {lossy(bytes, hold_tail)};
    }
    case Decoder::Type::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], d.a, i == 0 && d.drop_first ? "" : " ");
      return tokens;
    case Decoder::Type::kReplace:
      for (std::string& t : tokens) t = replace_all(t, d.a, d.b);
      return tokens;
    case Decoder::Type::kByteFallback:
      return byte_fallback(tokens, hold_tail);
    case Decoder::Type::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      return {all};
    }
    case Decoder::Type::kStrip:
      for (std::string& t : tokens) {
        int64_t n = 0;
        while (n < d.start && t.compare(0, d.a.size(), d.a) == 0) t.erase(0, d.a.size()), ++n;
        for (n = 0; n < d.stop && t.size() >= d.a.size() && t.compare(t.size() - d.a.size(), d.a.size(), d.a) == 0; ++n)
          t.erase(t.size() - d.a.size());
      }
      return tokens;
  }
  return tokens;
}

// tokenizer_config.json's "eos_token": "<|im_end|>" or {"content": "<|im_end|>", ...}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j.at("content").is_string()) return j.at("content");
  return "";
}

}  // namespace

struct Tokenizer::Impl {
  std::string path;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::unique_ptr<Bpe> model;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int64_t> added_ids;  // content -> id, as `added` holds them
  AddedMatcher raw_matcher, normalized_matcher;
  std::vector<int64_t> prefix, suffix;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<std::string> id_to_token;
  std::vector<int8_t> kind;  // 0: no token, 1: model token, 2: added, 3: special added
  std::unordered_set<std::string> special_contents;
  int64_t bos = -1;
  std::vector<int64_t> eos;

  std::string normalize(std::string s) const {
    for (const Normalizer& n : normalizers) {
      if (n.type == Normalizer::Type::kNfc) s = unicode::nfc(s);
      else if (n.type == Normalizer::Type::kPrepend) s = s.empty() ? s : n.a + s;
      else s = replace_all(s, n.a, n.b);
    }
    return s;
  }

  int64_t id_of(const std::string& token) const {
    const auto it = added_ids.find(token);
    return it != added_ids.end() ? it->second : model->id(token);
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special, bool hold_tail) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int64_t id : ids) {
      if (id < 0 || id >= static_cast<int64_t>(id_to_token.size()))
        throw ArgumentError("decode: id " + std::to_string(id) + " is not in the vocabulary [0, " +
                            std::to_string(id_to_token.size()) + ")");
      if (kind[id] == 0) continue;  // a hole in the ids: tokenizers skips it too
      if (skip_special && special_contents.count(id_to_token[id])) continue;
      tokens.push_back(id_to_token[id]);
    }
    if (!has_decoder) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    for (const Decoder& d : decoders) tokens = apply_decoder(d, std::move(tokens), hold_tail);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }
};

Tokenizer Tokenizer::load(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.path = path;
  const json j = parse_json(read_file(path, "the model directory needs its tokenizer"), path, "not a readable tokenizer");
  const Refuse refuse = [&](const std::string& what) { throw RunnerError(path + ": unsupported tokenizer: " + what); };
  const Refuse malformed = [&](const std::string& what) { throw RunnerError(path + ": malformed tokenizer: " + what); };
  try {
    if (!j.is_object()) malformed("expected a JSON object");
    if (j.contains("truncation") && !j.at("truncation").is_null()) refuse("truncation");
    if (j.contains("padding") && !j.at("padding").is_null()) refuse("padding");
    parse_normalizers(j.value("normalizer", json()), t.normalizers, refuse);
    t.pre_tokenizers = parse_pre_tokenizers(j.value("pre_tokenizer", json()), refuse);
    t.model = std::make_unique<Bpe>(j.at("model"), refuse, malformed);
    parse_post_processor(j.value("post_processor", json()), t.prefix, t.suffix, refuse, malformed);
    t.has_decoder = !j.value("decoder", json()).is_null();
    parse_decoders(j.value("decoder", json()), t.decoders, refuse);
    const double most = std::max(total_growth(t.normalizers) * total_growth(t.pre_tokenizers), total_growth(t.decoders));
    if (most > kMaxGrowth)
      refuse("steps that can make a text " + (most > 1e15 ? std::string("over 10^15") : std::to_string(std::llround(most))) +
             " times longer (normalizers and pre-tokenizers, or decoders; at most " + std::to_string(std::llround(kMaxGrowth)) +
             " times)");
    // Added tokens take the model's id when it has the content, else the next free id, as
    // tokenizers assigns them (the file's "id" fields are not read there either).
    const int64_t model_size = static_cast<int64_t>(t.model->vocab().size());
    int64_t max_added = -1;
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken tok{a.at("content"), -1, a.value("special", false), a.value("single_word", false),
                     a.value("lstrip", false), a.value("rstrip", false), a.value("normalized", !a.value("special", false))};
      tok.id = t.id_of(tok.content);
      if (tok.id < 0)
        tok.id = max_added < 0 ? model_size : max_added >= model_size || model_size == 0 ? max_added + 1 : model_size;
      else if (t.added_ids.count(tok.content) != 0)
        continue;
      max_added = std::max(max_added, tok.id);
      t.added_ids.emplace(tok.content, tok.id);
      t.added.push_back(tok);
    }
  } catch (const json::exception& e) {
    throw RunnerError(path + ": malformed tokenizer (" + e.what() + ")");
  }
  for (const AddedToken& a : t.added) {
    if (a.normalized) t.normalized_matcher.add(t.normalize(a.content), &a);
    else t.raw_matcher.add(a.content, &a);
    if (a.special) t.special_contents.insert(a.content);
  }
  int64_t size = 0;
  for (const auto& [token, id] : t.model->vocab()) size = std::max(size, id + 1);
  for (const AddedToken& a : t.added) size = std::max(size, a.id + 1);
  // The id table is as long as the largest id: bounded by the tokens the file holds, so that a
  // stray id (2^31 - 1) cannot size it.
  const int64_t tokens = static_cast<int64_t>(t.model->vocab().size() + t.added.size());
  if (size > tokens)
    throw RunnerError(path + ": malformed tokenizer: id " + std::to_string(size - 1) + " in a file of " +
                      std::to_string(tokens) + " tokens (ids are expected below the number of tokens)");
  t.id_to_token.assign(size, "");
  t.kind.assign(size, 0);
  for (const auto& [token, id] : t.model->vocab()) t.id_to_token[id] = token, t.kind[id] = 1;
  // A normalized added token decodes as its normalized text, as in tokenizers >= 0.23 ("<s>"
  // matched as "▁<s>" decodes so); skip_special_tokens compares that text with the special
  // tokens' contents, so such a token is not skipped there either.
  for (const AddedToken& a : t.added) {
    t.id_to_token[a.id] = a.normalized ? t.normalize(a.content) : a.content;
    t.kind[a.id] = a.special ? 3 : 2;
  }
  for (const std::vector<int64_t>* ids : {&t.prefix, &t.suffix})
    for (int64_t id : *ids)
      if (id < 0 || id >= size)
        throw RunnerError(path + ": malformed tokenizer: post-processor id " + std::to_string(id) + " (the vocabulary has " +
                          std::to_string(size) + " ids)");

  // BOS and EOS from the checkpoint's configuration files beside tokenizer.json, when present.
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  const auto config = [&](const std::string& name) -> json {
    const std::string config_path = dir + "/" + name;
    return file_exists(config_path) ? parse_json(read_file(config_path, "the tokenizer's configuration"), config_path)
                                    : json();
  };
  const json tok_config = config("tokenizer_config.json"), gen_config = config("generation_config.json");
  // Every id these files give is one of the vocabulary's, or an error naming the file and field:
  // an EOS dropped in silence would let generation run past the end of a turn.
  const auto config_id = [&](const json& value, const std::string& file, const std::string& field) -> int64_t {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= size)
      throw RunnerError(dir + "/" + file + ": " + field + " = " + value.dump().substr(0, 40) +
                        ": expected a token id in [0, " + std::to_string(size) + ")");
    return value.get<int64_t>();
  };
  const auto config_token = [&](const json& value, const std::string& field) -> int64_t {
    if (value.is_null()) return -1;
    const std::string text = token_text(value);
    const int64_t id = text.empty() ? -1 : t.id_of(text);
    if (id < 0)
      throw RunnerError(dir + "/tokenizer_config.json: " + field + " = " + value.dump().substr(0, 60) +
                        ": expected a token of " + path + " (its text, or {\"content\": text})");
    return id;
  };
  const auto add_eos = [&](int64_t id) {
    if (id >= 0 && std::find(t.eos.begin(), t.eos.end(), id) == t.eos.end()) t.eos.push_back(id);
  };
  if (!gen_config.is_null() && !gen_config.is_object())
    throw RunnerError(dir + "/generation_config.json: expected a JSON object");
  if (!tok_config.is_null() && !tok_config.is_object())
    throw RunnerError(dir + "/tokenizer_config.json: expected a JSON object");
  const json no_value;
  const json& gen_eos = gen_config.is_object() ? gen_config.value("eos_token_id", no_value) : no_value;
  if (gen_eos.is_array())
    for (size_t i = 0; i < gen_eos.size(); ++i)
      add_eos(config_id(gen_eos[i], "generation_config.json", "eos_token_id[" + std::to_string(i) + "]"));
  else if (!gen_eos.is_null())
    add_eos(config_id(gen_eos, "generation_config.json", "eos_token_id"));
  if (tok_config.is_object() && tok_config.contains("eos_token"))
    add_eos(config_token(tok_config.at("eos_token"), "eos_token"));
  if (t.eos.empty()) add_eos(t.id_of("<|endoftext|>"));
  const json& gen_bos = gen_config.is_object() ? gen_config.value("bos_token_id", no_value) : no_value;
  if (!gen_bos.is_null())
    t.bos = config_id(gen_bos, "generation_config.json", "bos_token_id");
  else if (tok_config.is_object() && tok_config.contains("bos_token"))
    t.bos = config_token(tok_config.at("bos_token"), "bos_token");
  Tokenizer out;
  out.impl_ = std::move(impl);
  return out;
}

Tokenizer Tokenizer::load_for_programs(const std::string& model_dir, int64_t program_vocab_size) {
  const std::string path = model_dir + "/tokenizer.json";
  Tokenizer t = load(path);
  if (t.vocab_size() > program_vocab_size)
    throw RunnerError(path + ": " + std::to_string(t.vocab_size()) + " tokens, more than the programs' vocabulary of " +
                      std::to_string(program_vocab_size));
  return t;
}

// Added tokens (raw ones first, then normalized ones in the normalized text between them),
// then the pre-tokenizers over the rest.
static Pieces words(const Tokenizer::Impl& t, const std::string& text) {
  Pieces raw, pieces;
  t.raw_matcher.split({unicode::sanitize(text), -1, true}, raw);
  for (Piece& p : raw) {
    if (p.token >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    p.text = t.normalize(std::move(p.text));
    t.normalized_matcher.split(std::move(p), pieces);
  }
  pre_tokenize(t.pre_tokenizers, pieces);
  return pieces;
}

std::vector<std::string> Tokenizer::pre_tokenize(const std::string& text) const {
  std::vector<std::string> out;
  for (Piece& p : words(*impl_, text)) out.push_back(std::move(p.text));
  return out;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const Impl& t = *impl_;
  const Pieces pieces = words(t, text);
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = t.prefix;
  for (const Piece& p : pieces) {
    if (p.token >= 0) ids.push_back(p.token);
    else t.model->encode(p.text, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens, /*hold_tail=*/false);
}

int64_t Tokenizer::token_id(const std::string& token) const { return impl_->id_of(token); }
int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_to_token.size()); }
int64_t Tokenizer::bos_id() const { return impl_->bos; }
const std::vector<int64_t>& Tokenizer::eos_ids() const { return impl_->eos; }

std::string TextStream::push(const std::vector<int64_t>& ids) {
  std::vector<int64_t> all = ids_;  // kept only once decoded: a refused id leaves the stream as it was
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string text = tokenizer_.impl_->decode(all, skip_special_, /*hold_tail=*/true);
  ids_ = std::move(all);
  const size_t complete = unicode::complete_prefix(text);
  if (complete <= printed_) return "";
  std::string out = text.substr(printed_, complete - printed_);
  printed_ = complete;
  return out;
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.impl_->decode(ids_, skip_special_, /*hold_tail=*/false);
  std::string out = text.size() > printed_ ? text.substr(printed_) : "";
  printed_ = text.size();
  return out;
}

}  // namespace spec_edge::runner
