#include "model/driver.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/stream/access.hpp"  // a pool's identity, to match blocks to pools
#include "model/hb_oracle.hpp"
#include "streampool/streampool.hpp"

namespace streampool::model {

std::uint32_t seed_chooser::below(std::uint32_t n) {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z % n);
}

backend_under_test host_backend_under_test(const host_options& h) {
  backend_under_test b;
  b.inner = make_host_backend(h);
  b.fresh_content = 0xCD;  // the checking host backend fills fresh memory with it
  backend* raw = b.inner.get();
  b.violations = [raw] { return host_violations(*raw); };
  b.upstream_bytes = [raw] { return host_allocated_bytes(*raw); };
  std::ostringstream s;
  s << "host backend: checking, delay " << h.max_delay_us << " us (seed " << h.seed
    << "), device_wait " << h.device_wait << ", eager_markers " << h.eager_markers
    << ", virtual_memory " << h.virtual_memory;
  b.description = s.str();
  return b;
}

std::uint32_t byte_chooser::below(std::uint32_t n) {
  std::uint32_t v = 0;
  for (std::uint32_t range = 1; range < n && range != 0; range <<= 8) {
    v = (v << 8) | (pos_ < size_ ? data_[pos_] : 0u);
    if (pos_ < size_) ++pos_;
    if (range > (1u << 23)) break;
  }
  return v % n;
}

namespace {

constexpr int max_workers = 3;
constexpr std::size_t max_streams = 6;
constexpr std::size_t max_blocks = 20;
constexpr std::size_t pool_slots = 2;

/// A thread that runs one job at a time for the driver, which waits for each.
class worker {
 public:
  worker() : thread_([this] { loop(); }) {}
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  ~worker() { stop(); }

  void run(const std::function<void()>& f) {
    std::unique_lock lock(mu_);
    job_ = &f;
    done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  /// Ends the thread: its thread-local default streams are destroyed as it exits.
  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return job_ != nullptr || quit_; });
      if (job_ == nullptr) return;
      const std::function<void()>* f = job_;
      lock.unlock();
      std::exception_ptr e;
      try {
        (*f)();
      } catch (...) {
        e = std::current_exception();
      }
      lock.lock();
      job_ = nullptr;
      error_ = e;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr error_;
  bool done_ = false;
  bool quit_ = false;
  std::thread thread_;  // last: starts after the rest is initialised
};

struct failure : std::exception {
  explicit failure(std::string m) : message(std::move(m)) {}
  std::string message;
};

struct stream_slot {
  int id;
  int thread;
  bool is_default;
  std::unique_ptr<stream> owned;   // explicit streams
  std::optional<stream_ref> view;  // the stream either way
  [[nodiscard]] stream_ref ref() const { return *view; }
};

struct user {
  int stream;     // stream id
  token tok;      // right after its last use
  bool declared;  // announced with record_use
};

struct block {
  int id;
  bool is_array;
  std::size_t pool_slot;
  const void* pool_identity;  // the pool_state, for live-bytes accounting
  void* p;
  std::size_t bytes;        // used range (whole 256-byte granules)
  std::size_t block_bytes;  // what the pool says
  std::unique_ptr<array<std::uint32_t>> arr;
  std::vector<user> users;  // raw blocks: streams that used it since allocation
};

struct pool_slot {
  std::optional<pool> handle;
  bool is_default = false;
};

enum class op_kind {
  start_thread,
  end_thread,
  create_stream,
  destroy_stream,
  allocate,
  write,
  read,
  free_block,
  trim,
  replace_pool,
  synchronize
};

std::size_t round256(std::size_t n) { return (n + 255) / 256 * 256; }

class sequence {
 public:
  sequence(chooser& c, const run_options& o, run_result& r) : c_(c), o_(o), r_(r) {}

  void run() {
    configure();
    bool failed = false;
    try {
      for (std::size_t i = 0; i < o_.max_ops && !c_.exhausted(); ++i) {
        step();
        check_after_op();
      }
    } catch (const failure& f) {
      fail(f.message);
      failed = true;
    } catch (const std::exception& e) {
      fail(std::string("unexpected exception: ") + e.what());
      failed = true;
    }
    try {
      teardown(failed);
    } catch (const failure& f) {
      fail(f.message);
    } catch (const std::exception& e) {
      fail(std::string("unexpected exception in teardown: ") + e.what());
    }
  }

 private:
  // ---- configuration ----------------------------------------------------------------------
  void configure() {
    host_options h;
    h.checking = true;
    h.max_delay_us = pick(3) == 0 ? 0 : o_.max_delay_us;
    h.seed = pick(1u << 16) + 1;
    h.granularity = 64u << 10;
    h.device_wait = pick(8) != 0;
    h.eager_markers = pick(2) == 0;
    h.virtual_memory = pick(4) != 0;
    options_.poison_on_free = pick(2) == 0;
    static constexpr std::size_t cache_bytes[] = {4u << 10, 256u << 10, 8u << 20};
    options_.stream_cache_bytes = cache_bytes[pick(3)];
    static constexpr std::size_t limits[] = {0, 12u << 20, 24u << 20};
    options_.memory_limit = limits[pick(3)];
    options_.small_max = pick(2) == 0 ? (64u << 10) : (1u << 20);
    under_ = o_.make_backend(h);
    auto obs = std::make_shared<observing_backend>(under_.inner, oracle_, under_.fresh_content);
    dev_.emplace(obs);
    std::ostringstream s;
    s << under_.description << "; pools: poison_on_free " << options_.poison_on_free
      << ", stream_cache_bytes " << options_.stream_cache_bytes << ", memory_limit "
      << options_.memory_limit << ", small_max " << options_.small_max;
    r_.config = s.str();
    for (std::size_t i = 0; i < pool_slots; ++i) new_pool(i);
  }

  void new_pool(std::size_t slot) {
    // Slot 0 alternates between the device's default pool and pools of its own.
    pools_[slot].is_default = slot == 0 && pick(2) == 0;
    pools_[slot].handle = pools_[slot].is_default ? dev_->default_pool() : pool(*dev_, options_);
    if (pools_[slot].is_default) pools_[slot].handle->set_memory_limit(options_.memory_limit);
  }

  std::uint32_t pick(std::uint32_t n) { return n <= 1 ? 0 : c_.below(n); }
  template <class T>
  T& pick_of(std::vector<T>& v) {
    return v[pick(static_cast<std::uint32_t>(v.size()))];
  }

  // ---- threads ----------------------------------------------------------------------------
  void on(int thread, const std::function<void()>& f) {
    if (thread == 0) {
      f();
      return;
    }
    workers_[static_cast<std::size_t>(thread)]->run(f);
  }
  std::vector<int> live_threads() const {
    std::vector<int> t{0};
    for (int i = 1; i <= max_workers; ++i)
      if (workers_[static_cast<std::size_t>(i)]) t.push_back(i);
    return t;
  }
  int any_thread() {
    auto t = live_threads();
    return t[pick(static_cast<std::uint32_t>(t.size()))];
  }

  stream_slot* find_stream(int id) {
    for (auto& s : streams_)
      if (s.id == id) return &s;
    return nullptr;
  }

  // ---- the operations ---------------------------------------------------------------------
  void log(std::string text) {
    text = "#" + std::to_string(r_.ops.size()) + " " + text;
    if (o_.verbose) std::fprintf(stderr, "%s\n", text.c_str());
    r_.ops.push_back(std::move(text));
  }

  void step() {
    std::vector<std::pair<op_kind, int>> menu;
    const bool any_worker = live_threads().size() > 1;
    bool explicit_stream = false;
    for (auto& s : streams_) explicit_stream = explicit_stream || !s.is_default;
    if (live_threads().size() <= max_workers) menu.emplace_back(op_kind::start_thread, 3);
    if (any_worker) menu.emplace_back(op_kind::end_thread, 3);
    if (streams_.size() < max_streams) menu.emplace_back(op_kind::create_stream, 6);
    if (explicit_stream) menu.emplace_back(op_kind::destroy_stream, 4);
    if (!streams_.empty() && blocks_.size() < max_blocks) menu.emplace_back(op_kind::allocate, 20);
    if (!streams_.empty() && !blocks_.empty()) {
      menu.emplace_back(op_kind::write, 14);
      menu.emplace_back(op_kind::read, 7);
    }
    if (!blocks_.empty()) menu.emplace_back(op_kind::free_block, 18);
    if (!streams_.empty()) menu.emplace_back(op_kind::synchronize, 2);
    menu.emplace_back(op_kind::trim, 2);
    menu.emplace_back(op_kind::replace_pool, 2);
    int total = 0;
    for (auto& [k, w] : menu) total += w;
    int x = static_cast<int>(pick(static_cast<std::uint32_t>(total)));
    op_kind kind = menu.back().first;
    for (auto& [k, w] : menu) {
      if (x < w) {
        kind = k;
        break;
      }
      x -= w;
    }
    switch (kind) {
      case op_kind::start_thread:
        start_thread();
        break;
      case op_kind::end_thread:
        end_thread(pick_worker());
        break;
      case op_kind::create_stream:
        create_stream();
        break;
      case op_kind::destroy_stream:
        destroy_stream(pick_explicit_stream());
        break;
      case op_kind::allocate:
        allocate();
        break;
      case op_kind::write:
        use_block(true);
        break;
      case op_kind::read:
        use_block(false);
        break;
      case op_kind::free_block:
        free_block(pick(static_cast<std::uint32_t>(blocks_.size())), any_thread());
        break;
      case op_kind::trim:
        trim();
        break;
      case op_kind::replace_pool:
        replace_pool(pick(pool_slots));
        break;
      case op_kind::synchronize:
        synchronize();
        break;
    }
  }

  int pick_worker() {
    auto t = live_threads();
    return t[1 + pick(static_cast<std::uint32_t>(t.size() - 1))];
  }
  int pick_explicit_stream() {
    std::vector<int> ids;
    for (auto& s : streams_)
      if (!s.is_default) ids.push_back(s.id);
    return pick_of(ids);
  }

  void start_thread() {
    for (std::size_t i = 1; i <= max_workers; ++i) {
      if (!workers_[i]) {
        log("start thread t" + std::to_string(i));
        workers_[i] = std::make_unique<worker>();
        return;
      }
    }
  }

  void end_thread(int t) {
    log("end thread t" + std::to_string(t) + " (destroys its streams, its default stream last)");
    // Its explicit streams go first, on the thread; then the thread exits and its default
    // stream dies with it. Blocks they used stay live: they are freed later, from elsewhere.
    std::vector<int> ids;
    for (auto& s : streams_)
      if (s.thread == t && !s.is_default) ids.push_back(s.id);
    for (int id : ids) destroy_stream_now(id);
    workers_[static_cast<std::size_t>(t)]->stop();
    workers_[static_cast<std::size_t>(t)].reset();
    std::erase_if(streams_, [&](const stream_slot& s) { return s.thread == t; });
  }

  void create_stream() {
    const int t = any_thread();
    bool has_default = false;
    for (auto& s : streams_) has_default = has_default || (s.thread == t && s.is_default);
    const bool make_default = t != 0 && !has_default && pick(2) == 0;
    const int id = next_stream_++;
    log("create stream s" + std::to_string(id) + " on t" + std::to_string(t) +
        (make_default ? " (the thread's default stream)" : ""));
    stream_slot slot{id, t, make_default, nullptr, std::nullopt};
    on(t, [&] {
      if (make_default) {
        slot.view = default_stream(*dev_);
      } else {
        slot.owned = std::make_unique<stream>(*dev_);
        slot.view = slot.owned->ref();
      }
    });
    streams_.push_back(std::move(slot));
  }

  void destroy_stream(int id) {
    log("destroy stream s" + std::to_string(id) + " on t" +
        std::to_string(find_stream(id)->thread));
    destroy_stream_now(id);
  }
  void destroy_stream_now(int id) {
    stream_slot* s = find_stream(id);
    on(s->thread, [&] { s->owned.reset(); });
    std::erase_if(streams_, [&](const stream_slot& x) { return x.id == id; });
  }

  std::size_t pick_size() {
    static constexpr std::size_t small[] = {256, 700, 1024, 3000, 8192};
    static constexpr std::size_t mid[] = {40000, 200000, 300000, 600000};
    static constexpr std::size_t large[] = {1200000, 2500000};
    switch (pick(8)) {
      case 0:
      case 1:
      case 2:
      case 3:
        return small[pick(5)];
      case 4:
      case 5:
      case 6:
        return mid[pick(4)];
      default:
        return large[pick(2)];
    }
  }

  void allocate() {
    stream_slot& s = pick_of(streams_);
    const std::size_t slot = pick(pool_slots);
    const bool is_array = pick(3) == 0;
    const std::size_t bytes = round256(pick_size());
    const int id = next_block_++;
    log(std::string("allocate ") + (is_array ? "array" : "raw") + " b" + std::to_string(id) +
        " of " + std::to_string(bytes) + " B from pool" + std::to_string(slot) + " on s" +
        std::to_string(s.id) + " (t" + std::to_string(s.thread) + ")");
    pool& p = *pools_[slot].handle;
    block b{id, is_array, slot, streampool::detail::access::state(p).get(), nullptr, bytes,
            0,  nullptr,  {}};
    const std::uint64_t waits_before = oracle_->device_waits();
    bool oom = false;
    on(s.thread, [&] {
      try {
        if (is_array) {
          stream_scope scope(s.ref());
          b.arr = std::make_unique<array<std::uint32_t>>(bytes / 4, p);
          b.p = b.arr->data();
        } else {
          b.p = p.allocate(s.ref(), bytes);
        }
      } catch (const out_of_memory&) {
        oom = true;
      }
    });
    if (oom) {
      r_.ops.back() += "  -> out of memory";
      ++r_.out_of_memory;
      return;
    }
    ++r_.allocations;
    if (oracle_->device_waits() != waits_before) ++r_.waited_allocations;
    b.block_bytes = p.block_size(b.p);
    if (b.block_bytes < bytes)
      throw failure("block_size " + std::to_string(b.block_bytes) + " < requested");
    // The check this test exists for: the new owner is ordered after every earlier use.
    if (oracle_->handed_out(s.ref().native(), b.p, b.block_bytes,
                            "b" + std::to_string(id) + " (allocated on s" + std::to_string(s.id) +
                                ", " + oracle_->queue_name(s.ref().native()) + ")")) {
      ++r_.cross_stream_reuses;
    }
    if (!is_array) b.users.push_back({s.id, s.ref().now(), false});
    blocks_.push_back(std::move(b));
    // Half the time the new owner reads what the last owner left before overwriting it.
    if (pick(2) == 0) read_block(blocks_.back(), s);
  }

  void use_block(bool write) {
    block& b = pick_of(blocks_);
    stream_slot& s = pick_of(streams_);
    if (!write) {
      log("read b" + std::to_string(b.id) + " on s" + std::to_string(s.id) + " (t" +
          std::to_string(s.thread) + ") and check its contents");
      read_block(b, s);
      return;
    }
    const auto value = static_cast<std::uint8_t>(pick(256));
    log("write 0x" + hex(value) + " to b" + std::to_string(b.id) + " on s" + std::to_string(s.id) +
        " (t" + std::to_string(s.thread) + ")");
    on(s.thread, [&] {
      if (b.is_array) {
        stream_scope scope(s.ref());
        b.arr->fill(0x01010101u * value);
        return;
      }
      // Handing the block to s: s waits for every other stream that used it.
      for (const user& u : b.users)
        if (u.stream != s.id) s.ref().wait(u.tok);
      s.ref().submit(command::make(fill_command{b.p, value, 1, b.bytes}));
      b.users.clear();
      b.users.push_back({s.id, s.ref().now(), false});
      if (pick(3) == 0) {
        pools_[b.pool_slot].handle->record_use(b.p, b.users.back().tok);
        b.users.back().declared = true;
      }
    });
  }

  static std::string hex(unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02x", v);
    return buf;
  }

  /// Reads b on s (ordered after its other users) and compares with the oracle's contents.
  void read_block(block& b, stream_slot& s) {
    std::vector<std::uint8_t> host(b.bytes);
    on(s.thread, [&] {
      if (b.is_array) {
        stream_scope scope(s.ref());
        auto v = b.arr->download();
        std::memcpy(host.data(), v.data(), b.bytes);
        return;
      }
      for (const user& u : b.users)
        if (u.stream != s.id) s.ref().wait(u.tok);
      s.ref().submit(command::make(copy_command{host.data(), b.p, b.bytes, false, true}));
      // Keep the other users: s read after them, but a free on a third stream must still wait
      // for s and for them (tokens stay one per stream).
      bool found = false;
      for (user& u : b.users) {
        if (u.stream == s.id) {
          u = {s.id, s.ref().now(), false};
          found = true;
        }
      }
      if (!found) b.users.push_back({s.id, s.ref().now(), false});
      s.ref().synchronize();
    });
    ++r_.data_checks;
    const auto base = reinterpret_cast<std::uintptr_t>(b.p);
    for (const auto& c : oracle_->expected(b.p, b.bytes)) {
      if (c.value < 0) continue;
      for (std::uintptr_t a = c.begin; a < c.end; ++a) {
        const std::uint8_t got = host[a - base];
        if (got != c.value) {
          throw failure("data: b" + std::to_string(b.id) + " read on s" + std::to_string(s.id) +
                        " has 0x" + hex(got) + " at offset " + std::to_string(a - base) +
                        ", but the last write ordered before this read left 0x" +
                        hex(static_cast<unsigned>(c.value)) + " in bytes [" +
                        std::to_string(c.begin - base) + ", " + std::to_string(c.end - base) + ")");
        }
      }
    }
  }

  void free_block(std::size_t index, int t) {
    block& b = blocks_[index];
    if (b.is_array) {
      log("free b" + std::to_string(b.id) + " (destroy the array) on t" + std::to_string(t));
      on(t, [&] { b.arr.reset(); });
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(index));
      return;
    }
    pool& p = *pools_[b.pool_slot].handle;
    if (streams_.empty() || pick(3) == 0) {
      log("free b" + std::to_string(b.id) + " with its tokens on t" + std::to_string(t));
      on(t, [&] {
        std::vector<token> tokens;
        for (const user& u : b.users) tokens.push_back(u.tok);
        p.deallocate(b.p, tokens);
      });
    } else {
      stream_slot& x = pick_of(streams_);
      std::string how;
      std::vector<bool> wait_for;
      for (const user& u : b.users) {
        const bool w = u.stream != x.id && !u.declared && pick(2) == 0;
        wait_for.push_back(w);
        if (u.stream != x.id && !u.declared)
          how += (w ? " s" + std::to_string(x.id) + " waits for s" : " record_use of s") +
                 std::to_string(u.stream) + ";";
      }
      log("free b" + std::to_string(b.id) + " on s" + std::to_string(x.id) + " from t" +
          std::to_string(t) + how);
      on(t, [&] {
        for (std::size_t i = 0; i < b.users.size(); ++i) {
          const user& u = b.users[i];
          if (u.stream == x.id || u.declared) continue;
          if (wait_for[i])
            x.ref().wait(u.tok);
          else
            p.record_use(b.p, u.tok);
        }
        p.deallocate(x.ref(), b.p);
      });
    }
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  void trim() {
    const std::size_t slot = pick(pool_slots);
    const int t = any_thread();
    log("trim pool" + std::to_string(slot) + " on t" + std::to_string(t));
    on(t, [&] { pools_[slot].handle->trim(); });
  }

  void replace_pool(std::size_t slot) {
    const int t = any_thread();
    log("destroy pool" + std::to_string(slot) + " on t" + std::to_string(t) +
        " (frees its raw blocks with tokens first; its arrays keep it alive) and make a new one");
    drop_pool(slot, t);
    new_pool(slot);
  }

  void drop_pool(std::size_t slot, int t) {
    on(t, [&] {
      pool& p = *pools_[slot].handle;
      for (auto& b : blocks_) {
        if (b.is_array || b.pool_slot != slot) continue;
        std::vector<token> tokens;
        for (const user& u : b.users) tokens.push_back(u.tok);
        p.deallocate(b.p, tokens);
        b.p = nullptr;
      }
      pools_[slot].handle.reset();
    });
    std::erase_if(blocks_, [](const block& b) { return !b.is_array && b.p == nullptr; });
    // Arrays keep the pool's state alive, but this slot's next pool is another one.
    for (auto& b : blocks_)
      if (b.pool_slot == slot) b.pool_slot = pool_slots;
  }

  void synchronize() {
    stream_slot& s = pick_of(streams_);
    log("synchronize s" + std::to_string(s.id) + " (host wait)");
    on(s.thread, [&] { s.ref().synchronize(); });
  }

  // ---- checks -----------------------------------------------------------------------------
  void check_after_op() {
    if (o_.verbose) {
      for (auto& x : oracle_->violations()) std::fprintf(stderr, "  oracle: %s\n", x.c_str());
      for (auto& x : backend_violations())
        std::fprintf(stderr, "  backend checker: %s\n", x.c_str());
    }
    auto v = oracle_->violations();
    if (!v.empty()) throw failure("oracle: " + v.front() + describe_more(v.size()));
    auto h = backend_violations();
    if (!h.empty()) throw failure("backend checker: " + h.front() + describe_more(h.size()));
    // Nothing is lost: the pool's live bytes are exactly the blocks the driver holds.
    for (std::size_t slot = 0; slot < pool_slots; ++slot) {
      if (!pools_[slot].handle) continue;
      std::size_t expect = 0;
      for (auto& b : blocks_)
        if (b.pool_identity == streampool::detail::access::state(*pools_[slot].handle).get())
          expect += b.block_bytes;
      const std::size_t live = pools_[slot].handle->statistics().live_bytes;
      if (live != expect) {
        throw failure("statistics: pool" + std::to_string(slot) + " reports " +
                      std::to_string(live) + " live bytes, the driver holds " +
                      std::to_string(expect));
      }
    }
  }
  static std::string describe_more(std::size_t n) {
    return n > 1 ? " (and " + std::to_string(n - 1) + " more)" : "";
  }

  std::vector<std::string> backend_violations() const {
    return under_.violations ? under_.violations() : std::vector<std::string>{};
  }

  void teardown(bool failed) {
    if (!failed) log("teardown: everything destroyed in a random order");
    // Destroy what is left in an order drawn like everything else; raw blocks before their
    // pool's last handle (the contract), anything else in any order.
    for (;;) {
      std::vector<int> menu;
      if (!blocks_.empty()) menu.push_back(0);
      for (auto& s : streams_)
        if (!s.is_default) {
          menu.push_back(1);
          break;
        }
      if (live_threads().size() > 1) menu.push_back(2);
      for (std::size_t i = 0; i < pool_slots; ++i)
        if (pools_[i].handle) {
          menu.push_back(3);
          break;
        }
      if (menu.empty()) break;
      switch (pick_of(menu)) {
        case 0:
          free_block(pick(static_cast<std::uint32_t>(blocks_.size())), any_thread());
          break;
        case 1:
          destroy_stream(pick_explicit_stream());
          break;
        case 2:
          end_thread(pick_worker());
          break;
        default: {
          std::vector<std::size_t> live;
          for (std::size_t i = 0; i < pool_slots; ++i)
            if (pools_[i].handle) live.push_back(i);
          const std::size_t slot = pick_of(live);
          const int t = any_thread();
          log("destroy pool" + std::to_string(slot) + " on t" + std::to_string(t));
          drop_pool(slot, t);
        }
      }
      if (!failed) check_after_op();
    }
    dev_.reset();
    if (failed) return;
    // Everything is gone: every queue destroyed, every upstream byte returned, no violation.
    if (oracle_->live_queues() != 0)
      throw failure("teardown: " + std::to_string(oracle_->live_queues()) +
                    " queues never destroyed");
    if (const std::size_t held = under_.upstream_bytes ? under_.upstream_bytes() : 0; held != 0) {
      throw failure("teardown: " + std::to_string(held) +
                    " upstream bytes never returned (a pool or a block leaked)");
    }
    auto v = oracle_->violations();
    if (!v.empty()) throw failure("oracle (teardown): " + v.front());
    auto h = backend_violations();
    if (!h.empty()) throw failure("backend checker (teardown): " + h.front());
  }

  void fail(const std::string& m) {
    if (r_.ok) {
      r_.ok = false;
      // The oracle's first violation explains an exception that followed from it.
      auto v = oracle_->violations();
      r_.failure =
          v.empty() || m.rfind("oracle", 0) == 0 ? m : "oracle: " + v.front() + "\n  then: " + m;
    }
  }

  chooser& c_;
  const run_options& o_;
  run_result& r_;
  std::shared_ptr<hb_oracle> oracle_ = std::make_shared<hb_oracle>();
  backend_under_test under_;
  pool_options options_;
  std::optional<device> dev_;
  std::array<pool_slot, pool_slots> pools_;
  std::array<std::unique_ptr<worker>, max_workers + 1> workers_;
  std::vector<stream_slot> streams_;
  std::vector<block> blocks_;
  int next_stream_ = 0;
  int next_block_ = 0;
};

}  // namespace

run_result run_sequence(chooser& c, const run_options& o) {
  run_result r;
  sequence s(c, o, r);
  s.run();
  return r;
}

std::string format_report(const run_result& r) {
  std::ostringstream s;
  s << "FAILED: " << r.failure << "\n  configuration: " << r.config << "\n  operations ("
    << r.ops.size() << "):\n";
  for (const auto& op : r.ops) s << "    " << op << "\n";
  return s.str();
}

}  // namespace streampool::model
