// Files the runner needs: a RunnerError naming the file, why it cannot be read (missing, not a
// file, permission) and why it is needed.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "spec_edge/runner.h"

namespace spec_edge::runner {

inline std::ifstream open_file(const std::string& path, const std::string& needed_for) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RunnerError(path + ": is a directory, expected a file (" + needed_for + ")");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;  // set by open(2) under the stream
    if (error == 0 || error == ENOENT || error == ENOTDIR) throw RunnerError(path + ": not found (" + needed_for + ")");
    throw RunnerError(path + ": cannot be read: " + std::strerror(error) + " (" + needed_for + ")");
  }
  return in;
}

// Whether an optional file is there at all: one that is there but unreadable is an error when
// read, never taken for absent.
inline bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

inline std::string read_file(const std::string& path, const std::string& needed_for) {
  std::ifstream in = open_file(path, needed_for);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw RunnerError(path + ": cannot be read: " + std::strerror(errno) + " (" + needed_for + ")");
  return s.str();
}

}  // namespace spec_edge::runner
