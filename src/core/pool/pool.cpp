#include "streampool/pool.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "core/pool/pool_state.hpp"
#include "streampool/snapshot.hpp"

namespace streampool {

namespace {
[[noreturn, gnu::cold, gnu::noinline]] void used_after_move() {
  STREAMPOOL_FAIL("pool: used after it was moved from");
}

// The pool behind a handle, or logic_error for a moved-from handle. A null check and nothing
// else: it is on the allocate/deallocate fast path, where a message built inline would make the
// compiler call this out of line.
detail::pool_state& checked(const std::shared_ptr<detail::pool_state>& state) {
  if (state == nullptr) [[unlikely]]
    used_after_move();
  return *state;
}
}  // namespace

pool::pool(const device& d, pool_options options)
    : state_(std::make_shared<detail::pool_state>(d, options)) {}

void* pool::allocate(stream_ref s, std::size_t bytes) { return checked(state_).allocate(s, bytes); }
void pool::deallocate(stream_ref s, void* p) { checked(state_).deallocate(s, p); }
void pool::deallocate(void* p, std::span<const token> uses) { checked(state_).deallocate(p, uses); }
void pool::record_use(void* p, const token& use) { checked(state_).record_use(p, use); }
void pool::record_use(void* p, stream_ref s) {
  detail::pool_state& state = checked(state_);
  token use = s.now();
  use.at = token::at_free;
  state.record_use(p, use);
}
std::size_t pool::block_size(const void* p) const { return checked(state_).block_size(p); }
// A moved-from pool owns nothing: the one query with an answer for an empty handle.
bool pool::owns(const void* p) const noexcept { return state_ != nullptr && state_->owns(p); }
std::size_t pool::trim() { return checked(state_).trim(); }
void pool::set_memory_limit(std::size_t bytes) { checked(state_).set_memory_limit(bytes); }
std::size_t pool::memory_limit() const { return checked(state_).memory_limit(); }
std::uint64_t pool::add_reclaim_hook(std::function<void(std::size_t)> hook) {
  return checked(state_).add_reclaim_hook(std::move(hook));
}
void pool::remove_reclaim_hook(std::uint64_t id) { checked(state_).remove_reclaim_hook(id); }
pool_statistics pool::statistics() const { return checked(state_).statistics(); }
void pool::reset_peak_statistics() { checked(state_).reset_peaks(); }
pool_snapshot pool::snapshot() const { return checked(state_).snapshot(); }
device pool::get_device() const { return checked(state_).get_device(); }
std::uint64_t pool::id() const { return checked(state_).id(); }
std::uint64_t pool::device_id() const { return checked(state_).device_id(); }
void pool::start_recording(const std::string& path) {
  checked(state_).start_recording(path, nullptr);
}
void pool::start_recording(const std::string& path, stream_ref default_stream) {
  detail::pool_state& state = checked(state_);
  STREAMPOOL_EXPECTS(
      default_stream.get_device().id() == state.device_id(),
      detail::format("start_recording: the default stream (timeline %llu) belongs to device "
                     "%llu, but pool %llu allocates on device %llu",
                     static_cast<unsigned long long>(default_stream.get_timeline().id()),
                     static_cast<unsigned long long>(default_stream.get_device().id()),
                     static_cast<unsigned long long>(state.id()),
                     static_cast<unsigned long long>(state.device_id())));
  state.start_recording(path, &default_stream.get_timeline());
}
std::uint64_t pool::stop_recording() { return checked(state_).stop_recording(); }
void pool::record_phase(std::string_view name) { checked(state_).record_phase(name); }

std::size_t parse_memory_limit(const char* text, std::size_t device_total) {
  STREAMPOOL_EXPECTS(text != nullptr, "memory limit: no text");
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  const auto bad = [&] {
    STREAMPOOL_FAIL(
        detail::format("memory limit '%s' is not bytes (\"123\", \"64M\", \"2G\") or a "
                       "percentage of the device (\"80%%\")",
                       text));
  };
  if (end == text || !(value >= 0) || !std::isfinite(value)) bad();
  while (*end == ' ') ++end;
  double bytes = value;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case '\0':
      break;
    case 'K':
      bytes *= 1024.0;
      ++end;
      break;
    case 'M':
      bytes *= 1024.0 * 1024;
      ++end;
      break;
    case 'G':
      bytes *= 1024.0 * 1024 * 1024;
      ++end;
      break;
    case 'T':
      bytes *= 1024.0 * 1024 * 1024 * 1024;
      ++end;
      break;
    case '%':
      STREAMPOOL_EXPECTS(device_total != 0,
                         detail::format("memory limit '%s' is a percentage, but the device size "
                                        "is unknown",
                                        text));
      STREAMPOOL_EXPECTS(value <= 100.0, detail::format("memory limit '%s' is over 100%%", text));
      bytes = value / 100.0 * static_cast<double>(device_total);
      ++end;
      break;
    default:
      bad();
  }
  if (*end == 'i' || *end == 'I') ++end;  // "64MiB"
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') bad();
  // 0 means "no limit" everywhere a limit is set, so a limit that only rounds to 0 ("0.5",
  // "1e-9G", "0.00001%") must not quietly become that; nor may one past what size_t holds wrap or
  // saturate into another number. 2^64 as a double is exact, so the compare is too.
  constexpr double beyond = 18446744073709551616.0;  // 2^64
  STREAMPOOL_EXPECTS(bytes < beyond,
                     detail::format("memory limit '%s' is %.6g bytes, more than a size can hold "
                                    "(at most %zu)",
                                    text, bytes, SIZE_MAX));
  STREAMPOOL_EXPECTS(value == 0 || bytes >= 1.0,
                     detail::format("memory limit '%s' is %.6g bytes, less than one byte (\"0\" "
                                    "means no limit)",
                                    text, bytes));
  return static_cast<std::size_t>(bytes);
}

}  // namespace streampool
