// streampool: the host backend (see include/streampool/host.hpp).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>
#include <variant>
#include <vector>

#include "backend/common/aligned_bases.hpp"
#include "host_kernels.hpp"
#include "race_checker.hpp"
#include "streampool/host.hpp"

namespace streampool {
namespace {

using detail::vector_clock;

// A marker: completed by the worker of its queue once every earlier command has run.
struct host_marker {
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  vector_clock vc;  // the queue's vector clock when it completed (checking mode)

  void complete() {
    {
      std::lock_guard lock(mu);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
  void wait() {
    if (done.load(std::memory_order_acquire)) return;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done.load(std::memory_order_acquire); });
  }
};
using marker_ptr = std::shared_ptr<host_marker>;

/// A physical granule: the host needs no memory for it until it is mapped (fresh pages then).
struct physical_granule {};

struct task {
  struct run_command {
    command cmd;
    std::vector<std::byte> staged;  // an upload's source, copied at submit time
  };
  struct record_marker {
    marker_ptr m;
  };
  struct wait_marker {
    marker_ptr m;
  };
  struct stop {};
  std::variant<run_command, record_marker, wait_marker, stop> what;
};

class host_backend;

struct host_queue {
  std::size_t index = 0;
  std::mutex mu;  // guards tasks and running
  std::condition_variable cv;
  std::deque<task> tasks;
  bool running = false;  // the worker is between taking a task and finishing it
  std::thread worker;
  // Worker-only state:
  vector_clock vc;
  std::mt19937_64 rng;
};

class host_backend final : public backend {
 public:
  explicit host_backend(const host_options& o) : backend("host", caps_for(o)), options_(o) {}

  ~host_backend() override = default;

  std::vector<std::string> violations() const { return checker_.violations(); }
  std::size_t allocated() const { return allocated_.load(); }

 private:
  static backend_caps caps_for(const host_options& o) {
    backend_caps c;
    c.device_wait = o.device_wait;
    c.host_accessible = true;
    c.kind = backend_kind::host;
    c.granularity = o.granularity;
    c.total_memory = o.total_memory;
    c.virtual_memory = o.virtual_memory;
    c.vm_granularity = o.vm_granularity != 0 ? o.vm_granularity : o.granularity;
    if (c.total_memory == 0) {
      const long pages = sysconf(_SC_PHYS_PAGES);
      const long page = sysconf(_SC_PAGE_SIZE);
      c.total_memory = pages > 0 && page > 0
                           ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                           : 0;
    }
    return c;
  }

  /// Counts `bytes` against the simulated device size; false when it is full.
  bool take_device_bytes(std::size_t bytes) {
    // A simulated device size makes out-of-memory reachable in tests without exhausting RAM.
    if (options_.total_memory != 0) {
      std::size_t now = allocated_.load();
      do {
        if (now + bytes > options_.total_memory) return false;
      } while (!allocated_.compare_exchange_weak(now, now + bytes));
    } else {
      allocated_ += bytes;
    }
    return true;
  }

  void* do_allocate(std::size_t bytes) override {
    if (!take_device_bytes(bytes)) return nullptr;
    void* p = std::aligned_alloc(caps().granularity, bytes);
    if (p == nullptr) {
      allocated_ -= bytes;
      return nullptr;
    }
    if (options_.checking) {
      std::memset(p, 0xCD, bytes);  // "uninitialised" pattern
      checker_.add_segment(p, bytes);
    }
    return p;
  }

  void do_deallocate(void* p, std::size_t bytes) noexcept override {
    if (options_.checking) {
      checker_.remove_segment(p, bytes);
      std::memset(p, 0xDD, bytes);  // poison: a late reader sees garbage, ASan sees the free
    }
    std::free(p);
    allocated_ -= bytes;
  }

  // ---- virtual memory: address space from mmap, a physical granule is a count --------------

  void* do_reserve(std::size_t bytes) override {
    // Over-reserve by one granule to align the start, then give the slack back.
    const std::size_t g = caps().vm_granularity;
    void* raw =
        ::mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = detail::align_up(start, g);
    if (aligned > start) ::munmap(raw, aligned - start);
    const std::uintptr_t tail = start + bytes + g - (aligned + bytes);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the address is computed as an integer
    if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
    auto* p = reinterpret_cast<void*>(aligned);  // NOLINT(performance-no-int-to-ptr)
    if (options_.checking) checker_.add_segment(p, bytes);
    return p;
  }

  void do_unreserve(void* p, std::size_t bytes) noexcept override {
    if (options_.checking) checker_.remove_segment(p, bytes);
    ::munmap(p, bytes);
  }

  native_physical do_create_physical() override {
    if (!take_device_bytes(caps().vm_granularity)) return nullptr;
    return new physical_granule;
  }

  void do_release_physical(native_physical h) noexcept override {
    delete static_cast<physical_granule*>(h);
    allocated_ -= caps().vm_granularity;
  }

  bool do_map(void* p, std::span<const native_physical> handles) override {
    const std::size_t bytes = handles.size() * caps().vm_granularity;
    if (::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
        MAP_FAILED) {
      drop_pages(p, bytes);
      return false;
    }
    if (options_.checking) std::memset(p, 0xCD, bytes);  // "uninitialised" pattern
    return true;
  }

  void do_unmap(void* p, std::size_t bytes) noexcept override {
    // The pages go: a late access through a stale pointer faults instead of reading old data.
    if (options_.checking) checker_.forget(p, bytes);
    drop_pages(p, bytes);
  }

  /// Back to reserved address space: no access, no pages.
  static void drop_pages(void* p, std::size_t bytes) noexcept {
    // A failure is not reported (the callers are noexcept or already failing): the range then
    // keeps its pages and stays accessible, which wastes memory but breaks nothing.
    (void)::mmap(p, bytes, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                 0);
  }

  native_queue do_create_queue() override {
    auto* q = new host_queue;
    q->index = next_queue_.fetch_add(1);
    q->vc.assign(q->index + 1, 0);
    q->rng.seed(options_.seed * 0x9E3779B97F4A7C15ull + q->index);
    q->worker = std::thread([this, q] { run(*q); });
    std::lock_guard lock(queues_mu_);
    queues_.insert(q);
    return q;
  }

  void do_destroy_queue(native_queue nq) noexcept override {
    auto* q = static_cast<host_queue*>(nq);
    {
      std::lock_guard lock(queues_mu_);
      queues_.erase(q);
    }
    push(*q, task{task::stop{}});
    q->worker.join();
    delete q;
  }

  /// Refuses a queue this backend did not make, or destroyed: a wrapped "native stream" may be any
  /// value a caller passed (the C ABI's sp_stream_wrap and *_native calls), and it is first used
  /// here, when a marker is recorded on it (streampool::c_api checks a new wrapper this way). A
  /// lookup under a lock, on record only: submissions and waits go to queues a record vetted.
  void check_queue(native_queue nq) const {
    std::lock_guard lock(queues_mu_);
    STREAMPOOL_EXPECTS(queues_.contains(static_cast<host_queue*>(nq)),
                       detail::format("host backend: %s is not a live queue of this backend "
                                      "(another host device's, a destroyed one, or no queue)",
                                      detail::format_ptr(nq).c_str()));
  }

  void do_submit(native_queue nq, const command& c) override {
    task::run_command rc{c, {}};
    if (c.kind == command_kind::copy && c.copy.src_is_host) {
      // Stage the caller's pageable buffer now: it may be reused as soon as we return.
      const auto* src = static_cast<const std::byte*>(c.copy.src);
      rc.staged.assign(src, src + c.copy.bytes);
    }
    push(*static_cast<host_queue*>(nq), task{std::move(rc)});
  }

  native_marker do_record(native_queue nq) override {
    check_queue(nq);
    auto m = std::make_shared<host_marker>();
    auto& q = *static_cast<host_queue*>(nq);
    {
      // An idle queue has nothing left to run: the marker is complete now. (Besides saving a
      // round trip through the worker, this makes a replay, which submits no work, see its
      // markers complete at once, every time: its results do not depend on thread timing.)
      std::unique_lock lock(q.mu);
      if (options_.eager_markers && q.tasks.empty() && !q.running) {
        complete_marker(q, *m);  // the worker is idle: its clock is stable under q.mu
        return new marker_ptr(std::move(m));
      }
    }
    push(q, task{task::record_marker{m}});
    return new marker_ptr(std::move(m));
  }

  void complete_marker(const host_queue& q, host_marker& m) const {
    if (options_.checking) m.vc = q.vc;
    m.complete();
  }

  bool do_query(native_marker nm) override {
    const auto& m = *static_cast<marker_ptr*>(nm);
    if (!m->done.load(std::memory_order_acquire)) return false;
    if (options_.checking) checker_.observe(m->vc);
    return true;
  }

  void do_wait_host(native_marker nm) override {
    const auto& m = *static_cast<marker_ptr*>(nm);
    m->wait();
    if (options_.checking) checker_.observe(m->vc);
  }

  void do_wait_device(native_queue nq, native_marker nm) override {
    const auto& m = *static_cast<marker_ptr*>(nm);
    if (!caps().device_wait) {
      do_wait_host(nm);
      return;
    }
    push(*static_cast<host_queue*>(nq), task{task::wait_marker{m}});
  }

  void do_release_marker(native_marker nm) noexcept override {
    delete static_cast<marker_ptr*>(nm);
  }

  static void push(host_queue& q, task t) {
    {
      std::lock_guard lock(q.mu);
      q.tasks.push_back(std::move(t));
    }
    q.cv.notify_one();
  }

  void run(host_queue& q) {
    for (;;) {
      task t;
      {
        std::unique_lock lock(q.mu);
        q.running = false;
        q.cv.wait(lock, [&] { return !q.tasks.empty(); });
        t = std::move(q.tasks.front());
        q.tasks.pop_front();
        q.running = true;
      }
      if (std::holds_alternative<task::stop>(t.what)) return;
      if (auto* w = std::get_if<task::wait_marker>(&t.what)) {
        w->m->wait();
        if (options_.checking) detail::merge_into(q.vc, w->m->vc);
        continue;
      }
      if (auto* r = std::get_if<task::record_marker>(&t.what)) {
        complete_marker(q, *r->m);
        continue;
      }
      auto& rc = std::get<task::run_command>(t.what);
      if (options_.max_delay_us != 0) {
        // Delay injection: widens the window in which unordered work on two queues overlaps.
        std::this_thread::sleep_for(std::chrono::microseconds(q.rng() % options_.max_delay_us));
      }
      ++q.vc[q.index];
      if (options_.checking) check(q, rc.cmd);
      try {
        execute(rc);
      } catch (const std::exception& e) {
        // Nothing can be thrown back to the submitter from here; make it loud and visible.
        checker_.violation(std::string("command failed on host queue: ") + e.what());
      }
    }
  }

  void check(host_queue& q, const command& c) {
    switch (c.kind) {
      case command_kind::copy:
        checker_.access(q.index, q.vc, c.copy.src, c.copy.bytes, false);
        checker_.access(q.index, q.vc, c.copy.dst, c.copy.bytes, true);
        break;
      case command_kind::fill:
        checker_.access(q.index, q.vc, c.fill.dst, c.fill.count * c.fill.element_size, true);
        break;
      case command_kind::kernel: {
        const kernel_command& k = c.kernel;
        const std::size_t bytes = k.n * size_of(k.type);
        checker_.access(q.index, q.vc, k.in0, bytes, false);
        if (k.in1 != nullptr) checker_.access(q.index, q.vc, k.in1, bytes, false);
        const std::size_t out_bytes = k.kind == kernel_kind::reduce ? size_of(k.type) : bytes;
        checker_.access(q.index, q.vc, k.out, out_bytes, true);
        break;
      }
    }
  }

  static void execute(task::run_command& rc) {
    const command& c = rc.cmd;
    switch (c.kind) {
      case command_kind::copy:
        std::memmove(c.copy.dst, c.copy.src_is_host ? rc.staged.data() : c.copy.src, c.copy.bytes);
        return;
      case command_kind::fill: {
        auto* d = static_cast<std::byte*>(c.fill.dst);
        if (c.fill.element_size == 1) {
          std::memset(d, static_cast<int>(c.fill.pattern & 0xFF), c.fill.count);
          return;
        }
        for (std::size_t i = 0; i < c.fill.count; ++i)
          std::memcpy(d + i * c.fill.element_size, &c.fill.pattern, c.fill.element_size);
        return;
      }
      case command_kind::kernel:
        detail::run_host_kernel(c.kernel);
        return;
    }
  }

  host_options options_;
  std::atomic<std::size_t> allocated_{0};
  std::atomic<std::size_t> next_queue_{0};
  mutable std::mutex queues_mu_;                  // guards queues_
  std::unordered_set<const host_queue*> queues_;  // the live queues this backend made
  detail::race_checker checker_;
};

}  // namespace

std::shared_ptr<backend> make_host_backend(host_options o) {
  // The pool's rule (min_pool_granularity, backend.hpp): a host backend exists to run pools, so
  // a granularity that every pool would refuse is refused here, where it is chosen.
  STREAMPOOL_EXPECTS(
      o.granularity >= min_pool_granularity && (o.granularity & (o.granularity - 1)) == 0,
      detail::format("host backend: granularity %zu must be a power of two >= %zu "
                     "(the smallest a pool accepts)",
                     o.granularity, min_pool_granularity));
  STREAMPOOL_EXPECTS(o.vm_granularity == 0 || (o.vm_granularity % o.granularity == 0 &&
                                               (o.vm_granularity & (o.vm_granularity - 1)) == 0),
                     detail::format("host backend: vm_granularity %zu must be a power of two "
                                    "multiple of the granularity %zu",
                                    o.vm_granularity, o.granularity));
  return std::make_shared<host_backend>(o);
}

std::vector<std::string> host_violations(backend& b) {
  auto* h = dynamic_cast<host_backend*>(&b);
  STREAMPOOL_EXPECTS(h != nullptr,
                     "host_violations: backend '" + b.name() + "' is not a host backend");
  return h->violations();
}

std::size_t host_allocated_bytes(backend& b) {
  auto* h = dynamic_cast<host_backend*>(&b);
  STREAMPOOL_EXPECTS(h != nullptr,
                     "host_allocated_bytes: backend '" + b.name() + "' is not a host backend");
  return h->allocated();
}

}  // namespace streampool
