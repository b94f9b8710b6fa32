// streampool: the environment variables, read here only (environment.hpp).
#include "core/support/environment.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "streampool/error.hpp"
#include "streampool/pool.hpp"

namespace streampool::detail::environment {
namespace {

constexpr std::array names{
    "STREAMPOOL_MEMORY_LIMIT",
    "STREAMPOOL_BIASED_LOCKS",
    "STREAMPOOL_CUDA_VIRTUAL_MEMORY",
    "STREAMPOOL_CUDA_VM_GRANULARITY",
    "STREAMPOOL_CUDA_IPC",
    "STREAMPOOL_LEVEL_ZERO_VIRTUAL_MEMORY",
    "STREAMPOOL_LEVEL_ZERO_VM_GRANULARITY",
    "STREAMPOOL_TORCH_BACKEND",
    "STREAMPOOL_TORCH_PER_STREAM",
    "STREAMPOOL_TORCH_TRACE",
};
static_assert(names.size() == static_cast<std::size_t>(variable::torch_trace) + 1,
              "one name per variable");

[[noreturn]] void invalid(variable v, const std::string& value, const char* expected) {
  throw logic_error(format("streampool: %s=\"%s\": %s", name(v), value.c_str(), expected));
}

}  // namespace

const char* name(variable v) noexcept { return names[static_cast<std::size_t>(v)]; }

std::optional<std::string> text(variable v) {
  const char* value = std::getenv(name(v));
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool flag(variable v, bool fallback) {
  const std::optional<std::string> value = text(v);
  if (!value) return fallback;
  std::string lower = *value;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "on" || lower == "yes") return true;
  if (lower == "0" || lower == "false" || lower == "off" || lower == "no") return false;
  invalid(v, *value, "must be one of 1, true, on, yes, 0, false, off, no");
}

std::size_t power_of_two_bytes(variable v, std::size_t fallback, std::size_t min) {
  const std::optional<std::string> value = text(v);
  if (!value) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long bytes = std::strtoull(value->c_str(), &end, 0);
  if (errno != 0 || end == value->c_str() || *end != '\0' || bytes < min ||
      (bytes & (bytes - 1)) != 0) {
    invalid(v, *value, format("must be a power of two of at least %zu bytes", min).c_str());
  }
  return static_cast<std::size_t>(bytes);
}

std::size_t memory_limit(std::size_t device_total) {
  const std::optional<std::string> value = text(variable::memory_limit);
  if (!value) return 0;
  try {
    return parse_memory_limit(value->c_str(), device_total);
  } catch (const logic_error& e) {
    // Name the variable: the pool is made far from where the environment was set.
    invalid(variable::memory_limit, *value, e.what());
  }
}

}  // namespace streampool::detail::environment
