// Files the runner needs: a RunnerError naming the file and why it is needed when one is missing.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "spec_edge/runner.h"

namespace spec_edge::runner {

inline std::ifstream open_file(const std::string& path, const std::string& needed_for) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RunnerError(path + ": not found (" + needed_for + ")");
  return in;
}

inline bool file_exists(const std::string& path) { return static_cast<bool>(std::ifstream(path, std::ios::binary)); }

inline std::string read_file(const std::string& path, const std::string& needed_for) {
  std::ifstream in = open_file(path, needed_for);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace spec_edge::runner
