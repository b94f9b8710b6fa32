// streampool: raising errors (include/streampool/error.hpp).
#include "streampool/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace streampool::detail {
namespace {

/// Where `marker` last starts a path component of `file`, or npos.
std::size_t last_component_start(std::string_view file, std::string_view marker) noexcept {
  for (std::size_t pos = file.rfind(marker); pos != std::string_view::npos;
       pos = pos == 0 ? std::string_view::npos : file.rfind(marker, pos - 1)) {
    if (pos == 0 || file[pos - 1] == '/') return pos;
  }
  return std::string_view::npos;
}

/// `file` (a __FILE__) named from the source tree's root: from the last "src/" or
/// "include/streampool/" that starts a component (src/core/pool/pool.cpp,
/// include/streampool/array.hpp), else its last component (a user's own file). __FILE__ is the
/// path the compiler was given, which build systems make absolute; trimming here, where every
/// message is made, covers the library's sources and the public headers' inline code compiled in
/// users' translation units alike, whatever flags those were built with. The last match wins so
/// that a checkout under a directory called src/ is named from its own src/.
const char* source_relative(const char* file) noexcept {
  if (file == nullptr) return "?";
  const std::string_view f(file);
  std::size_t best = std::string_view::npos;
  for (std::string_view marker :
       {std::string_view("src/"), std::string_view("include/streampool/")}) {
    const std::size_t pos = last_component_start(f, marker);
    if (pos != std::string_view::npos && (best == std::string_view::npos || pos > best)) best = pos;
  }
  if (best != std::string_view::npos) return file + best;
  const std::size_t slash = f.rfind('/');
  return slash == std::string_view::npos ? file : file + slash + 1;
}

}  // namespace

void throw_logic_error(const char* file, int line, const std::string& message) {
  throw logic_error(format("streampool: %s (%s:%d)", message.c_str(), source_relative(file), line));
}

std::string format_ptr(const void* p) { return format("%p", p); }

std::string vformat(const char* fmt, std::va_list args) {
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string format(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::string out;
  try {
    out = vformat(fmt, args);
  } catch (...) {  // out of memory: va_end must still run before leaving
    va_end(args);
    throw;
  }
  va_end(args);
  return out;
}

void assert_fail(const char* expr, const char* file, int line) noexcept {
  std::fprintf(stderr, "streampool: internal assertion failed: %s (%s:%d)\n", expr,
               source_relative(file), line);
  std::abort();
}

}  // namespace streampool::detail
