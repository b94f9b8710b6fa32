// streampool: streams.
//
// Glossary
//   stream          an owning handle of one in-order queue on a device, and of the queue's
//                   timeline. Move-only. Destroying it waits for its submitted work, retires the
//                   timeline and destroys the queue; tokens taken on it stay valid (they are
//                   complete).
//   stream_ref      a non-owning view of a stream, passed by value. Valid while the stream lives.
//   default stream  one per (thread, device), created on first use and destroyed when its thread
//                   exits: the C++ form of the task-local streams of the origin report.
//   current stream  what array operations use: the innermost stream_scope on this thread for the
//                   device, else the thread's default stream.
#pragma once

#include <memory>

#include "streampool/detail/stream_state.hpp"
#include "streampool/device.hpp"
#include "streampool/timeline.hpp"

namespace streampool {

class stream_ref;
namespace detail {
struct access;
}

/// A moved-from stream owns nothing (no queue, no timeline): destroying it or assigning it a new
/// stream does nothing else, and every other operation (ref, the conversion to stream_ref,
/// synchronize, get_timeline, get_device) throws logic_error "stream: used after it was moved
/// from" (a stream has no empty state that such a call could report on). Moving leaves the
/// source in that state; self-move-assignment keeps the stream.
class STREAMPOOL_EXPORT stream {
 public:
  /// A new stream with its own queue on `d`.
  explicit stream(const device& d);
  /// Wraps a queue created elsewhere (a user's CUDA stream). streampool never destroys it; the
  /// wrapper's destruction only waits for work submitted so far and retires the timeline. The
  /// wrapper borrows the queue: destroy it before the queue's owner destroys the queue (the
  /// wrapper may record markers on the queue while it lives). Tokens taken through it stay valid
  /// after both are gone (they are complete).
  static stream wrap(const device& d, native_queue foreign);

  /// Ends the stream now, without waiting for its work: for a wrapped queue that its owner is
  /// about to destroy (frameworks that destroy streams in a finalizer, without waiting). Records
  /// a last marker on the queue and never touches the queue again, so the owner may destroy it
  /// as soon as this returns. Memory freed on the stream goes back to its pools behind that
  /// marker; tokens on it complete when the marker does. A stream that owns its queue is
  /// destroyed as by the destructor, which waits (a backend destroys only idle queues). Leaves
  /// the stream moved-from; nothing happens on one that already is.
  void release();

  stream(stream&&) noexcept;
  stream& operator=(stream&&) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream();

  /// @throws logic_error on a moved-from stream (so do the four below)
  [[nodiscard]] stream_ref ref() const;
  operator stream_ref() const;  // NOLINT(google-explicit-constructor): like a view
  /// Blocks until all work submitted so far has completed.
  void synchronize() const;
  [[nodiscard]] const std::shared_ptr<timeline>& get_timeline() const;
  [[nodiscard]] const device& get_device() const;

 private:
  explicit stream(std::unique_ptr<detail::stream_state> s);
  /// *state_, or logic_error when moved from.
  [[nodiscard]] const detail::stream_state& checked_state() const;
  std::unique_ptr<detail::stream_state> state_;  // null once moved from
};

class STREAMPOOL_EXPORT stream_ref {
 public:
  stream_ref(int) = delete;             // NOLINT: closes off stream_ref(0)
  stream_ref(std::nullptr_t) = delete;  // NOLINT

  [[nodiscard]] const device& get_device() const noexcept { return state_->dev; }
  [[nodiscard]] timeline& get_timeline() const noexcept { return *state_->line; }
  [[nodiscard]] const std::shared_ptr<timeline>& timeline_ptr() const noexcept {
    return state_->line;
  }
  [[nodiscard]] native_queue native() const noexcept { return state_->line->queue_for_submit(); }
  /// A token covering all work submitted to the stream so far.
  [[nodiscard]] token now() const;
  /// Enqueues a command.
  void submit(const command& c) const;
  /// Orders this stream after `t` (device-side wait where the backend can). No-op when t is
  /// ready for this stream.
  void wait(const token& t) const;
  void synchronize() const;

  friend bool operator==(stream_ref a, stream_ref b) noexcept { return a.state_ == b.state_; }

 private:
  friend class stream;
  friend struct detail::access;
  explicit stream_ref(const detail::stream_state* s) noexcept : state_(s) {}
  const detail::stream_state* state_;
};

// Inline: every pool call made with a stream converts it, and out of line each conversion would
// be a call through the library's PLT (docs/performance.md, "The small path").
inline stream_ref stream::ref() const {
  if (state_ == nullptr) [[unlikely]]
    (void)checked_state();  // throws
  return stream_ref(state_.get());
}
inline stream::operator stream_ref() const { return ref(); }

/// The calling thread's current stream on `d` (see glossary).
[[nodiscard]] STREAMPOOL_EXPORT stream_ref current_stream(const device& d);
/// The calling thread's default stream on `d`, created on first use.
[[nodiscard]] STREAMPOOL_EXPORT stream_ref default_stream(const device& d);

/// Makes `s` the current stream of its device on this thread until the scope ends. Nests.
class STREAMPOOL_EXPORT stream_scope {
 public:
  explicit stream_scope(stream_ref s);
  stream_scope(const stream_scope&) = delete;
  stream_scope& operator=(const stream_scope&) = delete;
  ~stream_scope();

 private:
  std::uint64_t device_id_;
};

}  // namespace streampool
