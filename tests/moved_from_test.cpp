// Issue 9, "No misuse gets through": a moved-from array, stream, pool or device is empty and
// consistent. Every public operation on it either is a documented no-op with the results of an
// empty object (size 0, no device id, owns nothing) or throws std::logic_error naming the type
// and saying it was moved from. Nothing crashes, and the object moved into works normally.
//
// Before the fix, the defaulted moves left an array with its size and no buffer, a device with
// its old id and no state, and a stream or pool whose every operation dereferenced null: the
// array tests failed (size 16 after the move) and every stream, pool and device test died with
// SIGSEGV, as did get_device() of a default-constructed array.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/stream/access.hpp"  // what the handles hold, to check that a moved-from one holds nothing
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

// Checks that `statement` throws std::logic_error whose message contains `expected`.
#define EXPECT_LOGIC_ERROR(statement, expected)                                       \
  do {                                                                                \
    try {                                                                             \
      statement;                                                                      \
      ADD_FAILURE() << #statement << " did not throw";                                \
    } catch (const std::logic_error& e) {                                             \
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)              \
          << #statement << " threw \"" << e.what() << "\", expected it to mention \"" \
          << (expected) << "\"";                                                      \
    } catch (...) {                                                                   \
      ADD_FAILURE() << #statement << " threw something other than std::logic_error";  \
    }                                                                                 \
  } while (0)

constexpr const char* array_moved = "array<float>: used after it was moved from";
constexpr const char* stream_moved = "stream: used after it was moved from";
constexpr const char* pool_moved = "pool: used after it was moved from";
constexpr const char* device_moved = "device: used after it was moved from";

sp::device host_device() { return sp::device(sp::make_host_backend({.checking = true})); }

// A statement `x = std::move(x)` written through a reference, so that compilers do not reject
// the self-move the test means to make.
template <class T>
void self_move_assign(T& x) {
  T& alias = x;
  x = std::move(alias);
}

// Every public operation of array<float> on an array that was moved from (or never had memory).
void expect_empty_array(sp::array<float>& a, sp::array<float>& live) {
  EXPECT_EQ(a.size(), 0U);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.use_count(), 0);

  // No-ops: what an array of zero elements does.
  a.upload(std::span<const float>{});
  std::vector<float> none;
  a.download(std::span<float>(none));
  EXPECT_TRUE(a.download().empty());
  a.fill(1.F);
  sp::array<float> other_empty;
  a.copy_from(other_empty);
  sp::array<float> v = a.view(0, 0);
  EXPECT_EQ(v.size(), 0U);
  EXPECT_EQ(v.data(), nullptr);
  sp::map(a, a, sp::op::negate);
  sp::map(a, a, sp::op::add, 2.F);
  sp::map(a, a, a, sp::op::add);
  sp::axpy(a, 2.F, a, a);
  sp::inclusive_scan(a, a);
  sp::exclusive_scan(a, a, 0.F);

  // Anything that needs memory or a device throws.
  EXPECT_LOGIC_ERROR((void)a.get_device(), array_moved);
  EXPECT_LOGIC_ERROR((void)a.get_buffer(), array_moved);
  EXPECT_LOGIC_ERROR((void)sp::reduce(a, sp::op::add), array_moved);
  // Sizes that do not match zero elements are the ordinary size errors.
  const std::vector<float> two = {1.F, 2.F};
  std::vector<float> out(2);
  EXPECT_THROW(a.upload(two), std::logic_error);
  EXPECT_THROW(a.download(std::span<float>(out)), std::logic_error);
  EXPECT_THROW((void)a.view(0, 1), std::logic_error);
  EXPECT_THROW(a.copy_from(live), std::logic_error);
  EXPECT_THROW(live.copy_from(a), std::logic_error);
  EXPECT_THROW(sp::map(a, live, sp::op::negate), std::logic_error);
  EXPECT_THROW(sp::map(live, a, sp::op::negate), std::logic_error);

  // Still empty and consistent after all that.
  EXPECT_EQ(a.size(), 0U);
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace

// The public handle types that can be moved move without throwing; the ones that cannot be moved
// (shared state, scopes) say so, so that nothing can be left moved-from there.
static_assert(std::is_nothrow_move_constructible_v<sp::array<float>>);
static_assert(std::is_nothrow_move_assignable_v<sp::array<float>>);
static_assert(std::is_nothrow_move_constructible_v<sp::stream>);
static_assert(std::is_nothrow_move_assignable_v<sp::stream>);
static_assert(std::is_nothrow_move_constructible_v<sp::pool>);
static_assert(std::is_nothrow_move_assignable_v<sp::pool>);
static_assert(std::is_nothrow_move_constructible_v<sp::device>);
static_assert(std::is_nothrow_move_assignable_v<sp::device>);
static_assert(!std::is_move_constructible_v<sp::stream_scope>);
static_assert(!std::is_move_constructible_v<sp::timeline>);
static_assert(!std::is_move_constructible_v<sp::marker>);

// ---- array<T> -------------------------------------------------------------------------------

TEST(MovedFromArray, MoveConstructLeavesAnEmptyArray) {
  sp::device d = host_device();
  sp::array<float> a(16, d);
  a.fill(3.F);
  sp::array<float> b = std::move(a);
  expect_empty_array(a, b);  // NOLINT(bugprone-use-after-move): the point of the test

  // The moved-into array has the memory and works.
  EXPECT_EQ(b.size(), 16U);
  EXPECT_EQ(b.download(), std::vector<float>(16, 3.F));
  b.fill(1.F);
  EXPECT_EQ(sp::reduce(b, sp::op::add), 16.F);
  EXPECT_EQ(b.use_count(), 1);
}

TEST(MovedFromArray, MoveAssignLeavesAnEmptyArrayAndFreesTheTargetsMemory) {
  sp::device d = host_device();
  sp::pool p(d);
  sp::array<float> a(16, p);
  a.fill(2.F);
  sp::array<float> c(1024, p);
  c = std::move(a);          // c's own 1024 elements go back to the pool
  expect_empty_array(a, c);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.size(), 16U);
  EXPECT_EQ(c.download(), std::vector<float>(16, 2.F));

  // A moved-from array takes a new value and works normally.
  a = std::move(c);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 16U);
  EXPECT_EQ(a.download(), std::vector<float>(16, 2.F));
  a = sp::array<float>(4, p);
  a.fill(5.F);
  EXPECT_EQ(a.download(), std::vector<float>(4, 5.F));

  // Assigning a moved-from array empties the target and frees its memory.
  sp::array<float> e = std::move(a);
  sp::array<float> f(8, p);
  f = std::move(a);  // NOLINT(bugprone-use-after-move)
  expect_empty_array(f, e);
  e = sp::array<float>();
  EXPECT_EQ(p.statistics().live_bytes, 0U) << "a moved-over array leaked its memory";
}

TEST(MovedFromArray, SelfMoveAssignKeepsTheArray) {
  sp::device d = host_device();
  sp::array<float> a(8, d);
  a.fill(7.F);
  self_move_assign(a);
  EXPECT_EQ(a.size(), 8U);
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(a.download(), std::vector<float>(8, 7.F));

  sp::array<float> empty;
  self_move_assign(empty);
  EXPECT_EQ(empty.size(), 0U);
}

TEST(MovedFromArray, ViewsOfAMovedFromArrayKeepTheirMemory) {
  sp::device d = host_device();
  sp::array<float> a(16, d);
  a.fill(4.F);
  sp::array<float> v = a.view(4, 4);
  sp::array<float> b = std::move(a);
  EXPECT_EQ(v.download(), std::vector<float>(4, 4.F));
  EXPECT_EQ(b.use_count(), 2);
  EXPECT_EQ(a.use_count(), 0);  // NOLINT(bugprone-use-after-move)
}

TEST(MovedFromArray, DefaultConstructedArrayBehavesTheSame) {
  sp::device d = host_device();
  sp::array<float> a;
  sp::array<float> live(2, d);
  expect_empty_array(a, live);
}

template <class T>
const char* element_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  if constexpr (std::is_same_v<T, double>) return "double";
  if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
}

// GoogleTest suites are CamelCase.
template <class T>
class MovedFromArrayOf : public ::testing::Test {};  // NOLINT(readability-identifier-naming)
using element_types =
    ::testing::Types<float, double, std::int32_t, std::int64_t, std::uint32_t, std::uint64_t>;
TYPED_TEST_SUITE(MovedFromArrayOf, element_types);

TYPED_TEST(MovedFromArrayOf, MessageNamesTheElementType) {
  sp::device d = host_device();
  sp::array<TypeParam> a(4, d);
  sp::array<TypeParam> b(std::move(a));
  const std::string expected =
      std::string("array<") + element_name<TypeParam>() + ">: used after it was moved from";
  EXPECT_LOGIC_ERROR((void)a.get_device(), expected);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0U);
  a.fill(TypeParam{1});
  EXPECT_EQ(b.size(), 4U);
}

// ---- stream ---------------------------------------------------------------------------------

namespace {
// Every public operation of a moved-from stream throws; only destruction and assignment of a
// new value are allowed.
void expect_moved_from_stream(const sp::stream& s, sp::pool& p) {
  EXPECT_LOGIC_ERROR((void)s.ref(), stream_moved);
  EXPECT_LOGIC_ERROR((void)static_cast<sp::stream_ref>(s), stream_moved);
  EXPECT_LOGIC_ERROR(s.synchronize(), stream_moved);
  EXPECT_LOGIC_ERROR((void)s.get_timeline(), stream_moved);
  EXPECT_LOGIC_ERROR((void)s.get_device(), stream_moved);
  // Through the implicit conversion to stream_ref, as users pass streams to the pool.
  EXPECT_LOGIC_ERROR((void)p.allocate(s, 64), stream_moved);
  EXPECT_LOGIC_ERROR(sp::stream_scope scope(s), stream_moved);
}
}  // namespace

TEST(MovedFromStream, MoveConstructLeavesAStreamThatThrows) {
  sp::device d = host_device();
  sp::pool p(d);
  sp::stream a(d);
  const std::shared_ptr<sp::timeline> line = a.get_timeline();
  sp::stream b(std::move(a));
  expect_moved_from_stream(a, p);  // NOLINT(bugprone-use-after-move)

  // The moved-into stream is the same stream and works.
  EXPECT_TRUE(b.get_timeline() == line);
  EXPECT_TRUE(b.get_device() == d);
  void* x = p.allocate(b, 64);
  b.synchronize();
  p.deallocate(b, x);
  {
    sp::stream_scope scope(b);
    sp::array<float> arr(4, p);
    arr.fill(1.F);
    EXPECT_EQ(sp::reduce(arr, sp::op::add), 4.F);
  }
  EXPECT_FALSE(line->retired());
}

TEST(MovedFromStream, MoveAssign) {
  sp::device d = host_device();
  sp::pool p(d);
  sp::stream a(d);
  sp::stream c(d);
  const std::shared_ptr<sp::timeline> a_line = a.get_timeline();
  const std::shared_ptr<sp::timeline> c_line = c.get_timeline();
  c = std::move(a);                // c's own stream is destroyed: its timeline retires
  expect_moved_from_stream(a, p);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(c_line->retired());
  EXPECT_TRUE(c.get_timeline() == a_line);
  c.synchronize();

  // A moved-from stream takes a new value and works normally.
  a = std::move(c);                // NOLINT(bugprone-use-after-move)
  expect_moved_from_stream(c, p);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(a.get_timeline() == a_line);
  void* x = p.allocate(a, 64);
  p.deallocate(a, x);
  a.synchronize();

  // Assigning a moved-from stream destroys the target's stream and leaves it moved-from.
  sp::stream e(d);
  const std::shared_ptr<sp::timeline> e_line = e.get_timeline();
  e = std::move(c);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(e_line->retired());
  expect_moved_from_stream(e, p);
  EXPECT_FALSE(a_line->retired());
}

TEST(MovedFromStream, SelfMoveAssignKeepsTheStream) {
  sp::device d = host_device();
  sp::stream a(d);
  const std::shared_ptr<sp::timeline> line = a.get_timeline();
  self_move_assign(a);
  EXPECT_TRUE(a.get_timeline() == line);
  EXPECT_FALSE(line->retired());
  a.synchronize();
}

// ---- pool -----------------------------------------------------------------------------------

namespace {
// Every public operation of a moved-from pool, p. `s` is a live stream and `x` a block of
// another pool.
void expect_moved_from_pool(sp::pool& p, sp::stream& s, void* x) {
  EXPECT_TRUE(sp::detail::access::state(p) == nullptr);
  EXPECT_FALSE(p.owns(x));  // an empty pool owns nothing
  EXPECT_FALSE(p.owns(nullptr));
  const sp::token t = s.ref().now();
  EXPECT_LOGIC_ERROR((void)p.allocate(s, 64), pool_moved);
  EXPECT_LOGIC_ERROR(p.deallocate(s, x), pool_moved);
  EXPECT_LOGIC_ERROR(p.deallocate(x, std::span<const sp::token>(&t, 1)), pool_moved);
  EXPECT_LOGIC_ERROR(p.record_use(x, t), pool_moved);
  EXPECT_LOGIC_ERROR(p.record_use(x, s.ref()), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.block_size(x), pool_moved);
  EXPECT_LOGIC_ERROR(p.trim(), pool_moved);
  EXPECT_LOGIC_ERROR(p.set_memory_limit(std::size_t{1} << 20), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.memory_limit(), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.add_reclaim_hook([](std::size_t) {}), pool_moved);
  EXPECT_LOGIC_ERROR(p.remove_reclaim_hook(1), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.statistics(), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.get_device(), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.id(), pool_moved);
  EXPECT_LOGIC_ERROR((void)p.device_id(), pool_moved);
  EXPECT_LOGIC_ERROR(sp::array<float>(4, p), pool_moved);
  // A copy of a moved-from pool handle is just as empty.
  sp::pool copy = p;
  EXPECT_TRUE(sp::detail::access::state(copy) == nullptr);
  EXPECT_TRUE(copy == p);
  EXPECT_LOGIC_ERROR((void)copy.allocate(s, 64), pool_moved);
}
}  // namespace

TEST(MovedFromPool, MoveConstructLeavesAPoolThatThrows) {
  sp::device d = host_device();
  sp::stream s(d);
  sp::pool a(d);
  void* x = a.allocate(s, 64);
  sp::pool b(std::move(a));
  expect_moved_from_pool(a, s, x);  // NOLINT(bugprone-use-after-move)

  // The moved-into pool is the same pool: it owns x and frees it.
  EXPECT_TRUE(b.owns(x));
  EXPECT_GE(b.block_size(x), 64U);
  b.deallocate(s, x);
  EXPECT_EQ(b.statistics().live_bytes, 0U);
  EXPECT_EQ(b.statistics().deallocations, 1U);
}

TEST(MovedFromPool, MoveAssign) {
  sp::device d = host_device();
  sp::stream s(d);
  sp::pool a(d);
  sp::pool c(d);
  void* x = a.allocate(s, 64);
  c = std::move(a);
  expect_moved_from_pool(a, s, x);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(c.owns(x));

  // A moved-from pool handle takes a new value and works normally.
  a = std::move(c);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(a.owns(x));
  a.deallocate(s, x);
  void* y = a.allocate(s, 128);
  a.deallocate(s, y);
  EXPECT_EQ(a.statistics().live_bytes, 0U);

  // Assigning a moved-from pool leaves the target empty too.
  sp::pool e(d);
  e = std::move(c);  // NOLINT(bugprone-use-after-move)
  expect_moved_from_pool(e, s, nullptr);
}

TEST(MovedFromPool, SelfMoveAssignKeepsThePool) {
  sp::device d = host_device();
  sp::stream s(d);
  sp::pool a(d);
  void* x = a.allocate(s, 64);
  self_move_assign(a);
  ASSERT_NE(sp::detail::access::state(a), nullptr);
  EXPECT_TRUE(a.owns(x));
  a.deallocate(s, x);
}

TEST(MovedFromPool, ArraysOutliveTheMovedFromHandle) {
  sp::device d = host_device();
  sp::pool a(d);
  sp::array<float> arr(16, a);
  arr.fill(6.F);
  sp::pool b(std::move(a));
  EXPECT_EQ(arr.download(), std::vector<float>(16, 6.F));
  arr = sp::array<float>();
  EXPECT_EQ(b.statistics().live_bytes, 0U);
}

// ---- device ---------------------------------------------------------------------------------

namespace {
void expect_moved_from_device(const sp::device& d) {
  EXPECT_EQ(d.id(), 0U);  // no device has id 0
  EXPECT_TRUE(sp::detail::access::state(d) == nullptr);
  EXPECT_LOGIC_ERROR((void)d.get_backend(), device_moved);
  EXPECT_LOGIC_ERROR((void)d.backend_ptr(), device_moved);
  EXPECT_LOGIC_ERROR((void)d.default_pool(), device_moved);
  // What takes a device needs one.
  EXPECT_LOGIC_ERROR(sp::stream s(d), device_moved);
  EXPECT_LOGIC_ERROR(sp::pool p(d), device_moved);
  EXPECT_LOGIC_ERROR(sp::array<float>(4, d), device_moved);
  // A copy of a moved-from device handle is just as empty.
  const sp::device copy = d;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.id(), 0U);
  EXPECT_TRUE(copy == d);
  EXPECT_LOGIC_ERROR((void)copy.get_backend(), device_moved);
}
}  // namespace

TEST(MovedFromDevice, MoveConstructLeavesADeviceThatThrows) {
  sp::device a = host_device();
  const std::uint64_t id = a.id();
  sp::device b(std::move(a));
  expect_moved_from_device(a);  // NOLINT(bugprone-use-after-move)

  // The moved-into handle is the same device and works.
  EXPECT_EQ(b.id(), id);
  sp::stream s(b);
  sp::array<float> arr(8, b);
  arr.fill(1.F);
  EXPECT_EQ(sp::reduce(arr, sp::op::add), 8.F);
  EXPECT_TRUE(b.default_pool().get_device() == b);
}

TEST(MovedFromDevice, MoveAssign) {
  sp::device a = host_device();
  sp::device c = host_device();
  const std::uint64_t a_id = a.id();
  c = std::move(a);
  expect_moved_from_device(a);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.id(), a_id);

  // A moved-from device handle takes a new value and works normally.
  a = std::move(c);             // NOLINT(bugprone-use-after-move)
  expect_moved_from_device(c);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.id(), a_id);
  sp::array<float> arr(2, a);
  arr.fill(2.F);
  EXPECT_EQ(arr.download(), std::vector<float>(2, 2.F));

  // Assigning a moved-from device handle leaves the target empty too.
  sp::device e = host_device();
  e = std::move(c);  // NOLINT(bugprone-use-after-move)
  expect_moved_from_device(e);
}

TEST(MovedFromDevice, SelfMoveAssignKeepsTheDevice) {
  sp::device a = host_device();
  const std::uint64_t id = a.id();
  self_move_assign(a);
  EXPECT_EQ(a.id(), id);
  ASSERT_NE(sp::detail::access::state(a), nullptr);
  sp::stream s(a);
  s.synchronize();
}

// ---- token ----------------------------------------------------------------------------------

// A token is a plain value (timeline, point); a moved-from one has no timeline, which means
// "nothing to wait for": every use of it is a no-op.
TEST(MovedFromToken, HasNothingToWaitFor) {
  sp::device d = host_device();
  sp::stream s(d);
  sp::pool p(d);
  sp::token t = s.ref().now();
  sp::token u = std::move(t);
  EXPECT_TRUE(t.line == nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(t.ready_for(nullptr));
  EXPECT_TRUE(u.line == s.get_timeline());
  s.ref().wait(t);
  void* x = p.allocate(s, 64);
  p.record_use(x, t);
  p.deallocate(x, std::span<const sp::token>(&t, 1));
  EXPECT_EQ(p.statistics().live_bytes, 0U);
}
