#include "model/hb_oracle.hpp"

#include <algorithm>
#include <cstdio>

#include "streampool/error.hpp"

namespace streampool::model {
namespace {

std::uint64_t at(const vclock& v, std::uint32_t i) { return i < v.size() ? v[i] : 0; }

void merge(vclock& into, const vclock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void note(std::vector<hb_oracle::use>& uses, hb_oracle::use u) {
  for (auto& x : uses) {
    if (x.queue == u.queue) {
      x.clock = std::max(x.clock, u.clock);
      return;
    }
  }
  uses.push_back(u);
}

// The byte a fill leaves in every position, or -1 when its pattern is not one repeated byte.
int fill_value(const fill_command& f) {
  const auto b = static_cast<int>(f.pattern & 0xFF);
  for (std::size_t i = 1; i < f.element_size; ++i)
    if (static_cast<int>((f.pattern >> (8 * i)) & 0xFF) != b) return -1;
  return b;
}

std::string range(std::uintptr_t b, std::uintptr_t e) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%#llx, +%llu)", static_cast<unsigned long long>(b),
                static_cast<unsigned long long>(e - b));
  return buf;
}

}  // namespace

std::uint32_t hb_oracle::index_locked(native_queue q) {
  auto it = queues_.find(q);
  if (it != queues_.end()) return it->second;
  // A queue the oracle never saw created: name it anyway so the report stays readable.
  violation_locked("oracle: unknown queue " + std::to_string(reinterpret_cast<std::uintptr_t>(q)));
  const auto i = static_cast<std::uint32_t>(vc_.size());
  queues_[q] = i;
  vc_.emplace_back(i + 1, 0);
  destroyed_.push_back(false);
  return i;
}

bool hb_oracle::host_complete_locked(const use& u) const { return at(host_, u.queue) >= u.clock; }

bool hb_oracle::ordered_locked(const use& u, std::uint32_t q) const {
  return u.queue == q || at(vc_[q], u.queue) >= u.clock || host_complete_locked(u);
}

void hb_oracle::sync_host_locked(std::uint32_t q) { merge(vc_[q], host_); }

std::string hb_oracle::describe_locked(const use& u) const {
  return "q" + std::to_string(u.queue) + " at clock " + std::to_string(u.clock);
}

void hb_oracle::violation_locked(std::string message) {
  if (violations_.size() < 32) violations_.push_back(std::move(message));
}

void hb_oracle::violation(std::string message) {
  std::lock_guard lock(mu_);
  violation_locked(std::move(message));
}

void hb_oracle::on_create_queue(native_queue q) {
  std::lock_guard lock(mu_);
  const auto i = static_cast<std::uint32_t>(vc_.size());
  queues_[q] = i;
  vc_.emplace_back(i + 1, 0);
  destroyed_.push_back(false);
}

void hb_oracle::on_destroy_queue(native_queue q) {
  std::lock_guard lock(mu_);
  const std::uint32_t i = index_locked(q);
  if (at(host_, i) < vc_[i][i]) {
    violation_locked("queue q" + std::to_string(i) + " destroyed with work pending: clock " +
                     std::to_string(vc_[i][i]) + ", the host has seen " +
                     std::to_string(at(host_, i)) + " complete");
  }
  destroyed_[i] = true;
  queues_.erase(q);  // the native handle may be reused by a later queue
}

void hb_oracle::split_locked(std::uintptr_t where) {
  auto it = regions_.upper_bound(where);
  if (it == regions_.begin()) return;
  --it;
  if (it->first == where || where >= it->second.end) return;
  region right = it->second;
  it->second.end = where;
  regions_.emplace(where, std::move(right));
}

void hb_oracle::access_locked(std::uint32_t q, const void* p, std::size_t bytes, bool write,
                              int value, const char* what) {
  if (bytes == 0 || p == nullptr) return;
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t e = b + bytes;
  auto seg = segments_.upper_bound(b);
  if (seg == segments_.begin()) return;  // host memory (a download's destination)
  --seg;
  if (b >= seg->second) return;
  if (e > seg->second) {
    violation_locked(std::string(what) + " on q" + std::to_string(q) + " of " + range(b, e) +
                     " runs past the end of its upstream segment");
  }
  split_locked(b);
  split_locked(e);
  const use now{q, vc_[q][q]};
  for (auto it = regions_.lower_bound(b); it != regions_.end() && it->first < e; ++it) {
    region& r = it->second;
    auto check = [&](const std::vector<use>& uses, const char* kind) {
      for (const use& u : uses) {
        if (!ordered_locked(u, q)) {
          violation_locked("race: " + std::string(what) + " on q" + std::to_string(q) +
                           " at clock " + std::to_string(now.clock) +
                           (write ? " writes " : " reads ") + range(it->first, r.end) + ", " +
                           kind + " by " + describe_locked(u) + ", which q" + std::to_string(q) +
                           " is not ordered after (it knows clock " +
                           std::to_string(at(vc_[q], u.queue)) + ")");
        }
      }
    };
    check(r.writes, "written");
    if (write) {
      check(r.reads, "read");
      note(r.writes, now);
      r.value = value;
    } else {
      note(r.reads, now);
    }
  }
}

void hb_oracle::on_submit(native_queue nq, const command& c) {
  std::lock_guard lock(mu_);
  const std::uint32_t q = index_locked(nq);
  sync_host_locked(q);
  ++vc_[q][q];
  switch (c.kind) {
    case command_kind::copy: {
      int value = -1;
      if (!c.copy.src_is_host) {
        access_locked(q, c.copy.src, c.copy.bytes, false, -1, "copy (source)");
        // A device-to-device copy of uniform content keeps it known.
        const auto b = reinterpret_cast<std::uintptr_t>(c.copy.src);
        auto it = regions_.find(b);
        if (it != regions_.end() && it->second.end >= b + c.copy.bytes) value = it->second.value;
      }
      access_locked(q, c.copy.dst, c.copy.bytes, true, value, "copy (destination)");
      return;
    }
    case command_kind::fill:
      access_locked(q, c.fill.dst, c.fill.count * c.fill.element_size, true, fill_value(c.fill),
                    "fill");
      return;
    case command_kind::kernel: {
      const kernel_command& k = c.kernel;
      const std::size_t bytes = k.n * size_of(k.type);
      access_locked(q, k.in0, bytes, false, -1, "kernel (input)");
      if (k.in1 != nullptr) access_locked(q, k.in1, bytes, false, -1, "kernel (input)");
      access_locked(q, k.out, k.kind == kernel_kind::reduce ? size_of(k.type) : bytes, true, -1,
                    "kernel (output)");
      return;
    }
  }
}

void hb_oracle::on_record(native_queue nq, native_marker m) {
  std::lock_guard lock(mu_);
  const std::uint32_t q = index_locked(nq);
  sync_host_locked(q);
  markers_[m] = vc_[q];
}

void hb_oracle::on_host_observed(native_marker m) {
  std::lock_guard lock(mu_);
  auto it = markers_.find(m);
  if (it == markers_.end()) {
    violation_locked("oracle: a marker the oracle never saw recorded was observed");
    return;
  }
  merge(host_, it->second);
}

void hb_oracle::on_wait_device(native_queue nq, native_marker m) {
  std::lock_guard lock(mu_);
  const std::uint32_t q = index_locked(nq);
  ++device_waits_;
  sync_host_locked(q);
  auto it = markers_.find(m);
  if (it == markers_.end()) {
    violation_locked("oracle: device wait on a marker the oracle never saw recorded");
    return;
  }
  merge(vc_[q], it->second);
}

void hb_oracle::on_release_marker(native_marker m) {
  std::lock_guard lock(mu_);
  markers_.erase(m);
}

void hb_oracle::on_upstream_allocate(const void* p, std::size_t bytes, int initial_content) {
  std::lock_guard lock(mu_);
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  segments_[b] = b + bytes;
  // Fresh memory has no history (a new segment, even at the address of a released one).
  regions_.erase(regions_.lower_bound(b), regions_.lower_bound(b + bytes));
  regions_.emplace(b, region{b + bytes, {}, {}, initial_content});
}

void hb_oracle::on_upstream_deallocate(const void* p, std::size_t bytes) {
  std::lock_guard lock(mu_);
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t e = b + bytes;
  for (auto it = regions_.lower_bound(b); it != regions_.end() && it->first < e; ++it) {
    for (const auto* uses : {&it->second.writes, &it->second.reads}) {
      for (const use& u : *uses) {
        if (!host_complete_locked(u)) {
          violation_locked("released while in use: upstream deallocate of " + range(b, e) +
                           ", but " + range(it->first, it->second.end) + " was used by " +
                           describe_locked(u) + ", not known complete (the host has seen clock " +
                           std::to_string(at(host_, u.queue)) + ")");
        }
      }
    }
  }
  regions_.erase(regions_.lower_bound(b), regions_.lower_bound(e));
  segments_.erase(b);
}

bool hb_oracle::handed_out(native_queue nq, const void* p, std::size_t bytes,
                           const std::string& what) {
  std::lock_guard lock(mu_);
  const std::uint32_t q = index_locked(nq);
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t e = b + bytes;
  auto seg = segments_.upper_bound(b);
  if (seg == segments_.begin() || b >= std::prev(seg)->second) {
    violation_locked(what + ": the pool handed out " + range(b, e) +
                     ", which is not in any upstream segment");
    return false;
  }
  bool cross = false;
  split_locked(b);
  split_locked(e);
  for (auto it = regions_.lower_bound(b); it != regions_.end() && it->first < e; ++it) {
    for (const auto* uses : {&it->second.writes, &it->second.reads}) {
      for (const use& u : *uses) {
        cross = cross || u.queue != q;
        if (ordered_locked(u, q)) continue;
        violation_locked(
            "unordered reuse: " + what + " got " + range(b, e) + " for q" + std::to_string(q) +
            ", but " + range(it->first, it->second.end) + " was " +
            (uses == &it->second.writes ? "written" : "read") + " by " + describe_locked(u) +
            ", which q" + std::to_string(q) + " is not ordered after (it knows clock " +
            std::to_string(at(vc_[q], u.queue)) + "; the host has seen clock " +
            std::to_string(at(host_, u.queue)) + " complete): the pool made no wait for it");
      }
    }
  }
  return cross;
}

std::vector<hb_oracle::content> hb_oracle::expected(const void* p, std::size_t bytes) {
  std::lock_guard lock(mu_);
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t e = b + bytes;
  split_locked(b);
  split_locked(e);
  std::vector<content> out;
  for (auto it = regions_.lower_bound(b); it != regions_.end() && it->first < e; ++it)
    out.push_back({it->first, std::min(it->second.end, e), it->second.value});
  return out;
}

std::string hb_oracle::queue_name(native_queue q) {
  std::lock_guard lock(mu_);
  auto it = queues_.find(q);
  return it == queues_.end() ? "q?" : "q" + std::to_string(it->second);
}

bool hb_oracle::live(native_queue q) const {
  std::lock_guard lock(mu_);
  return queues_.count(q) != 0;
}

std::uint64_t hb_oracle::device_waits() const {
  std::lock_guard lock(mu_);
  return device_waits_;
}

std::size_t hb_oracle::live_queues() const {
  std::lock_guard lock(mu_);
  return queues_.size();
}

std::vector<std::string> hb_oracle::violations() const {
  std::lock_guard lock(mu_);
  return violations_;
}

// ---- observing_backend ----------------------------------------------------------------------

observing_backend::observing_backend(std::shared_ptr<backend> inner,
                                     std::shared_ptr<hb_oracle> oracle, int fresh_content)
    : backend(inner->name(), inner->caps()),
      inner_(std::move(inner)),
      oracle_(std::move(oracle)),
      fresh_content_(fresh_content) {}

void* observing_backend::do_allocate(std::size_t bytes) {
  void* p = inner_->allocate(bytes);
  if (p != nullptr) oracle_->on_upstream_allocate(p, bytes, fresh_content_);
  return p;
}

void observing_backend::do_deallocate(void* p, std::size_t bytes) noexcept {
  oracle_->on_upstream_deallocate(p, bytes);
  inner_->deallocate(p, bytes);
}

namespace {
// A destroyed queue must never reach the backend again (backend.hpp: "afterwards q is never
// passed again"). This is the origin report's bug: a freed chunk kept its stream, and a later
// allocation waited on that stream's destroyed queue. Report it and refuse the call, rather than
// hand a dangling queue to the host backend.
void require_live(hb_oracle& o, native_queue q, const char* call) {
  if (o.live(q)) return;
  const std::string m = std::string("backend ") + call + " on a destroyed (or unknown) queue " +
                        std::to_string(reinterpret_cast<std::uintptr_t>(q)) +
                        ": something kept a stream's queue past the stream's destruction";
  o.violation(m);
  throw logic_error(m);
}
}  // namespace

native_queue observing_backend::do_create_queue() {
  native_queue q = inner_->create_queue();
  oracle_->on_create_queue(q);
  return q;
}

void observing_backend::do_destroy_queue(native_queue q) noexcept {
  if (!oracle_->live(q)) {
    oracle_->violation("backend destroy_queue on a queue already destroyed");
    return;
  }
  oracle_->on_destroy_queue(q);
  inner_->destroy_queue(q);
}

void observing_backend::do_submit(native_queue q, const command& c) {
  require_live(*oracle_, q, "submit");
  oracle_->on_submit(q, c);
  inner_->submit(q, c);
}

native_marker observing_backend::do_record(native_queue q) {
  require_live(*oracle_, q, "record");
  native_marker m = inner_->record(q);
  oracle_->on_record(q, m);
  return m;
}

bool observing_backend::do_query(native_marker m) {
  const bool done = inner_->query(m);
  if (done) oracle_->on_host_observed(m);
  return done;
}

void observing_backend::do_wait_host(native_marker m) {
  inner_->wait_host(m);
  oracle_->on_host_observed(m);
}

void observing_backend::do_wait_device(native_queue q, native_marker m) {
  require_live(*oracle_, q, "wait_device");
  if (caps().device_wait) {
    oracle_->on_wait_device(q, m);
    inner_->wait_device(q, m);
  } else {
    inner_->wait_device(q, m);  // a host wait inside
    oracle_->on_host_observed(m);
  }
}

void observing_backend::do_release_marker(native_marker m) noexcept {
  oracle_->on_release_marker(m);
  inner_->release_marker(m);
}

}  // namespace streampool::model
