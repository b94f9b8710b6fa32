// streampool: the pinned staging ring of the CUDA backend.
//
// Glossary
//   staging ring  one pinned (page-locked) host buffer, allocated on the first upload, handed out
//                 in order as spans. An upload from pageable memory copies its source into a span,
//                 enqueues the DMA from the span and records an event after it; the span is free
//                 again once that event completes.
//   span          [begin, end) of the ring, with its state: being filled by a thread, or recorded
//                 (the DMA and its event are enqueued).
//
// Why not cuMemcpyHtoDAsync straight from pageable memory: the driver documents only that such a
// copy "might be synchronous with respect to host" and "may" stage the copy, so it does not
// promise that the source is no longer read once the call returns, which the backend contract
// (backend.hpp, submit) requires. Staging ourselves makes that guarantee explicit and keeps the
// call asynchronous for the device.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

#include "driver.hpp"

namespace streampool::detail {

class staging_ring {
 public:
  /// `capacity` bytes of pinned memory, allocated on first use; uploads are cut into pieces of at
  /// most capacity / 4 so that copying one piece overlaps the DMA of the previous ones.
  staging_ring(const cu::driver& d, std::size_t capacity) noexcept;
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;
  /// Precondition: every upload has completed (all queues that used the ring were drained).
  ~staging_ring();

  /// Enqueues on `s` a copy of `bytes` bytes from pageable `src` to device `dst`. On return `src`
  /// is no longer read. The calling thread must have the context of `s` current. Returns the first
  /// failing CUresult (0 on success).
  cu::result upload(cu::deviceptr dst, const void* src, std::size_t bytes, cu::stream s);

 private:
  enum class span_state : unsigned char { filling, recorded, done };
  struct span {
    std::size_t begin, end;
    cu::event ev;
    span_state state;
  };

  cu::result reserve_locked(std::unique_lock<std::mutex>& lk, std::size_t n, span*& out);
  bool fits_locked(std::size_t n, std::size_t& off) const;
  void reclaim_locked();

  const cu::driver& d_;
  const std::size_t capacity_;
  const std::size_t max_piece_;

  std::mutex mu_;                   // guards everything below
  std::condition_variable filled_;  // a span left the `filling` state
  char* base_ = nullptr;            // pinned, capacity_ bytes; nullptr until the first upload
  std::deque<span> spans_;          // in allocation order (ring order); deque keeps span* stable
  std::vector<cu::event> idle_events_;
};

}  // namespace streampool::detail
