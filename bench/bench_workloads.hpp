// streampool benchmarks: the workloads and the allocator adaptors they are templated on.
//
// Glossary
//   adaptor   a small per-thread object with allocate(bytes) / deallocate(p, bytes): one per
//             benchmark thread, so an adaptor that needs a stream creates it in its constructor
//             (each thread on its own stream). Adaptors for streampool, glibc malloc, and (in
//             gpu_pool_bench.cpp) cudaMalloc, cudaMallocAsync and PyTorch's caching allocator.
//   pair      one allocate followed by one deallocate of the same block.
//   mixed     the 1000-live pattern: 1000 live blocks of log-uniform sizes in [256 B, 4 MiB];
//             each step frees a randomly chosen live block and allocates a new one in its place
//             (fixed seed, so every allocator sees the same sequence). One step = one pair.
//
// Used by host_pool_bench.cpp (Google Benchmark) and gpu_pool_bench.cpp (own timing loop, no
// Google Benchmark dependency, so it builds on a GPU machine that has only the CUDA toolkit).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "streampool/streampool.hpp"

namespace streampool::bench {

/// The pair sizes of issue 2 and 3: 256 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB.
inline constexpr std::size_t pair_sizes[] = {256, 4096, 64u << 10, 1u << 20, 16u << 20};

/// The mixed pattern's precomputed sequence (identical for every allocator and thread).
struct mixed_pattern {
  static constexpr std::size_t live = 1000;
  static constexpr std::size_t min_bytes = 256;
  static constexpr std::size_t max_bytes = std::size_t{4} << 20;
  static constexpr std::size_t length = std::size_t{1} << 16;  // steps before the sequence wraps

  std::vector<std::size_t> initial;  // sizes of the first `live` blocks
  std::vector<std::uint32_t> slot;   // step i frees live[slot[i]] ...
  std::vector<std::size_t> size;     // ... and allocates size[i] in its place

  explicit mixed_pattern(std::uint64_t seed = 20261202) {
    std::mt19937_64 rng(seed);
    // Portable log-uniform: draw the exponent from 53 random bits, not from a distribution
    // object whose output differs between standard libraries.
    const double lo = std::log(static_cast<double>(min_bytes));
    const double hi = std::log(static_cast<double>(max_bytes));
    auto draw_size = [&] {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      const auto n = static_cast<std::size_t>(std::exp(lo + u * (hi - lo)));
      return n < min_bytes ? min_bytes : (n > max_bytes ? max_bytes : n);
    };
    initial.resize(live);
    for (auto& n : initial) n = draw_size();
    slot.resize(length);
    size.resize(length);
    for (std::size_t i = 0; i < length; ++i) {
      slot[i] = static_cast<std::uint32_t>(rng() % live);
      size[i] = draw_size();
    }
  }

  static const mixed_pattern& get() {
    static const mixed_pattern p;
    return p;
  }
};

/// Runs the mixed pattern on one adaptor: construct (fills 1000 live blocks), step() n times,
/// destroy (frees them all).
template <class Alloc>
class mixed_runner {
 public:
  explicit mixed_runner(Alloc& a) : a_(a), p_(mixed_pattern::get()) {
    ptr_.resize(mixed_pattern::live);
    bytes_.resize(mixed_pattern::live);
    for (std::size_t i = 0; i < mixed_pattern::live; ++i) {
      bytes_[i] = p_.initial[i];
      ptr_[i] = a_.allocate(bytes_[i]);
      live_ += bytes_[i];
    }
    peak_ = live_;
  }
  mixed_runner(const mixed_runner&) = delete;
  mixed_runner& operator=(const mixed_runner&) = delete;
  ~mixed_runner() {
    for (std::size_t i = 0; i < mixed_pattern::live; ++i) a_.deallocate(ptr_[i], bytes_[i]);
  }

  /// One free of a random live block plus one allocation in its place.
  void* step() {
    const std::size_t k = next_++ & (mixed_pattern::length - 1);
    const std::uint32_t s = p_.slot[k];
    a_.deallocate(ptr_[s], bytes_[s]);
    live_ -= bytes_[s];
    bytes_[s] = p_.size[k];
    ptr_[s] = a_.allocate(bytes_[s]);
    live_ += bytes_[s];
    if (live_ > peak_) peak_ = live_;
    return ptr_[s];
  }

  /// The most bytes this runner had live at once (as requested, before any rounding).
  [[nodiscard]] std::size_t peak_live() const noexcept { return peak_; }

 private:
  Alloc& a_;
  const mixed_pattern& p_;
  std::vector<void*> ptr_;
  std::vector<std::size_t> bytes_;
  std::size_t next_ = 0;
  std::size_t live_ = 0, peak_ = 0;
};

/// glibc malloc/free: the host reference.
struct malloc_allocator {
  static constexpr const char* name = "malloc";
  void* allocate(std::size_t n) { return std::malloc(n); }
  void deallocate(void* p, std::size_t /*n*/) { std::free(p); }
};

/// streampool on the device that `Device::get()` returns, on a stream of the adaptor's own.
template <class Device>
class pool_allocator {
 public:
  static constexpr const char* name = "streampool";
  pool_allocator() : pool_(Device::get().default_pool()), stream_(Device::get()) {}
  void* allocate(std::size_t n) { return pool_.allocate(stream_, n); }
  void deallocate(void* p, std::size_t /*n*/) { pool_.deallocate(stream_, p); }
  [[nodiscard]] const pool& get_pool() const noexcept { return pool_; }
  [[nodiscard]] stream_ref get_stream() const noexcept { return stream_; }

 private:
  pool pool_;
  stream stream_;  // destroyed first: hands its cache back to the pool
};

}  // namespace streampool::bench
