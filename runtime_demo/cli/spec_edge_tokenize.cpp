// spec-edge-tokenize TOKENIZER_JSON < text: the ids of the text, one line, space-separated;
// with --decode, ids on stdin become text. What the runner does to a prompt and to its output,
// on its own. --no-special: encode without the post-processor's tokens (BOS); --keep-special:
// decode special tokens too (the runner's text skips them).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "spec_edge/runner.h"
#include "spec_edge/tokenizer.h"

int main(int argc, char** argv) {
  bool decode = false, add_special = true, keep_special = false, usage = argc < 2;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--decode") decode = true;
    else if (flag == "--no-special") add_special = false;
    else if (flag == "--keep-special") keep_special = true;
    else usage = true;
  }
  if (usage) {
    std::fprintf(stderr, "usage: spec-edge-tokenize TOKENIZER_JSON [--no-special] < text\n"
                         "       spec-edge-tokenize TOKENIZER_JSON --decode [--keep-special] < ids\n");
    return 2;
  }
  try {
    const auto tokenizer = spec_edge::runner::Tokenizer::load(argv[1]);
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (decode) {
      std::vector<int64_t> ids;
      std::istringstream in(input);
      for (std::string word; in >> word;) {  // whitespace-separated decimal ids, nothing else
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || word.find_first_not_of("0123456789") != std::string::npos)
          throw spec_edge::runner::ArgumentError("stdin: expected whitespace-separated token ids (decimal "
                                                 "integers), got '" + word.substr(0, 40) + "'");
        ids.push_back(id);
      }
      const std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/!keep_special);
      std::fwrite(text.data(), 1, text.size(), stdout);  // NUL bytes included
    } else {
      for (int64_t id : tokenizer.encode(input, add_special)) std::printf("%lld ", static_cast<long long>(id));
      std::printf("\n");
    }
  } catch (const spec_edge::runner::RunnerError& e) {
    std::fprintf(stderr, "spec-edge-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
