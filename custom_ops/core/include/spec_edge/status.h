// A status with a message: the core never throws and never aborts on bad input.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace spec_edge {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,  // a value or shape the op's contract does not allow
  kInvalidDType = 2,     // a dtype the op does not support
  kDeviceError = 3,      // the device runtime failed (CUDA builds)
};

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }

  // printf-style message; names the argument and what was expected.
  static Status error(Code code, const char* fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
  {
    Status s;
    s.code_ = code;
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(s.message_, sizeof(s.message_), fmt, args);
    va_end(args);
    return s;
  }

  bool is_ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const char* message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  char message_[320] = {0};
};

#define SPEC_EDGE_RETURN_IF_ERROR(expr)      \
  do {                                       \
    ::spec_edge::Status _s = (expr);         \
    if (!_s.is_ok()) return _s;              \
  } while (0)

}  // namespace spec_edge
