// libFuzzer target over C ABI call sequences (docs/testing.md, "Fuzzing"; issue 9).
//
// The input bytes choose a sequence of calls of include/streampool.h on two host devices (checking
// mode): streams and pools created and destroyed, allocations of any size (0, small, large,
// absurd), frees that are valid or not (double free, a freed pointer, an interior pointer, a wild
// pointer, another pool's handle, another device's stream), record_use, the copy and fill helpers
// on valid ranges and on bad ones (freed, overrunning, unregistered, another device), foreign
// memory registered and unregistered, a device handle dropped early, the allocation log's
// refusals while nothing records. Issue 45 added: every handle kind destroyed, then used and
// destroyed again (refused, naming the handle), handles of the wrong kind and values that are no
// handle; the *_native calls on the streams' own queues, on another device's queue and on
// garbage; each free path given the other's memory (refused, nothing freed); native stream
// releases between calls; wrappers whose owning stream is destroyed under them (orphans).
//
// A shadow model predicts each call's status exactly where the contract fixes it (every misuse
// gives STREAMPOOL_STATUS_INVALID_ARGUMENT) and holds the contents of every live allocation and
// registered range: each successful helper updates it, each read back through sp_memcpy_to_host is
// compared with it, so a write that lands in the wrong place is caught. At the end every range is
// read back, everything is freed and destroyed, the race detector must have seen nothing and the
// devices must hold no upstream memory. Any mismatch prints what happened and aborts, so libFuzzer
// keeps the input; replay it with `./c_api_fuzzer crash-<hash>`.
//
// Wild pointers go only where the API promises to detect them: the helpers' device pointers (the
// registry), sp_pool_deallocate and sp_pool_record_use (the registry, then the pool's page map).
// Host pointers are always valid buffers of the fuzzer: the contract leaves them unchecked.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streampool.h"

namespace {

// ---- input ------------------------------------------------------------------------------------

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool done() const { return pos_ >= size_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint64_t bytes(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | byte();
    return v;
  }
  /// A value in [0, n) (n > 0).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(bytes(4) % n); }
  /// A value in [0, n], biased towards the ends (where off-by-one bugs live).
  std::size_t upto(std::size_t n) {
    switch (byte() % 4) {
      case 0:
        return 0;
      case 1:
        return n;
      case 2:
        return n > 0 ? n - 1 : 0;
      default:
        return static_cast<std::size_t>(bytes(4) % (n + 1));
    }
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// ---- failure ----------------------------------------------------------------------------------

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "c_api_fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::string ptr_text(const void* p) {
  std::array<char, 32> b{};
  std::snprintf(b.data(), b.size(), "%p", p);
  return b.data();
}

/// The call's status must be `want`; a refusal must come with a message naming `function`.
void expect(sp_status_t got, sp_status_t want, const char* call, const char* function) {
  if (got != want) {
    fail("unexpected status", std::string(call) + " -> " + sp_status_string(got) + " (" +
                                  sp_last_error_message() + "), expected " +
                                  sp_status_string(want));
  }
  if (got != STREAMPOOL_STATUS_SUCCESS && std::strstr(sp_last_error_message(), function) == nullptr)
    fail("message does not name the function", std::string(call) + ": " + sp_last_error_message());
}

void expect_ok(sp_status_t got, const char* call) {
  expect(got, STREAMPOOL_STATUS_SUCCESS, call, "");
}

// ---- the model --------------------------------------------------------------------------------

constexpr int devices = 2;
constexpr std::size_t max_streams = 4;
constexpr std::size_t max_pools = 3;
constexpr std::size_t max_allocations = 24;
constexpr std::size_t max_freed = 16;
constexpr std::size_t foreign_buffers = 2;
constexpr std::size_t foreign_size = 8192;

struct stream_slot {
  sp_stream_t handle = nullptr;
  int device = 0;
};

/// A wrapper (sp_stream_wrap) of a stream slot's queue; an orphan once that stream is destroyed.
struct wrapper_slot {
  sp_stream_t handle = nullptr;
  int device = 0;
  int owner = -1;  // index in streams_, -1 once the owner is gone (an orphan)
};

constexpr std::size_t max_wrappers = 3;
constexpr std::size_t max_dead = 16;

struct pool_slot {
  sp_pool_t handle = nullptr;
  int device = 0;
  int id = 0;  // the pool itself (allocations outlive handles)
};

/// A live allocation or a registered foreign range, with what its bytes must be.
struct range {
  std::uint8_t* ptr = nullptr;
  std::size_t size = 0;
  int device = 0;
  int pool = -1;        // pool id; -1 for a registration
  bool native = false;  // sp_pool_allocate_native: the helpers do not know it
  // Native memory: the streams_ slot whose queue allocated it, -1 once that stream is gone. Its
  // free goes there: the native free waits for the freeing stream only (the contract).
  int queue_slot = -1;
  std::uint8_t* shadow = nullptr;   // expected contents (size bytes)
  std::vector<std::uint8_t> owned;  // the shadow of an allocation
};

struct foreign_buffer {
  std::unique_ptr<std::uint8_t[]> memory;
  std::vector<std::uint8_t> shadow;  // outlives registrations: unregistered bytes must not change
};

class session {
 public:
  explicit session(input& in) : in_(in) {
    for (int d = 0; d < devices; ++d) {
      sp_host_options_t o;
      expect_ok(sp_host_options_init(&o), "sp_host_options_init");
      o.checking = 1;
      o.max_delay_us = in_.byte() % 4 == 0 ? 5 : 0;
      o.seed = in_.byte();
      o.total_memory = std::size_t{48} << 20;  // absurd requests fail before reaching malloc
      o.granularity = std::size_t{64} << 10;
      o.device_wait = in_.byte() % 4 != 0 ? 1 : 0;
      o.virtual_memory = in_.byte() % 2;
      expect_ok(sp_device_create_host(&o, &device_[d]), "sp_device_create_host");
    }
    for (std::size_t i = 0; i < foreign_buffers; ++i) {
      foreign_buffer& f = foreign_[i];
      f.memory = std::make_unique<std::uint8_t[]>(foreign_size);
      f.shadow.resize(foreign_size);
      for (std::size_t k = 0; k < foreign_size; ++k)
        f.memory[k] = f.shadow[k] = static_cast<std::uint8_t>(k * 13 + i);
    }
    // At least one stream, so that every operation has something to run on.
    create_stream(0);
  }

  void run() {
    for (int step = 0; step < 96 && !in_.done(); ++step) step_once();
    finish();
  }

 private:
  // ---- helpers of the model --------------------------------------------------------------------

  stream_slot* pick_stream() {
    std::vector<stream_slot*> live;
    for (auto& s : streams_)
      if (s.handle != nullptr) live.push_back(&s);
    return live.empty() ? nullptr : live[in_.below(live.size())];
  }
  pool_slot* pick_pool() {
    std::vector<pool_slot*> live;
    for (auto& p : pools_)
      if (p.handle != nullptr) live.push_back(&p);
    return live.empty() ? nullptr : live[in_.below(live.size())];
  }
  /// A live handle of pool `id`, or nullptr.
  pool_slot* handle_of(int id) {
    for (auto& p : pools_)
      if (p.handle != nullptr && p.id == id) return &p;
    return nullptr;
  }
  range* pick_range() {
    std::vector<range*> all;
    for (auto& a : allocations_)
      if (!a.native) all.push_back(&a);
    for (auto& r : registered_) all.push_back(&r);
    return all.empty() ? nullptr : all[in_.below(all.size())];
  }
  /// The model's answer: the live allocation or registration holding p, or nullptr.
  /// (An allocation of 0 bytes holds its own pointer.)
  range* known(const void* p) {
    const auto key = reinterpret_cast<std::uintptr_t>(p);
    for (auto* list : {&allocations_, &registered_}) {
      for (auto& r : *list) {
        if (r.native) continue;  // the helpers know only sp_pool_allocate's memory
        const auto base = reinterpret_cast<std::uintptr_t>(r.ptr);
        if (key == base || (key > base && key - base < r.size)) return &r;
      }
    }
    return nullptr;
  }
  bool is_live_start(const void* p) const {
    return std::any_of(allocations_.begin(), allocations_.end(),
                       [&](const range& a) { return a.ptr == p; });
  }
  /// Whether a helper on `s` may use [p, p + n) (n > 0).
  bool usable(const stream_slot& s, const void* p, std::size_t n) {
    range* r = known(p);
    if (r == nullptr || r->device != s.device) return false;
    const auto offset = static_cast<std::size_t>(static_cast<const std::uint8_t*>(p) - r->ptr);
    return n <= r->size - offset;
  }
  /// Where a byte of device memory is expected: the shadow byte for p (p known).
  std::uint8_t* shadow_of(const void* p) {
    range* r = known(p);
    return r->shadow + (static_cast<const std::uint8_t*>(p) - r->ptr);
  }

  /// A device pointer and a length for a helper: valid, overrunning, or bad in some way.
  std::pair<std::uint8_t*, std::size_t> pick_target(std::size_t max_len) {
    range* r = pick_range();
    const std::uint8_t kind = in_.byte() % 8;
    if (r != nullptr && kind < 4) {  // inside a known range
      const std::size_t offset = in_.upto(r->size);
      std::size_t n = in_.upto(std::min(r->size - offset, max_len));
      return {r->ptr + offset, n};
    }
    if (r != nullptr && kind == 4) {  // just past the end, or absurdly long
      const std::size_t offset = in_.upto(r->size);
      const std::size_t n =
          in_.byte() % 2 == 0 ? r->size - offset + 1 + in_.below(64) : SIZE_MAX - in_.below(64);
      return {r->ptr + offset, n};
    }
    const std::size_t n = 1 + in_.below(std::max<std::size_t>(max_len, 1));
    if (kind == 5 && !freed_.empty()) {  // freed memory (perhaps reused since: the model knows)
      return {freed_[in_.below(freed_.size())] + in_.below(16), n};
    }
    if (kind == 6) {  // a foreign buffer, registered or not
      foreign_buffer& f = foreign_[in_.below(foreign_buffers)];
      return {f.memory.get() + in_.below(foreign_size), std::min(n, std::size_t{64})};
    }
    // A wild pointer: the registry refuses it before anything dereferences it.
    return {reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(in_.bytes(8)) | 1U), n};
  }

  void remember_freed(std::uint8_t* p) {
    if (freed_.size() == max_freed) freed_.erase(freed_.begin());
    freed_.push_back(p);
  }

  // ---- operations ------------------------------------------------------------------------------

  void create_stream(int d) {
    for (auto& s : streams_) {
      if (s.handle != nullptr) continue;
      if (device_[d] == nullptr) return;
      expect_ok(sp_stream_create(device_[d], &s.handle), "sp_stream_create");
      s.device = d;
      return;
    }
  }

  void destroy_stream() {
    if (stream_slot* s = pick_stream())
      destroy_stream_at(static_cast<std::size_t>(s - streams_.data()));
  }

  void destroy_stream_at(std::size_t index) {
    stream_slot* s = &streams_[index];
    // sp_stream_release on a stream made here is sp_stream_destroy (it waits).
    if (in_.byte() % 4 == 0) {
      expect_ok(sp_stream_release(s->handle), "sp_stream_release");
    } else {
      expect_ok(sp_stream_destroy(s->handle), "sp_stream_destroy");
    }
    const auto i = static_cast<int>(index);
    for (auto& w : wrappers_)
      if (w.handle != nullptr && w.owner == i) w.owner = -1;  // its queue is gone
    // Its work is complete now: native memory allocated on it may be freed on any stream.
    for (auto& a : allocations_)
      if (a.queue_slot == i) a.queue_slot = -1;
    remember_dead(dead_streams_, s->handle);
    s->handle = nullptr;
  }

  void create_pool() {
    const int d = static_cast<int>(in_.byte() % devices);
    if (device_[d] == nullptr) return;
    for (auto& p : pools_) {
      if (p.handle != nullptr) continue;
      sp_pool_options_t o;
      expect_ok(sp_pool_options_init(&o), "sp_pool_options_init");
      static constexpr std::array<std::size_t, 4> limits{
          0, std::size_t{1} << 20, std::size_t{8} << 20, std::size_t{24} << 20};
      o.memory_limit = limits[in_.byte() % limits.size()];
      o.poison_on_free = in_.byte() % 2;
      o.virtual_memory = in_.byte() % 2;
      if (in_.byte() % 4 == 0) o.stream_cache_bytes = 4096;
      expect_ok(sp_pool_create(device_[d], &o, &p.handle), "sp_pool_create");
      p.device = d;
      p.id = next_pool_id_++;
      return;
    }
  }

  void destroy_pool() {
    pool_slot* p = pick_pool();
    if (p == nullptr) return;
    // Memory of sp_pool_allocate keeps the pool alive (it is freed later with pool NULL); memory of
    // the native path does not: its caller keeps the pool alive while it lives (the contract).
    for (const range& a : allocations_)
      if (a.native && a.pool == p->id) return;
    expect_ok(sp_pool_destroy(p->handle), "sp_pool_destroy");
    remember_dead(dead_pools_, p->handle);
    p->handle = nullptr;
  }

  std::size_t pick_size() {
    switch (in_.byte() % 8) {
      case 0:
        return 0;
      case 1:
        return 1 + in_.below(64);
      case 2:
        return 1 + in_.below(4096);
      case 3:
        return 1 + in_.below(std::size_t{64} << 10);
      case 4:
        return 1 + in_.below(std::size_t{1} << 20);
      case 5:
        return (std::size_t{2} << 20) + in_.below(std::size_t{4} << 20);  // large blocks
      case 6: {
        static constexpr std::array<std::size_t, 5> absurd{
            SIZE_MAX, SIZE_MAX - 255, std::size_t{1} << 62, std::size_t{1} << 40,
            std::size_t{64} << 20};
        return absurd[in_.byte() % absurd.size()];
      }
      default:
        return 1 + in_.below(256);
    }
  }

  void allocate() {
    pool_slot* p = pick_pool();
    stream_slot* s = pick_stream();
    if (p == nullptr || s == nullptr || allocations_.size() == max_allocations) return;
    const std::size_t size = pick_size();
    void* out = nullptr;
    const sp_status_t st = sp_pool_allocate(p->handle, size, s->handle, &out);
    if (s->device != p->device) {
      expect(st, STREAMPOOL_STATUS_INVALID_ARGUMENT, "sp_pool_allocate (stream of another device)",
             "device");
      return;
    }
    if (st != STREAMPOOL_STATUS_SUCCESS) {
      // Out of memory (the pool's limit, the device's size) or a size that overflows.
      if (st != STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY && st != STREAMPOOL_STATUS_INVALID_ARGUMENT)
        expect_ok(st, "sp_pool_allocate");
      if (out != nullptr) fail("output written on failure", ptr_text(out));
      return;
    }
    auto* mem = static_cast<std::uint8_t*>(out);
    if (mem == nullptr || reinterpret_cast<std::uintptr_t>(mem) % 256 != 0)
      fail("sp_pool_allocate returned a bad pointer", ptr_text(mem));
    for (const range& a : allocations_) {
      const std::size_t sa = std::max<std::size_t>(a.size, 1);
      const std::size_t sm = std::max<std::size_t>(size, 1);
      if (mem < a.ptr + sa && a.ptr < mem + sm)
        fail("allocations overlap", ptr_text(mem) + " and live " + ptr_text(a.ptr));
    }
    range r;
    r.ptr = mem;
    r.size = size;
    r.device = p->device;
    r.pool = p->id;
    r.owned.assign(size, static_cast<std::uint8_t>(in_.byte()));
    r.shadow = r.owned.data();
    std::erase(freed_, mem);
    if (size > 0) {
      // Known contents from the start, written on the allocating stream.
      expect_ok(sp_fill(s->handle, mem, r.owned[0], 1, size), "sp_fill (fresh allocation)");
    }
    allocations_.push_back(std::move(r));
  }

  void free_valid() {
    if (allocations_.empty()) return;
    const std::size_t i = in_.below(allocations_.size());
    range& a = allocations_[i];
    sp_pool_t pool = nullptr;
    bool wrong = false;
    switch (in_.byte() % 3) {
      case 0:
        break;  // NULL: the pool that allocated it
      case 1:
        if (pool_slot* own = handle_of(a.pool)) pool = own->handle;
        break;
      default:
        if (pool_slot* any = pick_pool()) {
          pool = any->handle;
          wrong = any->id != a.pool;
        }
    }
    sp_stream_t stream = nullptr;
    if (in_.byte() % 3 != 0) {
      if (stream_slot* s = pick_stream()) {
        stream = s->handle;
        wrong = wrong || s->device != a.device;
      }
    }
    // Memory of the native path is refused by this free (issue 45, finding 3): nothing is freed.
    wrong = wrong || a.native;
    const sp_status_t st = sp_pool_deallocate(pool, a.ptr, stream);
    expect(st, wrong ? STREAMPOOL_STATUS_INVALID_ARGUMENT : STREAMPOOL_STATUS_SUCCESS,
           a.native ? "sp_pool_deallocate (memory of sp_pool_allocate_native)"
                    : "sp_pool_deallocate (live pointer)",
           "");
    if (!wrong) {
      remember_freed(a.ptr);
      allocations_.erase(allocations_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  /// A pointer that is not the start of a live allocation (or nullptr if none is at hand).
  std::uint8_t* pick_bad_pointer() {
    std::uint8_t* p = nullptr;
    switch (in_.byte() % 4) {
      case 0:
        if (!freed_.empty()) p = freed_[in_.below(freed_.size())];  // double free
        break;
      case 1:
        if (!allocations_.empty()) {  // interior
          const range& a = allocations_[in_.below(allocations_.size())];
          if (a.size >= 2) p = a.ptr + 1 + in_.below(a.size - 1);
        }
        break;
      case 2:
        p = foreign_[in_.below(foreign_buffers)].memory.get() + in_.below(64);
        break;
      default:
        p = reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(in_.bytes(8)));
    }
    return p == nullptr || is_live_start(p) ? nullptr : p;
  }

  void free_invalid() {
    std::uint8_t* p = pick_bad_pointer();
    if (p == nullptr) return;
    pool_slot* pool = in_.byte() % 2 != 0 ? pick_pool() : nullptr;
    stream_slot* s = in_.byte() % 2 != 0 ? pick_stream() : nullptr;
    const sp_status_t st = sp_pool_deallocate(pool != nullptr ? pool->handle : nullptr, p,
                                              s != nullptr ? s->handle : nullptr);
    expect(st, STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_pool_deallocate (not a live allocation: " + ptr_text(p) + ")").c_str(), "");
  }

  void record_use() {
    stream_slot* s = pick_stream();
    if (s == nullptr) return;
    std::uint8_t* p = nullptr;
    bool good = false;
    int owner = -1;
    bool native = false;
    if (in_.byte() % 2 == 0 && !allocations_.empty()) {
      const range& a = allocations_[in_.below(allocations_.size())];
      p = a.ptr + (a.size > 0 ? in_.below(a.size) : 0);
      good = a.device == s->device;
      owner = a.pool;
      // The native path has no C-layer record: only its pool, given, can take the use, and only
      // at the block's start.
      native = a.native;
      if (native) good = good && p == a.ptr;
    } else {
      p = pick_bad_pointer();
      if (p == nullptr || known(p) != nullptr) return;  // an interior pointer is a valid use
    }
    pool_slot* pool = in_.byte() % 2 != 0 ? pick_pool() : nullptr;
    if (pool != nullptr && pool->id != owner) good = false;
    if (native && pool == nullptr) good = false;
    const sp_status_t st =
        sp_pool_record_use(pool != nullptr ? pool->handle : nullptr, p, s->handle);
    expect(st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_pool_record_use " + ptr_text(p)).c_str(), "");
  }

  void copy_to_device() {
    stream_slot* s = pick_stream();
    if (s == nullptr) return;
    auto [dst, n] = pick_target(std::size_t{256} << 10);
    const bool good = n == 0 || usable(*s, dst, n);
    if (good) host_.resize(std::max(host_.size(), n));
    const std::uint8_t seed = in_.byte();
    for (std::size_t k = 0; good && k < n; ++k) host_[k] = static_cast<std::uint8_t>(seed + k * 7);
    // A refused call must not read the source: a small host buffer stands in for an absurd n.
    const sp_status_t st = sp_memcpy_to_device(s->handle, dst, host_.data(), n);
    expect(st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_memcpy_to_device " + ptr_text(dst) + " " + std::to_string(n)).c_str(),
           "sp_memcpy_to_device");
    if (good && n > 0) std::memcpy(shadow_of(dst), host_.data(), n);
  }

  void copy_to_host() {
    stream_slot* s = pick_stream();
    if (s == nullptr) return;
    auto [src, n] = pick_target(std::size_t{256} << 10);
    const bool good = n == 0 || usable(*s, src, n);
    if (good) host_.resize(std::max(host_.size(), n));
    host_.resize(std::max<std::size_t>(host_.size(), 1));
    const sp_status_t st = sp_memcpy_to_host(s->handle, host_.data(), src, n);
    expect(st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_memcpy_to_host " + ptr_text(src) + " " + std::to_string(n)).c_str(),
           "sp_memcpy_to_host");
    if (good && n > 0) compare(src, host_.data(), n);
  }

  void copy_device() {
    stream_slot* s = pick_stream();
    if (s == nullptr) return;
    auto [src, n] = pick_target(std::size_t{256} << 10);
    std::uint8_t* dst = nullptr;
    range* r = pick_range();
    if (r != nullptr && in_.byte() % 4 != 0) {
      dst = r->ptr + in_.upto(r->size);
    } else {
      dst = pick_target(0).first;
    }
    // Integers: wild pointers plus an absurd n must not be pointer arithmetic.
    const auto s0 = reinterpret_cast<std::uintptr_t>(src);
    const auto d0 = reinterpret_cast<std::uintptr_t>(dst);
    const bool good =
        n == 0 || (usable(*s, src, n) && usable(*s, dst, n) && !(s0 < d0 + n && d0 < s0 + n));
    const sp_status_t st = sp_memcpy_device(s->handle, dst, src, n);
    expect(st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_memcpy_device " + ptr_text(dst) + " <- " + ptr_text(src) + " " + std::to_string(n))
               .c_str(),
           "sp_memcpy_device");
    if (good && n > 0) std::memmove(shadow_of(dst), shadow_of(src), n);
  }

  void fill() {
    stream_slot* s = pick_stream();
    if (s == nullptr) return;
    static constexpr std::array<std::size_t, 6> sizes{1, 2, 4, 8, 3, 0};
    const std::size_t element = sizes[in_.byte() % sizes.size()];
    auto [dst, n] = pick_target(std::size_t{256} << 10);
    const std::uint64_t pattern = in_.bytes(8);
    const bool element_ok = element == 1 || element == 2 || element == 4 || element == 8;
    const std::size_t count = element_ok ? n / element : n;
    const bool good =
        element_ok &&
        (count == 0 || (count <= SIZE_MAX / element && usable(*s, dst, count * element)));
    const sp_status_t st = sp_fill(s->handle, dst, pattern, element, count);
    expect(
        st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
        ("sp_fill " + ptr_text(dst) + " " + std::to_string(count) + " x " + std::to_string(element))
            .c_str(),
        "sp_fill");
    if (good && count > 0) {
      std::uint8_t* out = shadow_of(dst);
      for (std::size_t k = 0; k < count * element; ++k)
        out[k] = static_cast<std::uint8_t>(pattern >> (8 * (k % element)));  // little-endian
    }
  }

  void register_memory() {
    const std::size_t b = in_.below(foreign_buffers);
    foreign_buffer& f = foreign_[b];
    const std::size_t offset = in_.upto(foreign_size - 1);
    const std::size_t n = in_.upto(foreign_size - offset);
    const int d = static_cast<int>(in_.byte() % devices);
    std::uint8_t* p = f.memory.get() + offset;
    bool good = device_[d] != nullptr && n > 0;
    for (const range& r : registered_)
      if (p < r.ptr + r.size && r.ptr < p + n) good = false;
    const sp_status_t st = sp_memory_register(device_[d], p, n);
    expect(st, good ? STREAMPOOL_STATUS_SUCCESS : STREAMPOOL_STATUS_INVALID_ARGUMENT,
           ("sp_memory_register " + ptr_text(p) + " " + std::to_string(n)).c_str(),
           "sp_memory_register");
    if (!good) return;
    range r;
    r.ptr = p;
    r.size = n;
    r.device = d;
    r.shadow = f.shadow.data() + offset;
    registered_.push_back(std::move(r));
  }

  void unregister_memory() {
    if (!registered_.empty() && in_.byte() % 4 != 0) {
      const std::size_t i = in_.below(registered_.size());
      expect_ok(sp_memory_unregister(registered_[i].ptr), "sp_memory_unregister");
      registered_.erase(registered_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    // Not the start of a registered range: refused.
    std::uint8_t* p = foreign_[in_.below(foreign_buffers)].memory.get() + in_.below(foreign_size);
    if (in_.byte() % 2 == 0) p = reinterpret_cast<std::uint8_t*>(in_.bytes(8) | 1U);
    for (const range& r : registered_)
      if (r.ptr == p) return;
    expect(sp_memory_unregister(p), STREAMPOOL_STATUS_INVALID_ARGUMENT, "sp_memory_unregister",
           "sp_memory_unregister");
  }

  void misc() {
    switch (in_.byte() % 8) {
      case 0:
        if (stream_slot* s = pick_stream()) expect_ok(sp_stream_synchronize(s->handle), "sync");
        break;
      case 1:
        if (pool_slot* p = pick_pool()) {
          size_t released = 0;
          expect_ok(sp_pool_trim(p->handle, &released), "sp_pool_trim");
        }
        break;
      case 2:
        if (pool_slot* p = pick_pool()) {
          static constexpr std::array<std::size_t, 3> limits{0, std::size_t{2} << 20,
                                                             std::size_t{16} << 20};
          expect_ok(sp_pool_set_memory_limit(p->handle, limits[in_.byte() % limits.size()]),
                    "sp_pool_set_memory_limit");
        }
        break;
      case 3: {  // the host backend has no legacy default stream: a clear refusal
        sp_stream_t s = nullptr;
        const int d = static_cast<int>(in_.byte() % devices);
        if (device_[d] == nullptr) break;
        expect(sp_stream_wrap(device_[d], nullptr, &s), STREAMPOOL_STATUS_INVALID_ARGUMENT,
               "sp_stream_wrap(NULL)", "sp_stream_wrap");
        if (s != nullptr) fail("output written on failure", "sp_stream_wrap");
        break;
      }
      case 4:
        if (pool_slot* p = pick_pool()) check_statistics(*p);
        break;
      case 5:  // the allocation log with nothing recording: refusals, a no-op phase, a stop of 0
        if (pool_slot* p = pick_pool()) {
          expect(sp_pool_record_start(p->handle, ""), STREAMPOOL_STATUS_INVALID_ARGUMENT,
                 "sp_pool_record_start(\"\")", "sp_pool_record_start");
          expect(sp_pool_record_phase(p->handle, nullptr), STREAMPOOL_STATUS_INVALID_ARGUMENT,
                 "sp_pool_record_phase(NULL)", "sp_pool_record_phase");
          expect_ok(sp_pool_record_phase(p->handle, "step 0 begin"), "sp_pool_record_phase");
          std::uint64_t events = 1;
          expect_ok(sp_pool_record_stop(p->handle, &events), "sp_pool_record_stop");
          if (events != 0) fail("events without a recording", "sp_pool_record_stop");
        }
        break;
      case 6:  // a snapshot drawn, then again with one byte of its JSON changed: drawn or refused
        if (pool_slot* p = pick_pool()) {
          const char* json = nullptr;
          const char* html = nullptr;
          size_t length = 0, html_length = 0;
          expect_ok(sp_pool_snapshot_json(p->handle, &json, &length), "sp_pool_snapshot_json");
          std::string text(json, length);
          expect_ok(sp_snapshot_html(text.data(), text.size(), "fuzz", &html, &html_length),
                    "sp_snapshot_html");
          text[in_.below(text.size())] = static_cast<char>(in_.byte());
          const sp_status_t st =
              sp_snapshot_html(text.data(), text.size(), nullptr, &html, &html_length);
          if (st != STREAMPOOL_STATUS_SUCCESS && st != STREAMPOOL_STATUS_INVALID_ARGUMENT)
            fail("neither drawn nor refused as invalid", "sp_snapshot_html");
        }
        break;
      default:
        verify_all();
        break;
    }
  }

  // ---- issue 45: handles that cannot crash, the native path, orphaned wrappers -----------------

  template <class Handle>
  static void remember_dead(std::vector<Handle>& dead, Handle h) {
    if (dead.size() == max_dead) dead.erase(dead.begin());
    dead.push_back(h);
  }

  /// The status and message of a call through a handle that must be refused: INVALID_ARGUMENT,
  /// naming the function and containing `needle`.
  static void expect_refused(sp_status_t st, const char* call, const char* function,
                             const char* needle) {
    expect(st, STREAMPOOL_STATUS_INVALID_ARGUMENT, call, function);
    if (std::strstr(sp_last_error_message(), needle) == nullptr)
      fail("refusal does not say why", std::string(call) + ": " + sp_last_error_message());
  }

  /// The streams_ slot of a live stream of device `d` (one is made if there is none).
  int stream_on(int d) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < streams_.size(); ++i)
        if (streams_[i].handle != nullptr && streams_[i].device == d) return static_cast<int>(i);
      create_stream(d);
    }
    fail("no stream", "device " + std::to_string(d));
  }

  void* native_of(int slot) {
    void* q = nullptr;
    expect_ok(sp_stream_native(streams_[static_cast<std::size_t>(slot)].handle, &q),
              "sp_stream_native");
    return q;
  }

  /// A native stream for a call on device `d`: a live stream's queue of `d` or of the other
  /// device, or a value that is no queue. `device` tells which (-1: garbage), `slot` whose.
  void* pick_native(int d, int& device, int& slot) {
    slot = -1;
    switch (in_.byte() % 8) {
      case 0:
        device = -1;
        return reinterpret_cast<void*>(static_cast<std::uintptr_t>(in_.bytes(8)) | 1U);
      case 1:
        if (stream_slot* s = pick_stream()) {
          device = s->device;
          slot = static_cast<int>(s - streams_.data());
          return native_of(slot);
        }
        [[fallthrough]];
      default:
        device = d;
        slot = stream_on(d);
        return native_of(slot);
    }
  }

  /// Where native memory `a` is freed: the queue that allocated it while its stream lives.
  void* free_queue(const range& a) {
    return native_of(a.queue_slot >= 0 ? a.queue_slot : stream_on(0));
  }

  /// Pools on device 0 only: native memory must be freed through its pool with a live queue of
  /// its device, and device 0 is never dropped.
  pool_slot* pick_pool_on_device_0() {
    std::vector<pool_slot*> live;
    for (auto& p : pools_)
      if (p.handle != nullptr && p.device == 0) live.push_back(&p);
    return live.empty() ? nullptr : live[in_.below(live.size())];
  }

  void native_op() {
    switch (in_.byte() % 5) {
      case 0:
      case 1: {  // allocate on a native stream: its own device's queue, another's, or garbage
        pool_slot* p = pick_pool_on_device_0();
        if (p == nullptr || allocations_.size() == max_allocations) return;
        int device = 0;
        int slot = -1;
        void* q = pick_native(0, device, slot);
        const std::size_t size = pick_size();
        void* out = nullptr;
        const sp_status_t st = sp_pool_allocate_native(p->handle, size, q, &out);
        if (device != 0) {
          expect(st, STREAMPOOL_STATUS_INVALID_ARGUMENT,
                 "sp_pool_allocate_native (not a queue of the pool's device)",
                 "sp_pool_allocate_native");
          if (out != nullptr) fail("output written on failure", "sp_pool_allocate_native");
          return;
        }
        if (st != STREAMPOOL_STATUS_SUCCESS) {
          if (st != STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY &&
              st != STREAMPOOL_STATUS_INVALID_ARGUMENT)
            expect_ok(st, "sp_pool_allocate_native");
          return;
        }
        auto* mem = static_cast<std::uint8_t*>(out);
        for (const range& a : allocations_) {
          const std::size_t sa = std::max<std::size_t>(a.size, 1);
          const std::size_t sm = std::max<std::size_t>(size, 1);
          if (mem < a.ptr + sa && a.ptr < mem + sm)
            fail("allocations overlap", ptr_text(mem) + " and live " + ptr_text(a.ptr));
        }
        std::erase(freed_, mem);
        range r;
        r.ptr = mem;
        r.size = size;
        r.device = 0;
        r.pool = p->id;
        r.native = true;
        r.queue_slot = slot;
        allocations_.push_back(std::move(r));
        return;
      }
      case 2: {  // the native free, of either path's memory
        if (allocations_.empty()) return;
        const std::size_t i = in_.below(allocations_.size());
        range& a = allocations_[i];
        pool_slot* own = handle_of(a.pool);
        if (own == nullptr || a.device != 0) {
          // The memory of a pool whose handle is gone (sp_pool_allocate's), or of device 1: the
          // native free through some device-0 pool must refuse it, changing nothing.
          pool_slot* any = pick_pool_on_device_0();
          if (any == nullptr) return;
          expect(sp_pool_deallocate_native(any->handle, a.ptr, native_of(stream_on(0))),
                 STREAMPOOL_STATUS_INVALID_ARGUMENT, "sp_pool_deallocate_native (not its memory)",
                 "");
          return;
        }
        const sp_status_t st = sp_pool_deallocate_native(
            own->handle, a.ptr, a.native ? free_queue(a) : native_of(stream_on(0)));
        if (!a.native) {
          // sp_pool_allocate's memory: refused, naming the free to use; it stays allocated.
          expect_refused(st, "sp_pool_deallocate_native (memory of sp_pool_allocate)",
                         "sp_pool_deallocate_native", "sp_pool_deallocate");
          return;
        }
        expect_ok(st, "sp_pool_deallocate_native");
        remember_freed(a.ptr);
        allocations_.erase(allocations_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
      case 3: {  // a use recorded on a native stream
        std::vector<range*> native;
        for (auto& a : allocations_)
          if (a.native) native.push_back(&a);
        if (native.empty()) return;
        range& a = *native[in_.below(native.size())];
        expect_ok(
            sp_pool_record_use_native(handle_of(a.pool)->handle, a.ptr, native_of(stream_on(0))),
            "sp_pool_record_use_native");
        return;
      }
      default: {  // the owner is about to destroy the stream: release it (or a garbage value)
        std::size_t n = 99;
        if (in_.byte() % 4 == 0) {
          void* garbage = reinterpret_cast<void*>(static_cast<std::uintptr_t>(in_.bytes(8)) | 8U);
          expect_ok(sp_native_stream_release(garbage, &n), "sp_native_stream_release (unknown)");
          if (n != 0) fail("released a handle never wrapped", ptr_text(garbage));
          return;
        }
        stream_slot* s = pick_stream();
        if (s == nullptr) return;
        void* q = nullptr;
        expect_ok(sp_stream_native(s->handle, &q), "sp_stream_native");
        expect_ok(sp_native_stream_release(q, &n), "sp_native_stream_release");
        if (n > devices) fail("more wrappers than devices", std::to_string(n));
        return;
      }
    }
  }

  void handle_misuse() {
    switch (in_.byte() % 6) {
      case 0:
        if (!dead_streams_.empty()) {
          sp_stream_t s = dead_streams_[in_.below(dead_streams_.size())];
          switch (in_.byte() % 4) {
            case 0:
              expect_refused(sp_stream_destroy(s), "sp_stream_destroy (twice)", "sp_stream_destroy",
                             "was destroyed");
              break;
            case 1:
              expect_refused(sp_stream_synchronize(s), "sp_stream_synchronize (destroyed)",
                             "sp_stream_synchronize", "was destroyed");
              break;
            case 2:
              if (range* r = pick_range()) {
                expect_refused(sp_fill(s, r->ptr, 0, 1, r->size), "sp_fill (destroyed stream)",
                               "sp_fill", "was destroyed");
              }
              break;
            default:
              if (pool_slot* p = pick_pool()) {
                void* out = nullptr;
                expect_refused(sp_pool_allocate(p->handle, 64, s, &out),
                               "sp_pool_allocate (destroyed stream)", "sp_pool_allocate",
                               "was destroyed");
                if (out != nullptr) fail("output written on failure", "sp_pool_allocate");
              }
          }
        }
        break;
      case 1:
        if (!dead_pools_.empty()) {
          sp_pool_t p = dead_pools_[in_.below(dead_pools_.size())];
          switch (in_.byte() % 3) {
            case 0:
              expect_refused(sp_pool_destroy(p), "sp_pool_destroy (twice)", "sp_pool_destroy",
                             "was destroyed");
              break;
            case 1: {
              std::size_t n = 0;
              expect_refused(sp_pool_trim(p, &n), "sp_pool_trim (destroyed)", "sp_pool_trim",
                             "was destroyed");
              break;
            }
            default:
              if (stream_slot* s = pick_stream()) {
                void* out = nullptr;
                expect_refused(sp_pool_allocate(p, 64, s->handle, &out),
                               "sp_pool_allocate (destroyed pool)", "sp_pool_allocate",
                               "was destroyed");
              }
          }
        }
        break;
      case 2:
        if (!dead_devices_.empty()) {
          sp_device_t d = dead_devices_[in_.below(dead_devices_.size())];
          sp_stream_t out = nullptr;
          if (in_.byte() % 2 == 0) {
            expect_refused(sp_stream_create(d, &out), "sp_stream_create (destroyed device)",
                           "sp_stream_create", "was destroyed");
            if (out != nullptr) fail("output written on failure", "sp_stream_create");
          } else {
            expect_refused(sp_device_destroy(d), "sp_device_destroy (twice)", "sp_device_destroy",
                           "was destroyed");
          }
        }
        break;
      case 3: {  // a handle of another kind
        stream_slot* s = pick_stream();
        pool_slot* p = pick_pool();
        if (s != nullptr) {
          std::size_t n = 0;
          // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the binding's mix-up
          expect_refused(sp_pool_trim(reinterpret_cast<sp_pool_t>(s->handle), &n),
                         "sp_pool_trim (a stream handle)", "sp_pool_trim", "not a pool handle");
        }
        if (p != nullptr) {
          // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the binding's mix-up
          expect_refused(sp_stream_synchronize(reinterpret_cast<sp_stream_t>(p->handle)),
                         "sp_stream_synchronize (a pool handle)", "sp_stream_synchronize",
                         "not a stream handle");
        }
        break;
      }
      default: {  // a value that no call made: any number whose kind nibble names no kind
        const auto v = static_cast<std::uintptr_t>(in_.bytes(8)) | 8U;
        switch (in_.byte() % 3) {
          case 0:
            expect_refused(sp_stream_destroy(reinterpret_cast<sp_stream_t>(v)),
                           "sp_stream_destroy (garbage)", "sp_stream_destroy",
                           "not a stream handle");
            break;
          case 1:
            expect_refused(sp_pool_destroy(reinterpret_cast<sp_pool_t>(v)),
                           "sp_pool_destroy (garbage)", "sp_pool_destroy", "not a pool handle");
            break;
          default: {
            std::uint64_t id = 0;
            expect_refused(sp_device_id(reinterpret_cast<sp_device_t>(v), &id),
                           "sp_device_id (garbage)", "sp_device_id", "not a device handle");
          }
        }
      }
    }
  }

  void wrapper_op() {
    wrapper_slot* w = &wrappers_[in_.below(max_wrappers)];
    if (w->handle == nullptr) {  // wrap a live stream's queue
      stream_slot* s = pick_stream();
      if (s == nullptr || device_[static_cast<std::size_t>(s->device)] == nullptr) return;
      void* q = nullptr;
      expect_ok(sp_stream_native(s->handle, &q), "sp_stream_native");
      expect_ok(sp_stream_wrap(device_[static_cast<std::size_t>(s->device)], q, &w->handle),
                "sp_stream_wrap");
      w->device = s->device;
      w->owner = static_cast<int>(s - streams_.data());
      return;
    }
    switch (in_.byte() % 5) {
      case 0: {  // work through it: refused once its owner is gone, naming both
        range* r = pick_range();
        if (r == nullptr || r->size == 0 || r->device != w->device) return;
        const std::uint8_t value = in_.byte();
        const sp_status_t st = sp_fill(w->handle, r->ptr, value, 1, r->size);
        if (w->owner < 0) {
          expect_refused(st, "sp_fill (orphaned wrapper)", "sp_fill", "was destroyed");
          return;
        }
        expect_ok(st, "sp_fill (wrapper)");
        std::memset(r->shadow, value, r->size);
        return;
      }
      case 1:  // never hangs, orphan or not
        expect_ok(sp_stream_synchronize(w->handle), "sp_stream_synchronize (wrapper)");
        return;
      case 2:  // its queue's stream goes first: the wrapper becomes an orphan
        if (w->owner >= 0) destroy_stream_at(static_cast<std::size_t>(w->owner));
        return;
      default:
        if (in_.byte() % 2 == 0) {
          expect_ok(sp_stream_release(w->handle), "sp_stream_release (wrapper)");
        } else {
          expect_ok(sp_stream_destroy(w->handle), "sp_stream_destroy (wrapper)");
        }
        remember_dead(dead_streams_, w->handle);
        w->handle = nullptr;
    }
  }

  void drop_device() {
    // Device 0 stays for the end-of-run checks; device 1's handle may go at any time, and its
    // streams, pools and memory keep working.
    if (device_[1] == nullptr) return;
    expect_no_violations(device_[1]);
    expect_ok(sp_device_destroy(device_[1]), "sp_device_destroy");
    remember_dead(dead_devices_, device_[1]);
    device_[1] = nullptr;
  }

  void step_once() {
    switch (in_.byte() % 19) {
      case 16:
        native_op();
        break;
      case 17:
        handle_misuse();
        break;
      case 18:
        wrapper_op();
        break;
      case 0:
        create_stream(static_cast<int>(in_.byte() % devices));
        break;
      case 1:
        destroy_stream();
        break;
      case 2:
        create_pool();
        break;
      case 3:
        destroy_pool();
        break;
      case 4:
      case 5:
        allocate();
        break;
      case 6:
        free_valid();
        break;
      case 7:
        free_invalid();
        break;
      case 8:
        record_use();
        break;
      case 9:
        copy_to_device();
        break;
      case 10:
        copy_to_host();
        break;
      case 11:
        copy_device();
        break;
      case 12:
        fill();
        break;
      case 13:
        in_.byte() % 2 == 0 ? register_memory() : unregister_memory();
        break;
      case 14:
        misc();
        break;
      default:
        if (in_.byte() % 8 == 0) {
          drop_device();
        } else {
          allocate();
        }
    }
  }

  // ---- checks ----------------------------------------------------------------------------------

  void compare(const void* device_ptr, const std::uint8_t* got, std::size_t n) {
    const std::uint8_t* want = shadow_of(device_ptr);
    for (std::size_t k = 0; k < n; ++k) {
      if (got[k] != want[k]) {
        fail("corrupted contents", "byte " + std::to_string(k) + " at " + ptr_text(device_ptr) +
                                       " is " + std::to_string(got[k]) + ", expected " +
                                       std::to_string(want[k]));
      }
    }
  }

  /// Reads every live range back (through a stream of its device) and compares it.
  void verify_all() {
    std::vector<range*> all;
    for (auto& a : allocations_)
      if (!a.native) all.push_back(&a);
    for (auto& r : registered_) all.push_back(&r);
    for (range* r : all) {
      if (r->size == 0) continue;
      stream_slot* s = nullptr;
      for (auto& c : streams_)
        if (c.handle != nullptr && c.device == r->device) s = &c;
      if (s == nullptr) continue;
      host_.resize(std::max(host_.size(), r->size));
      expect_ok(sp_memcpy_to_host(s->handle, host_.data(), r->ptr, r->size),
                "sp_memcpy_to_host (verify)");
      compare(r->ptr, host_.data(), r->size);
    }
  }

  void check_statistics(const pool_slot& p) {
    sp_pool_statistics_t st;
    expect_ok(sp_pool_statistics_init(&st), "sp_pool_statistics_init");
    expect_ok(sp_pool_get_statistics(p.handle, &st), "sp_pool_get_statistics");
    std::size_t requested = 0;
    for (const range& a : allocations_)
      if (a.pool == p.id) requested += a.size;
    if (st.live_bytes < requested) {
      fail("statistics", "live_bytes " + std::to_string(st.live_bytes) + " < requested " +
                             std::to_string(requested) + " of live allocations");
    }
  }

  static void expect_no_violations(sp_device_t d) {
    size_t n = 0;
    expect_ok(sp_device_violation_count(d, &n), "sp_device_violation_count");
    if (n != 0) {
      const char* text = nullptr;
      expect_ok(sp_device_violation_message(d, 0, &text), "sp_device_violation_message");
      fail("race detector", text != nullptr ? text : "?");
    }
  }

  void finish() {
    // Foreign memory never reached by a helper keeps its contents: check it directly too.
    for (auto& s : streams_)
      if (s.handle != nullptr) expect_ok(sp_stream_synchronize(s.handle), "sync");
    for (auto& f : foreign_) {
      if (std::memcmp(f.memory.get(), f.shadow.data(), foreign_size) != 0)
        fail("corrupted contents", "a foreign buffer differs from its shadow");
    }
    verify_all();
    for (range& a : allocations_) {
      if (!a.native) {
        expect_ok(sp_pool_deallocate(nullptr, a.ptr, nullptr), "sp_pool_deallocate (final)");
        continue;
      }
      // Native memory: its pool's handle is alive (destroy_pool waits for it) and on device 0.
      expect_ok(sp_pool_deallocate_native(handle_of(a.pool)->handle, a.ptr, free_queue(a)),
                "sp_pool_deallocate_native (final)");
    }
    allocations_.clear();
    for (auto& w : wrappers_) {
      if (w.handle != nullptr)
        expect_ok(sp_stream_destroy(w.handle), "sp_stream_destroy (wrapper)");
      w.handle = nullptr;
    }
    for (range& r : registered_)
      expect_ok(sp_memory_unregister(r.ptr), "sp_memory_unregister (final)");
    registered_.clear();
    for (auto& p : pools_) {
      if (p.handle != nullptr) expect_ok(sp_pool_destroy(p.handle), "sp_pool_destroy (final)");
      p.handle = nullptr;
    }
    for (auto& s : streams_) {
      if (s.handle != nullptr) expect_ok(sp_stream_destroy(s.handle), "sp_stream_destroy");
      s.handle = nullptr;
    }
    for (sp_device_t& d : device_) {
      if (d == nullptr) continue;
      expect_no_violations(d);
      size_t upstream = 1;
      expect_ok(sp_device_upstream_bytes(d, &upstream), "sp_device_upstream_bytes");
      if (upstream != 0)
        fail("leak", std::to_string(upstream) + " upstream bytes after everything was freed");
      expect_ok(sp_device_destroy(d), "sp_device_destroy");
      d = nullptr;
    }
  }

  input& in_;
  std::array<sp_device_t, devices> device_{};
  std::array<stream_slot, max_streams> streams_{};
  std::array<pool_slot, max_pools> pools_{};
  std::array<wrapper_slot, max_wrappers> wrappers_{};
  // Handles destroyed earlier: every call through them must be refused, forever.
  std::vector<sp_stream_t> dead_streams_;
  std::vector<sp_pool_t> dead_pools_;
  std::vector<sp_device_t> dead_devices_;
  int next_pool_id_ = 0;
  std::vector<range> allocations_;
  std::vector<range> registered_;
  std::vector<std::uint8_t*> freed_;  // pointers freed earlier (may have been handed out again)
  std::array<foreign_buffer, foreign_buffers> foreign_{};
  std::vector<std::uint8_t> host_ = std::vector<std::uint8_t>(4096);
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  session s(in);
  s.run();
  return 0;
}
