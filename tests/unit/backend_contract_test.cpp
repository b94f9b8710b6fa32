// The backend contract (include/streampool/backend.hpp) is checked once, by backend's public
// wrappers: every malformed call is refused with logic_error naming the backend and the values,
// and the backend's virtual is never reached. A counting fake backend records every call that
// gets through; the host backend shows the same checks apply to a real one.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>

#include "streampool/backend.hpp"
#include "streampool/host.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t granularity = 64 * kib;
constexpr std::size_t granule = 4 * granularity;

/// Hands out distinct fake handles and counts every virtual that is reached.
class counting_backend final : public sp::backend {
 public:
  explicit counting_backend(bool virtual_memory = true)
      : backend("fake", caps_for(virtual_memory)) {}

  int calls = 0;                      ///< virtuals reached, all of them
  sp::native_queue next_queue = &q_;  ///< what do_create_queue returns
  sp::native_marker next_marker = &m_;

  [[nodiscard]] sp::native_queue queue() { return &q_; }
  [[nodiscard]] sp::native_marker marker() { return &m_; }
  [[nodiscard]] sp::native_physical physical() { return &h_; }
  /// A granule-aligned address (never dereferenced).
  [[nodiscard]] static void* aligned_address() {
    return reinterpret_cast<void*>(std::uintptr_t{1} << 40);  // NOLINT(performance-no-int-to-ptr)
  }

 private:
  static sp::backend_caps caps_for(bool virtual_memory) {
    sp::backend_caps c;
    c.granularity = granularity;
    c.virtual_memory = virtual_memory;
    c.vm_granularity = granule;
    return c;
  }

  void* do_allocate(std::size_t) override {
    ++calls;
    return aligned_address();
  }
  void do_deallocate(void*, std::size_t) noexcept override { ++calls; }
  sp::native_queue do_create_queue() override {
    ++calls;
    return next_queue;
  }
  void do_destroy_queue(sp::native_queue) noexcept override { ++calls; }
  void do_submit(sp::native_queue, const sp::command&) override { ++calls; }
  sp::native_marker do_record(sp::native_queue) override {
    ++calls;
    return next_marker;
  }
  bool do_query(sp::native_marker) override {
    ++calls;
    return true;
  }
  void do_wait_host(sp::native_marker) override { ++calls; }
  void do_wait_device(sp::native_queue, sp::native_marker) override { ++calls; }
  void do_release_marker(sp::native_marker) noexcept override { ++calls; }
  void* do_reserve(std::size_t) override {
    ++calls;
    return aligned_address();
  }
  void do_unreserve(void*, std::size_t) noexcept override { ++calls; }
  sp::native_physical do_create_physical() override {
    ++calls;
    return &h_;
  }
  void do_release_physical(sp::native_physical) noexcept override { ++calls; }
  bool do_map(void*, std::span<const sp::native_physical>) override {
    ++calls;
    return true;
  }
  void do_unmap(void*, std::size_t) noexcept override { ++calls; }

  int q_ = 0, m_ = 0, h_ = 0;
};

/// `call` throws streampool::logic_error whose message contains every one of `parts`, and the
/// backend's virtuals are not reached.
void expect_refused(counting_backend& b, const std::function<void()>& call,
                    std::initializer_list<std::string> parts) {
  const int before = b.calls;
  try {
    call();
    ADD_FAILURE() << "not refused";
  } catch (const sp::logic_error& e) {
    const std::string what = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
  }
  EXPECT_EQ(b.calls, before) << "the backend's virtual was reached";
}

/// `call` passes the checks: exactly one virtual is reached.
void expect_passed(counting_backend& b, const std::function<void()>& call) {
  const int before = b.calls;
  EXPECT_NO_THROW(call());
  EXPECT_EQ(b.calls, before + 1);
}

sp::command kernel(sp::kernel_kind kind, sp::op fn, const void* in0, const void* in1, void* out,
                   std::size_t n, bool has_scalar = false, sp::dtype t = sp::dtype::f32) {
  return sp::command::make(
      sp::kernel_command{kind, fn, t, in0, in1, out, n, sp::scalar{}, has_scalar});
}

float buf[64];

// ---- kernel.hpp's predicates, written out as the table kernel.hpp documents -----------------

static_assert(sp::is_unary(sp::op::sqrt) && !sp::is_unary(sp::op::add));
static_assert(sp::is_binary(sp::op::div) && !sp::is_binary(sp::op::axpy));
static_assert(sp::is_fold(sp::op::max) && !sp::is_fold(sp::op::sub));
static_assert(sp::valid_for(sp::kernel_kind::map_binary, sp::op::axpy, true));
static_assert(!sp::valid_for(sp::kernel_kind::map_unary, sp::op::axpy, true));
static_assert(!sp::valid_for(sp::kernel_kind::map_unary, sp::op::negate, true));
static_assert(!sp::valid_for(sp::kernel_kind::map_unary, sp::op::add, false));
static_assert(!sp::valid_for(static_cast<sp::kernel_kind>(9), sp::op::add, false));

TEST(KernelPredicates, ValidForMatchesTheDocumentedTable) {
  using sp::op;
  const std::array<op, 12> ops{op::identity, op::negate, op::abs, op::sqrt, op::square, op::add,
                               op::sub,      op::mul,    op::div, op::min,  op::max,    op::axpy};
  for (op fn : ops) {
    const bool unary = fn == op::identity || fn == op::negate || fn == op::abs || fn == op::sqrt ||
                       fn == op::square;
    const bool fold = fn == op::add || fn == op::mul || fn == op::min || fn == op::max;
    const bool binary = !unary && fn != op::axpy;
    EXPECT_EQ(sp::valid_for(sp::kernel_kind::map_unary, fn, false), unary) << sp::op_name(fn);
    EXPECT_EQ(sp::valid_for(sp::kernel_kind::map_unary, fn, true), binary) << sp::op_name(fn);
    EXPECT_EQ(sp::valid_for(sp::kernel_kind::map_binary, fn, false), !unary) << sp::op_name(fn);
    for (auto k : {sp::kernel_kind::reduce, sp::kernel_kind::inclusive_scan,
                   sp::kernel_kind::exclusive_scan}) {
      EXPECT_EQ(sp::valid_for(k, fn, false), fold) << sp::kind_name(k) << " " << sp::op_name(fn);
    }
  }
  EXPECT_STREQ(sp::op_name(static_cast<op>(200)), "unknown");
}

// ---- construction -------------------------------------------------------------------------------

TEST(BackendContract, CapabilitiesAreCheckedAtConstruction) {
  struct bare final : sp::backend {
    explicit bare(sp::backend_caps c) : backend("bare", c) {}
    void* do_allocate(std::size_t) override { return nullptr; }
    void do_deallocate(void*, std::size_t) noexcept override {}
    sp::native_queue do_create_queue() override { return nullptr; }
    void do_destroy_queue(sp::native_queue) noexcept override {}
    void do_submit(sp::native_queue, const sp::command&) override {}
    sp::native_marker do_record(sp::native_queue) override { return nullptr; }
    bool do_query(sp::native_marker) override { return true; }
    void do_wait_host(sp::native_marker) override {}
    void do_wait_device(sp::native_queue, sp::native_marker) override {}
    void do_release_marker(sp::native_marker) noexcept override {}
  };
  sp::backend_caps c;
  c.granularity = 3 * kib;
  try {
    bare b(c);
    ADD_FAILURE() << "granularity 3072 accepted";
  } catch (const sp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'bare': granularity 3072"), std::string::npos)
        << e.what();
  }
  c.granularity = granularity;
  c.virtual_memory = true;
  c.vm_granularity = granularity / 2;
  EXPECT_THROW(bare{c}, sp::logic_error);
  c.vm_granularity = 3 * granularity;
  EXPECT_THROW(bare{c}, sp::logic_error);
  c.vm_granularity = 4 * granularity;
  EXPECT_NO_THROW(bare{c});
  c.virtual_memory = false;  // without virtual memory the granule is not used
  c.vm_granularity = 0;
  EXPECT_NO_THROW(bare{c});
}

TEST(BackendContract, HostBackendRefusesWhatEveryPoolRefuses) {
  try {
    (void)sp::make_host_backend({.granularity = 4096});
    ADD_FAILURE() << "granularity 4096 accepted";
  } catch (const sp::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("granularity 4096"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(sp::min_pool_granularity)), std::string::npos) << what;
  }
  EXPECT_THROW((void)sp::make_host_backend({.granularity = 96 * kib}), sp::logic_error);
  EXPECT_THROW((void)sp::make_host_backend({.granularity = 0}), sp::logic_error);
  EXPECT_NO_THROW((void)sp::make_host_backend({.granularity = sp::min_pool_granularity}));
}

// ---- the ten operations -------------------------------------------------------------------------

TEST(BackendContract, AllocateSizes) {
  counting_backend b;
  expect_refused(b, [&] { (void)b.allocate(0); }, {"fake", "0 bytes", "65536"});
  expect_refused(b, [&] { (void)b.allocate(granularity + 1); }, {"fake", "65537 bytes", "65536"});
  expect_passed(b, [&] { (void)b.allocate(3 * granularity); });
}

TEST(BackendContract, NullQueuesAndMarkers) {
  counting_backend b;
  const sp::command fill = sp::command::make(sp::fill_command{buf, 0, 4, 16});
  expect_refused(b, [&] { b.submit(nullptr, fill); }, {"fake", "submit", "null queue"});
  expect_refused(b, [&] { (void)b.record(nullptr); }, {"fake", "record", "null queue"});
  expect_refused(b, [&] { (void)b.query(nullptr); }, {"fake", "query", "null marker"});
  expect_refused(b, [&] { b.wait_host(nullptr); }, {"fake", "wait_host", "null marker"});
  expect_refused(b, [&] { b.wait_device(nullptr, b.marker()); }, {"fake", "wait_device", "(nil)"});
  expect_refused(b, [&] { b.wait_device(b.queue(), nullptr); }, {"fake", "wait_device", "(nil)"});
  expect_passed(b, [&] { b.submit(b.queue(), fill); });
  expect_passed(b, [&] { (void)b.query(b.marker()); });
  expect_passed(b, [&] { b.wait_host(b.marker()); });
  expect_passed(b, [&] { b.wait_device(b.queue(), b.marker()); });
}

TEST(BackendContract, NullResultsAreNeverHandedOut) {
  counting_backend b;
  b.next_queue = nullptr;
  b.next_marker = nullptr;
  EXPECT_THROW((void)b.create_queue(), sp::logic_error);
  EXPECT_THROW((void)b.record(b.queue()), sp::logic_error);
  b.next_queue = b.queue();
  b.next_marker = b.marker();
  EXPECT_EQ(b.create_queue(), b.queue());
  EXPECT_EQ(b.record(b.queue()), b.marker());
}

TEST(BackendContract, CommandKind) {
  counting_backend b;
  sp::command c = sp::command::make(sp::fill_command{buf, 0, 4, 16});
  c.kind = static_cast<sp::command_kind>(7);
  expect_refused(b, [&] { b.submit(b.queue(), c); }, {"fake", "command kind 7"});
}

TEST(BackendContract, Copies) {
  counting_backend b;
  auto copy = [](void* dst, const void* src, std::size_t bytes) {
    return sp::command::make(sp::copy_command{dst, src, bytes, false, false});
  };
  expect_refused(b, [&] { b.submit(b.queue(), copy(buf, nullptr, 16)); },
                 {"fake", "copy of 16 bytes"});
  expect_refused(b, [&] { b.submit(b.queue(), copy(nullptr, buf, 16)); },
                 {"fake", "copy of 16 bytes"});
  expect_passed(b, [&] { b.submit(b.queue(), copy(nullptr, nullptr, 0)); });  // a no-op
  expect_passed(b, [&] { b.submit(b.queue(), copy(buf, buf + 8, 16)); });
}

TEST(BackendContract, Fills) {
  counting_backend b;
  auto fill = [](void* dst, std::size_t element_size, std::size_t count) {
    return sp::command::make(sp::fill_command{dst, 0, element_size, count});
  };
  for (std::size_t e : {0u, 3u, 5u, 16u}) {
    expect_refused(b, [&] { b.submit(b.queue(), fill(buf, e, 4)); },
                   {"fake", "element size " + std::to_string(e)});
  }
  expect_refused(b, [&] { b.submit(b.queue(), fill(nullptr, 4, 4)); },
                 {"fake", "4 elements", "null"});
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  expect_refused(b, [&] { b.submit(b.queue(), fill(buf, 4, huge)); },
                 {"fake", std::to_string(huge) + " elements of 4 bytes overflows"});
  for (std::size_t e : {1u, 2u, 4u, 8u})
    expect_passed(b, [&] { b.submit(b.queue(), fill(buf, e, 4)); });
  expect_passed(b, [&] { b.submit(b.queue(), fill(nullptr, 4, 0)); });
}

TEST(BackendContract, KernelKindsAndTypes) {
  counting_backend b;
  expect_refused(b,
                 [&] {
                   b.submit(b.queue(), kernel(static_cast<sp::kernel_kind>(9), sp::op::add, buf,
                                              nullptr, buf, 4));
                 },
                 {"fake", "kernel kind 9"});
  expect_refused(b,
                 [&] {
                   b.submit(b.queue(), kernel(sp::kernel_kind::reduce, sp::op::add, buf, nullptr,
                                              buf, 4, false, static_cast<sp::dtype>(17)));
                 },
                 {"fake", "reduce", "dtype 17"});
}

TEST(BackendContract, OpsNotValidForTheKind) {
  counting_backend b;
  using k = sp::kernel_kind;
  using sp::op;
  auto refused = [&](k kind, op fn, bool has_scalar, std::initializer_list<std::string> parts) {
    expect_refused(
        b, [&] { b.submit(b.queue(), kernel(kind, fn, buf, buf, buf, 4, has_scalar)); }, parts);
  };
  refused(k::map_unary, op::sqrt, true, {"fake", "map_unary", "sqrt (3)", "with a scalar"});
  refused(k::map_unary, op::add, false, {"fake", "map_unary", "add (5)", "without a scalar"});
  refused(k::map_unary, op::axpy, true, {"fake", "map_unary", "axpy"});
  refused(k::map_binary, op::negate, false, {"fake", "map_binary", "negate (1)"});
  refused(k::reduce, op::div, false, {"fake", "reduce", "div (8)"});
  refused(k::inclusive_scan, op::sub, false, {"fake", "inclusive_scan", "sub"});
  refused(k::exclusive_scan, op::sqrt, true, {"fake", "exclusive_scan", "sqrt"});
  refused(k::reduce, static_cast<op>(99), false, {"fake", "reduce", "unknown (99)"});
  // Also when there is nothing to do: the combination is refused, not skipped.
  expect_refused(
      b, [&] { b.submit(b.queue(), kernel(k::map_binary, op::abs, nullptr, nullptr, nullptr, 0)); },
      {"fake", "map_binary", "abs"});

  expect_passed(b,
                [&] { b.submit(b.queue(), kernel(k::map_unary, op::sqrt, buf, nullptr, buf, 4)); });
  expect_passed(
      b, [&] { b.submit(b.queue(), kernel(k::map_unary, op::max, buf, nullptr, buf, 4, true)); });
  expect_passed(
      b, [&] { b.submit(b.queue(), kernel(k::map_binary, op::axpy, buf, buf, buf, 4, true)); });
  expect_passed(b, [&] {
    b.submit(b.queue(), kernel(k::exclusive_scan, op::mul, buf, nullptr, buf, 4, true));
  });
}

TEST(BackendContract, KernelOperandsAndSizes) {
  counting_backend b;
  using k = sp::kernel_kind;
  using sp::op;
  auto submit = [&](k kind, const void* in0, const void* in1, void* out, std::size_t n) {
    return [&b, kind, in0, in1, out, n] {
      b.submit(b.queue(), kernel(kind, op::add, in0, in1, out, n));
    };
  };
  expect_refused(b, submit(k::map_binary, nullptr, buf, buf, 4),
                 {"fake", "map_binary", "null operand", "in0 (nil)"});
  expect_refused(b, submit(k::map_binary, buf, nullptr, buf, 4), {"fake", "in1 (nil)"});
  expect_refused(b, submit(k::inclusive_scan, buf, nullptr, nullptr, 4), {"fake", "out (nil)"});
  expect_refused(b, submit(k::reduce, nullptr, nullptr, nullptr, 0),
                 {"fake", "reduce", "0 elements", "out (nil)"});
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 4 + 1;  // * 4 overflows
  expect_refused(b, submit(k::reduce, buf, nullptr, buf, huge),
                 {"fake", std::to_string(huge) + " f32 elements overflows"});
  // Empty inputs have no memory; a reduction of nothing still writes its result.
  expect_passed(b, submit(k::map_binary, nullptr, nullptr, nullptr, 0));
  expect_passed(b, submit(k::reduce, nullptr, nullptr, buf, 0));
  expect_passed(b, submit(k::inclusive_scan, buf, nullptr, buf, 4));  // in1 is not read
}

// ---- the six virtual-memory operations ----------------------------------------------------------

TEST(BackendContract, VirtualMemoryNeedsTheCapability) {
  counting_backend b(/*virtual_memory=*/false);
  sp::native_physical h = b.physical();
  expect_refused(b, [&] { (void)b.reserve(granule); }, {"fake", "reserve", "no virtual memory"});
  expect_refused(b, [&] { (void)b.create_physical(); },
                 {"fake", "create_physical", "no virtual memory"});
  expect_refused(b,
                 [&] {
                   (void)b.map(counting_backend::aligned_address(), {&h, 1});
                 },
                 {"fake", "map", "no virtual memory"});
}

TEST(BackendContract, VirtualMemorySizesAndAlignment) {
  counting_backend b;
  void* base = counting_backend::aligned_address();
  auto* misaligned = static_cast<char*>(base) + granularity;  // aligned to less than a granule
  std::array<sp::native_physical, 2> handles{b.physical(), b.physical()};
  expect_refused(b, [&] { (void)b.reserve(0); }, {"fake", "reserve of 0 bytes", "262144"});
  expect_refused(b, [&] { (void)b.reserve(granule + granularity); },
                 {"fake", "reserve of 327680 bytes", "262144"});
  expect_refused(b, [&] { (void)b.map(misaligned, handles); },
                 {"fake", "map of 2 granules", "262144"});
  expect_refused(b, [&] { (void)b.map(nullptr, handles); }, {"fake", "map of 2 granules", "(nil)"});
  expect_refused(b, [&] { (void)b.map(base, {}); }, {"fake", "map of 0 granules"});
  handles[1] = nullptr;
  expect_refused(b, [&] { (void)b.map(base, handles); },
                 {"fake", "map of 2 granules", "handle 1 is null"});
  handles[1] = b.physical();
  expect_passed(b, [&] { (void)b.reserve(2 * granule); });
  expect_passed(b, [&] { (void)b.create_physical(); });
  expect_passed(b, [&] { (void)b.map(base, handles); });
}

// ---- the noexcept operations: they cannot throw, so a broken precondition aborts
// -----------------

#if STREAMPOOL_DEBUG_LEVEL >= 1
TEST(BackendContractDeathTest, NoexceptOperationsAbortNamingTheValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  counting_backend b;
  counting_backend plain(/*virtual_memory=*/false);
  void* base = counting_backend::aligned_address();
  EXPECT_DEATH(b.deallocate(nullptr, granularity), "fake: deallocate of 65536 bytes at \\(nil\\)");
  EXPECT_DEATH(b.deallocate(base, 100), "fake: deallocate of 100 bytes");
  EXPECT_DEATH(b.destroy_queue(nullptr), "fake: destroy_queue of a null queue");
  EXPECT_DEATH(b.release_marker(nullptr), "fake: release_marker of a null marker");
  EXPECT_DEATH(b.unreserve(base, 100), "fake: unreserve of 100 bytes");
  EXPECT_DEATH(b.release_physical(nullptr), "fake: release_physical of handle \\(nil\\)");
  EXPECT_DEATH(b.unmap(static_cast<char*>(base) + granularity, granule),
               "fake: unmap of 262144 bytes");
  EXPECT_DEATH(plain.unmap(base, granule), "fake: unmap.*virtual memory \\(no\\)");
  // The messages name the file from the source root.
  EXPECT_DEATH(b.destroy_queue(nullptr), "\\(src/core/stream/backend.cpp:[0-9]+\\)");

  // Well-formed calls go through, once each.
  const int before = b.calls;
  b.deallocate(base, granularity);
  b.destroy_queue(b.queue());
  b.release_marker(b.marker());
  b.unreserve(base, granule);
  b.release_physical(b.physical());
  b.unmap(base, 2 * granule);
  EXPECT_EQ(b.calls, before + 6);
}
#endif

// ---- the same checks in front of a real backend -------------------------------------------------

TEST(BackendContract, HostBackendGetsTheSameChecks) {
  auto b = sp::make_host_backend({.checking = true});
  sp::native_queue q = b->create_queue();
  EXPECT_THROW(b->submit(q, sp::command::make(sp::fill_command{buf, 0, 3, 4})), sp::logic_error);
  EXPECT_THROW(b->submit(q, kernel(sp::kernel_kind::reduce, sp::op::sqrt, buf, nullptr, buf, 4)),
               sp::logic_error);
  // Refused at submit, in the caller's thread: the worker never sees it (where it could only
  // have become a violation report).
  sp::native_marker m = b->record(q);
  b->wait_host(m);
  b->release_marker(m);
  b->destroy_queue(q);
  EXPECT_TRUE(sp::host_violations(*b).empty());
}

}  // namespace
