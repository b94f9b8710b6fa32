// streampool: the untyped storage behind arrays (array.hpp is the typed face).
//
// Glossary
//   buffer     one piece of device memory, shared by every array view of it; freed (through the
//              pool, with its tokens) when the last view dies, on whatever thread that happens.
//   last write the token of the last operation that wrote it; readers on any stream wait for it.
//   reads      tokens of reads since that write, one per timeline; a writer waits for them all.
//   acquire    before an operation on stream s: make s wait (on the device) for what the
//              operation conflicts with. This is the origin report's take-ownership step, but
//              through tokens: it never needs the earlier stream to exist.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "streampool/device.hpp"
#include "streampool/pool.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

class STREAMPOOL_EXPORT buffer {
 public:
  /// Allocates `bytes` from `p` for first use on `s` (bytes may be 0: no memory).
  buffer(pool p, stream_ref s, std::size_t bytes);
  /// Wraps memory the caller owns; never freed by streampool.
  buffer(device d, void* foreign, std::size_t bytes);
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  /// Frees through the pool with the buffer's tokens. Never blocks; safe on any thread.
  ~buffer();

  [[nodiscard]] void* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] const device& get_device() const noexcept { return device_; }
  [[nodiscard]] bool owned() const noexcept { return pool_.has_value(); }

  void acquire(stream_ref s, bool write);
  void release(stream_ref s, bool write);
  /// The tokens a host reader or a new owner must wait for (last write and reads).
  [[nodiscard]] std::vector<token> uses() const;

 private:
  device device_;
  std::optional<pool> pool_;  // empty for wrapped memory
  void* ptr_;
  std::size_t bytes_;
  mutable std::mutex mu_;  // guards last_write_ and reads_
  token last_write_;
  std::vector<token> reads_;
};

/// Checks that `s` may touch memory of `d`, naming both devices otherwise.
STREAMPOOL_EXPORT void check_same_device(const device& d, stream_ref s, const char* what);

}  // namespace streampool::detail
