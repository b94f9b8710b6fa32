#include "streampool/stream.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/stream/access.hpp"

namespace streampool {

namespace {

// Per thread: the stream_scope stack (innermost last) and the default streams. The default
// streams are destroyed when the thread exits, after its scopes are gone, like the origin
// report's task-local streams; arrays that outlive them hold tokens, not streams.
struct thread_streams {
  std::vector<std::pair<std::uint64_t, const detail::stream_state*>> scopes;
  std::vector<std::pair<std::uint64_t, stream>> defaults;
};
thread_local thread_streams this_thread;

}  // namespace

stream::stream(const device& d) {
  backend& b = d.get_backend();
  native_queue q = b.create_queue();
  state_ = std::make_unique<detail::stream_state>(
      detail::stream_state{d, std::make_shared<timeline>(d.backend_ptr(), q), true});
}

stream stream::wrap(const device& d, native_queue foreign) {
  STREAMPOOL_EXPECTS(foreign != nullptr, "stream::wrap: null native queue");
  return stream(std::make_unique<detail::stream_state>(
      detail::stream_state{d, std::make_shared<timeline>(d.backend_ptr(), foreign), false}));
}

stream::stream(std::unique_ptr<detail::stream_state> s) : state_(std::move(s)) {}
stream::stream(stream&&) noexcept = default;  // leaves other.state_ null: moved-from

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    stream dying(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

stream::~stream() {
  if (!state_) return;
  // Waits for the stream's work, makes every token on it complete, and hands its cached blocks
  // back to their pools: after this nothing anywhere can reach the queue. Neither the marker nor
  // the wait is allowed while a capture is under way on the device (backend.hpp, begin_capture),
  // so a stream that owns its queue retires when the last capture ends, keeping the queue until
  // then. A wrapped queue is its owner's to destroy once we return, so its retirement cannot
  // wait: during a capture it throws logic_error, which ends the process here (release() throws
  // the same error to its caller instead).
  if (!state_->owns_queue) {
    (void)state_->line->retire();
    return;
  }
  backend& b = state_->dev.get_backend();
  b.run_outside_capture([s = std::shared_ptr<detail::stream_state>(std::move(state_))] {
    s->dev.get_backend().destroy_queue(s->line->retire());
  });
}

void stream::release() {
  if (!state_) return;
  if (state_->owns_queue) {
    stream dying(std::move(*this));  // the destructor: waits, then destroys the queue
    return;
  }
  // Throws (recording the marker failed) before the queue is dropped: the stream stays usable.
  // The queue is its owner's to destroy.
  (void)state_->line->close();
  state_.reset();
}

// ref() and the conversion to stream_ref are inline (stream.hpp): a test and a branch, and this
// only when the stream was moved from.
const detail::stream_state& stream::checked_state() const {
  STREAMPOOL_EXPECTS(state_ != nullptr, "stream: used after it was moved from");
  return *state_;
}
void stream::synchronize() const { ref().synchronize(); }
const std::shared_ptr<timeline>& stream::get_timeline() const { return checked_state().line; }
const device& stream::get_device() const { return checked_state().dev; }

token stream_ref::now() const { return token{state_->line, state_->line->current()}; }

void stream_ref::submit(const command& c) const { state_->dev.get_backend().submit(native(), c); }

void stream_ref::wait(const token& t) const {
  if (t.ready_for(state_->line.get())) return;
  if (state_->dev.get_backend().caps().device_wait) {
    t.line->wait_device(native(), t.at);
  } else {
    t.line->wait_host(t.at);
  }
}

void stream_ref::synchronize() const { state_->line->wait_host(state_->line->current()); }

stream_ref default_stream(const device& d) {
  for (auto& [id, s] : this_thread.defaults)
    if (id == d.id()) return s.ref();
  this_thread.defaults.emplace_back(d.id(), stream(d));
  return this_thread.defaults.back().second.ref();
}

stream_ref current_stream(const device& d) {
  const auto& scopes = this_thread.scopes;
  const auto innermost = std::find_if(scopes.rbegin(), scopes.rend(),
                                      [&](const auto& scope) { return scope.first == d.id(); });
  return innermost != scopes.rend() ? detail::access::make_ref(innermost->second)
                                    : default_stream(d);
}

stream_scope::stream_scope(stream_ref s) : device_id_(s.get_device().id()) {
  this_thread.scopes.emplace_back(device_id_, detail::access::state(s));
}

stream_scope::~stream_scope() { this_thread.scopes.pop_back(); }

}  // namespace streampool
