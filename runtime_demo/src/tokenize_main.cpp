// spec-edge-tokenize TOKENIZER_JSON < text: the ids of the text, one line, space-separated;
// with --decode, ids on stdin become text. What the runner does to a prompt, on its own.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "spec_edge/runner.h"
#include "spec_edge/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "--decode")) {
    std::fprintf(stderr, "usage: spec-edge-tokenize TOKENIZER_JSON [--decode] < input\n");
    return 2;
  }
  try {
    const auto tokenizer = spec_edge::runner::Tokenizer::load(argv[1]);
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (argc == 3) {
      std::vector<int64_t> ids;
      std::istringstream in(input);
      for (int64_t id; in >> id;) ids.push_back(id);
      std::fputs(tokenizer.decode(ids).c_str(), stdout);
    } else {
      for (int64_t id : tokenizer.encode(input)) std::printf("%lld ", static_cast<long long>(id));
      std::printf("\n");
    }
  } catch (const spec_edge::runner::RunnerError& e) {
    std::fprintf(stderr, "spec-edge-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
