// streampool model test: the happens-before oracle and the backend that feeds it.
//
// The oracle is a reference model of device ordering, independent of the pool and of the host
// backend's own race checker. It sees every backend call the pool, streams and arrays make (the
// observing_backend forwards each one to a real host backend and reports it here first), so it
// learns about the pool's own device-side waits exactly, with no guessing from statistics.
//
// Glossary
//   queue      a backend queue, numbered by the oracle in creation order (q0, q1, ...).
//   clock      per queue, the number of commands submitted to it so far. A use is (queue, clock).
//   vc         per queue, a vector clock: vc[q][r] is the clock of queue r that work submitted to
//              q from now on is ordered after. Advanced by markers (a marker snapshots vc[q] when
//              it is recorded) and device waits (vc[q] merges the marker's snapshot).
//   host       the host's vector clock: merged from a marker's snapshot whenever the host sees it
//              complete (wait_host, or a query that returns true). Anything submitted later, to
//              any queue, is ordered after it. The driver serialises all host calls, so there is
//              one host.
//   region     a byte range of upstream memory with the same history: every earlier read and
//              write, one (queue, clock) per queue (a later use on a queue implies the earlier
//              ones), and its content when known (the byte every fill wrote).
//
// What it checks
//   * at every command: the command is ordered after every earlier conflicting use of the bytes
//     it touches (write after read/write, read after write): "race".
//   * handed_out(q, p, n), called by the driver right after allocate returned p for a stream on
//     queue q: q is ordered after *every* earlier use of every byte of [p, p+n): "unordered
//     reuse". This is the pool's contract, checked before the new owner has submitted anything.
//   * upstream deallocate: every use of the memory is complete as the host knows it: "released
//     while in use".
//   * destroy_queue: all of its work is complete as the host knows it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "streampool/backend.hpp"

namespace streampool::model {

using vclock = std::vector<std::uint64_t>;

class hb_oracle {
 public:
  struct use {
    std::uint32_t queue;
    std::uint64_t clock;
  };
  /// Known content of [begin, end): a byte value, or -1 when unknown.
  struct content {
    std::uintptr_t begin, end;
    int value;
  };

  // ---- fed by observing_backend ----
  void on_create_queue(native_queue q);
  void on_destroy_queue(native_queue q);
  void on_submit(native_queue q, const command& c);
  void on_record(native_queue q, native_marker m);
  void on_host_observed(native_marker m);
  void on_wait_device(native_queue q, native_marker m);
  void on_release_marker(native_marker m);
  void on_upstream_allocate(const void* p, std::size_t bytes, int initial_content);
  void on_upstream_deallocate(const void* p, std::size_t bytes);

  // ---- asked by the driver ----
  /// The pool just handed [p, p+bytes) to a stream on queue q: checks q is ordered after every
  /// earlier use. `what` names the allocation in the message. Returns true when some earlier use
  /// was on another queue (a cross-stream reuse).
  bool handed_out(native_queue q, const void* p, std::size_t bytes, const std::string& what);
  /// What [p, p+bytes) must contain once every submitted write to it has run.
  [[nodiscard]] std::vector<content> expected(const void* p, std::size_t bytes);
  /// The oracle's number for a queue ("q3"), or "q?" when unknown.
  [[nodiscard]] std::string queue_name(native_queue q);
  /// False for a queue never created or already destroyed (the origin report's crash is a call
  /// on one: the observing backend refuses it instead of passing it on).
  [[nodiscard]] bool live(native_queue q) const;
  [[nodiscard]] std::uint64_t device_waits() const;
  [[nodiscard]] std::size_t live_queues() const;
  [[nodiscard]] std::vector<std::string> violations() const;
  void violation(std::string message);

 private:
  struct region {
    std::uintptr_t end;
    std::vector<use> writes;
    std::vector<use> reads;
    int value;
  };
  using region_map = std::map<std::uintptr_t, region>;

  std::uint32_t index_locked(native_queue q);
  [[nodiscard]] bool ordered_locked(const use& u, std::uint32_t q) const;
  [[nodiscard]] bool host_complete_locked(const use& u) const;
  void sync_host_locked(std::uint32_t q);
  /// Splits regions so that [b, e) is exactly covered by whole regions (inside segments only).
  void split_locked(std::uintptr_t at);
  void access_locked(std::uint32_t q, const void* p, std::size_t bytes, bool write, int value,
                     const char* what);
  void violation_locked(std::string message);
  [[nodiscard]] std::string describe_locked(const use& u) const;

  mutable std::mutex mu_;                                   // guards everything below
  std::unordered_map<native_queue, std::uint32_t> queues_;  // live queues
  std::vector<vclock> vc_;                                  // per queue index, forever
  std::vector<bool> destroyed_;
  vclock host_;
  std::unordered_map<native_marker, vclock> markers_;
  std::map<std::uintptr_t, std::uintptr_t> segments_;  // start -> end
  region_map regions_;
  std::uint64_t device_waits_ = 0;
  std::vector<std::string> violations_;
};

/// A backend that reports every call to an oracle, then forwards it to `inner` (a host backend).
class observing_backend final : public backend {
 public:
  observing_backend(std::shared_ptr<backend> inner, std::shared_ptr<hb_oracle> oracle,
                    int fresh_content);
  [[nodiscard]] backend& inner() const noexcept { return *inner_; }
  [[nodiscard]] hb_oracle& oracle() const noexcept { return *oracle_; }

 private:
  void* do_allocate(std::size_t bytes) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  native_queue do_create_queue() override;
  void do_destroy_queue(native_queue q) noexcept override;
  void do_submit(native_queue q, const command& c) override;
  native_marker do_record(native_queue q) override;
  bool do_query(native_marker m) override;
  void do_wait_host(native_marker m) override;
  void do_wait_device(native_queue q, native_marker m) override;
  void do_release_marker(native_marker m) noexcept override;

  std::shared_ptr<backend> inner_;
  std::shared_ptr<hb_oracle> oracle_;
  int fresh_content_;  // what upstream memory holds when allocated (-1: unknown)
};

}  // namespace streampool::model
