// The runner's errors, apart from the loop so that the tokenizer's tools link without it.
#include "spec_edge/runner.h"
#include "tokenizer/unicode.h"

namespace spec_edge::runner {

RunnerError::RunnerError(const std::string& what) : std::runtime_error(unicode::sanitize(what)) {}

}  // namespace spec_edge::runner
