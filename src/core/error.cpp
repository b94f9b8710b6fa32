#include "streampool/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace streampool::detail {

void throw_logic_error(const char* file, int line, const std::string& message) {
  throw logic_error(format("streampool: %s (%s:%d)", message.c_str(), file, line));
}

std::string format_ptr(const void* p) { return format("%p", p); }

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

void assert_fail(const char* expr, const char* file, int line) noexcept {
  std::fprintf(stderr, "streampool: internal assertion failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
}

}  // namespace streampool::detail
