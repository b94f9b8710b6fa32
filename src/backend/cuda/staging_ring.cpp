// streampool: the pinned staging ring (see staging_ring.hpp).
#include "staging_ring.hpp"

#include <algorithm>
#include <cstring>

namespace streampool::detail {

staging_ring::staging_ring(const cu::driver& d, std::size_t capacity) noexcept
    : d_(d), capacity_(capacity), max_piece_(std::max<std::size_t>(capacity / 4, 1)) {}

staging_ring::~staging_ring() {
  // Errors are ignored: at process exit the driver may already be gone (CUDA_ERROR_DEINITIALIZED)
  // and then so is everything it owned.
  for (const span& s : spans_) {
    if (s.state == span_state::recorded) (void)d_.event_synchronize(s.ev);
    (void)d_.event_destroy(s.ev);
  }
  for (cu::event e : idle_events_) (void)d_.event_destroy(e);
  if (base_ != nullptr) (void)d_.mem_free_host(base_);
}

bool staging_ring::fits_locked(std::size_t n, std::size_t& off) const {
  if (spans_.empty()) {
    off = 0;
    return n <= capacity_;
  }
  const span& front = spans_.front();
  const span& back = spans_.back();
  if (back.begin >= front.begin) {  // not wrapped: used space is [front.begin, back.end)
    if (back.end + n <= capacity_) {
      off = back.end;
      return true;
    }
    if (n <= front.begin) {  // wrap to the start
      off = 0;
      return true;
    }
    return false;
  }
  // Wrapped: used space is [front.begin, capacity) + [0, back.end).
  if (back.end + n <= front.begin) {
    off = back.end;
    return true;
  }
  return false;
}

void staging_ring::reclaim_locked() {
  while (!spans_.empty()) {
    span& f = spans_.front();
    if (f.state == span_state::filling) return;
    if (f.state == span_state::recorded && d_.event_query(f.ev) == cu::error_not_ready) return;
    // Done, or the query failed: a failed event cannot be waited on any more, and the stream's
    // error surfaces on the caller's own markers.
    idle_events_.push_back(f.ev);
    spans_.pop_front();
  }
}

cu::result staging_ring::reserve_locked(std::unique_lock<std::mutex>& lk, std::size_t n,
                                        span*& out) {
  if (base_ == nullptr) {
    void* p = nullptr;
    const cu::result r = d_.mem_alloc_host(&p, capacity_);
    if (r != cu::success) return r;
    base_ = static_cast<char*>(p);
  }
  for (;;) {
    reclaim_locked();
    std::size_t off = 0;
    if (fits_locked(n, off)) {
      cu::event ev = nullptr;
      if (!idle_events_.empty()) {
        ev = idle_events_.back();
        idle_events_.pop_back();
      } else {
        const cu::result r = d_.event_create(&ev, cu::event_disable_timing);
        if (r != cu::success) return r;
      }
      spans_.push_back(span{off, off + n, ev, span_state::filling});
      out = &spans_.back();
      return cu::success;
    }
    span& f = spans_.front();  // non-empty: an empty ring fits any piece
    if (f.state == span_state::recorded) {
      // Wait for the oldest DMA without holding the lock. The event stays valid (events are only
      // destroyed with the ring); if another thread reclaims and re-records it meanwhile, we
      // merely wait for a later copy.
      cu::event ev = f.ev;
      lk.unlock();
      (void)d_.event_synchronize(ev);
      lk.lock();
    } else {
      filled_.wait(lk);  // the oldest span is still being filled by another thread
    }
  }
}

cu::result staging_ring::upload(cu::deviceptr dst, const void* src, std::size_t bytes,
                                cu::stream s) {
  const auto* from = static_cast<const char*>(src);
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, max_piece_);
    span* sp = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      const cu::result r = reserve_locked(lk, n, sp);
      if (r != cu::success) return r;
    }
    // Filling happens outside the lock so that several threads stage concurrently; the span is
    // ours alone while it is `filling`.
    char* pinned = base_ + sp->begin;
    std::memcpy(pinned, from, n);
    cu::result r = d_.memcpy_htod_async(dst, pinned, n, s);
    span_state state = span_state::done;  // nothing in flight if the copy was refused
    if (r == cu::success) {
      r = d_.event_record(sp->ev, s);
      if (r == cu::success) {
        state = span_state::recorded;
      } else {
        // The DMA is enqueued but we cannot track it: wait for it before the span is reused.
        (void)d_.stream_synchronize(s);
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      sp->state = state;
    }
    filled_.notify_all();
    if (r != cu::success) return r;
    from += n;
    dst += n;
    bytes -= n;
  }
  return cu::success;
}

}  // namespace streampool::detail
