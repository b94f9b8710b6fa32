#include "streampool/detail/buffer.hpp"

#include <cstdio>

namespace streampool::detail {

buffer::buffer(pool p, stream_ref s, std::size_t bytes)
    : device_(s.get_device()), pool_(std::move(p)), ptr_(nullptr), bytes_(bytes) {
  if (bytes != 0) {
    ptr_ = pool_->allocate(s, bytes);
    // Memory fresh from the pool is already ordered for s; the first writer is s itself.
    last_write_ = s.now();
  }
}

buffer::buffer(device d, void* foreign, std::size_t bytes)
    : device_(std::move(d)), ptr_(foreign), bytes_(bytes) {
  STREAMPOOL_EXPECTS(foreign != nullptr || bytes == 0,
                     format("wrap: null pointer with %zu bytes", bytes));
}

buffer::~buffer() {
  if (!pool_ || ptr_ == nullptr) return;
  std::vector<token> tokens = reads_;
  tokens.push_back(last_write_);
  try {
    pool_->deallocate(ptr_, tokens);
  } catch (const std::exception& e) {
    // Cannot happen for memory this buffer allocated; if it does, say so rather than terminate
    // in a destructor (which may be a finaliser on a foreign thread).
    std::fprintf(stderr, "streampool: array free failed: %s\n", e.what());
  }
}

void buffer::acquire(stream_ref s, bool write) {
  check_same_device(device_, s, "array operation");
  std::lock_guard lock(mu_);
  if (last_write_.line) s.wait(last_write_);
  if (write)
    for (const token& r : reads_) s.wait(r);
}

void buffer::release(stream_ref s, bool write) {
  token now = s.now();
  std::lock_guard lock(mu_);
  if (write) {
    last_write_ = std::move(now);
    reads_.clear();
    return;
  }
  for (token& r : reads_) {
    if (r.line == now.line) {
      r.at = now.at;
      return;
    }
  }
  // Drop reads that are complete, so the list stays as short as the set of busy streams.
  std::erase_if(reads_, [](const token& r) { return r.ready_for(nullptr); });
  reads_.push_back(std::move(now));
}

std::vector<token> buffer::uses() const {
  std::lock_guard lock(mu_);
  std::vector<token> t = reads_;
  if (last_write_.line) t.push_back(last_write_);
  return t;
}

void check_same_device(const device& d, stream_ref s, const char* what) {
  STREAMPOOL_EXPECTS(s.get_device() == d,
                     format("%s: memory of device %llu used on a stream of device %llu", what,
                            static_cast<unsigned long long>(d.id()),
                            static_cast<unsigned long long>(s.get_device().id())));
}

}  // namespace streampool::detail
