// What a hostile read of the pool's C++ boundaries found (issue 45), one test each; each failed
// before its fix: a stream of another device accepted by a free or a recorded use, memory limits
// that silently meant "none", an out-of-memory message without the caller's size, a destroyed
// stream's cache kept until the next trim, the reclaim hook's contract, and fork().
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

// ---- a stream of another device -----------------------------------------------------------

TEST(ForeignStream, AFreeOnAnotherDevicesStreamIsRefusedAndChangesNothing) {
  sp::device d(sp::make_host_backend({}));
  sp::device other(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  sp::stream elsewhere(other);
  for (std::size_t n : {std::size_t{4096}, 2 * MiB}) {  // small and large
    void* q = p.allocate(s, n);
    const std::string m = message_of([&] { p.deallocate(elsewhere, q); });
    EXPECT_NE(m.find("belongs to device " + std::to_string(other.id())), std::string::npos) << m;
    EXPECT_NE(m.find("on device " + std::to_string(d.id())), std::string::npos) << m;
    EXPECT_EQ(p.block_size(q), p.block_size(q));  // still live
    EXPECT_GE(p.statistics().live_bytes, n);
    p.deallocate(s, q);  // the right free works
    EXPECT_EQ(p.statistics().live_bytes, 0u);
  }
}

TEST(ForeignStream, AUseRecordedOnAnotherDevicesStreamIsRefused) {
  sp::device d(sp::make_host_backend({}));
  sp::device other(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  sp::stream elsewhere(other);
  for (std::size_t n : {std::size_t{4096}, 2 * MiB}) {
    void* q = p.allocate(s, n);
    const std::string m = message_of([&] { p.record_use(q, elsewhere); });
    EXPECT_NE(m.find("record_use"), std::string::npos) << m;
    EXPECT_NE(m.find("backend"), std::string::npos) << m;
    EXPECT_THROW(p.deallocate(q, std::vector<sp::token>{elsewhere.ref().now()}), sp::logic_error);
    p.deallocate(s, q);  // nothing was recorded: an ordinary free
    EXPECT_EQ(p.statistics().live_bytes, 0u);
  }
}

// ---- memory limits ---------------------------------------------------------------------------

TEST(MemoryLimit, ALimitBeyondASizeOrBelowOneByteIsRefused) {
  EXPECT_EQ(sp::parse_memory_limit("0", 0), 0u);  // "none", as documented
  EXPECT_EQ(sp::parse_memory_limit("1", 0), 1u);
  for (const char* text : {"18446744073709551616", "1e30", "16777216T", "0.5", "1e-10G"}) {
    const std::string m = message_of([&] { (void)sp::parse_memory_limit(text, 0); });
    EXPECT_NE(m.find(text), std::string::npos) << m;
  }
  EXPECT_NE(message_of([] { (void)sp::parse_memory_limit("0.00001%", 1000); }).find("less than"),
            std::string::npos);
}

TEST(MemoryLimit, TheEnvironmentsLimitIsNamedWhenItIsRefused) {
  sp::device d(sp::make_host_backend({}));
  ASSERT_EQ(setenv("STREAMPOOL_MEMORY_LIMIT", "18446744073709551616", 1), 0);
  const std::string m = message_of([&] { sp::pool p(d); });
  unsetenv("STREAMPOOL_MEMORY_LIMIT");
  EXPECT_NE(m.find("STREAMPOOL_MEMORY_LIMIT"), std::string::npos) << m;
}

TEST(Environment, ABadBiasedLocksSwitchIsRefusedWhenADeviceIsMade) {
  // The locks read it in noexcept code; the device is where the value can still be refused.
  ASSERT_EQ(setenv("STREAMPOOL_BIASED_LOCKS", "maybe", 1), 0);
  const std::string m = message_of([] { sp::device d(sp::make_host_backend({})); });
  unsetenv("STREAMPOOL_BIASED_LOCKS");
  EXPECT_NE(m.find("STREAMPOOL_BIASED_LOCKS=\"maybe\""), std::string::npos) << m;
  EXPECT_NO_THROW(sp::device(sp::make_host_backend({})));
}

// ---- out of memory ---------------------------------------------------------------------------

TEST(OutOfMemory, TheMessageNamesTheRequestAndTheRoundedBlock) {
  sp::device d(sp::make_host_backend({}));
  sp::pool_options o;
  o.memory_limit = 4 * MiB;
  sp::pool p(d, o);
  sp::stream s(d);
  for (std::size_t n : {std::size_t{5 * MiB + 1}, std::size_t{200 * 1024 + 1}}) {
    void* hold = n < MiB ? p.allocate(s, 4 * MiB - 64 * 1024) : nullptr;
    try {
      (void)p.allocate(s, n);
      ADD_FAILURE() << "no out_of_memory for " << n;
    } catch (const sp::out_of_memory& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("requested " + std::to_string(n) + " bytes"), std::string::npos) << m;
      EXPECT_NE(m.find("a block of"), std::string::npos) << m;
      EXPECT_EQ(e.requested(), n);
    }
    if (hold != nullptr) p.deallocate(s, hold);
  }
}

// ---- reclaim hooks ---------------------------------------------------------------------------

TEST(ReclaimHook, AThrowingHookEndsTheAllocationAndLeavesThePoolConsistent) {
  struct hook_error {};
  sp::device d(sp::make_host_backend({}));
  sp::pool_options o;
  o.memory_limit = 4 * MiB;
  sp::pool p(d, o);
  sp::stream s(d);
  void* hold = p.allocate(s, 3 * MiB);
  int calls = 0;
  const std::uint64_t id = p.add_reclaim_hook([&](std::size_t) {
    ++calls;
    throw hook_error{};
  });
  EXPECT_THROW((void)p.allocate(s, 2 * MiB), hook_error);  // as thrown
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(p.statistics().live_bytes, p.block_size(hold));
  p.deallocate(s, hold);
  void* again = p.allocate(s, 2 * MiB);  // still registered, not needed now
  EXPECT_EQ(calls, 1);
  p.deallocate(s, again);
  p.remove_reclaim_hook(id);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

// ---- a destroyed stream's cache --------------------------------------------------------------

TEST(StreamCaches, ADestroyedStreamsCacheIsForgottenAtOnce) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  std::uint64_t gone_timeline = 0;
  {
    sp::stream s(d);
    gone_timeline = s.get_timeline()->id();
    p.deallocate(s, p.allocate(s, 4096));
  }
  for (const sp::snapshot_cache& c : p.snapshot().caches)
    EXPECT_NE(c.timeline, gone_timeline) << "the cache of a destroyed stream is still listed";
}

// ---- fork() ---------------------------------------------------------------------------------

// A child that uses a device made before fork() gets a clear error (CUDA's rule for its
// contexts), and destroying what it inherited neither hangs nor crashes. The parent is unharmed.
TEST(Fork, AChildGetsAClearErrorFromADeviceMadeBeforeTheFork) {
  auto* d = new sp::device(sp::make_host_backend({}));
  auto* p = new sp::pool(*d);
  auto* s = new sp::stream(*d);
  p->deallocate(*s, p->allocate(*s, 4096));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    const std::string m = message_of([&] { sp::stream mine(*d); });
    if (m.find("fork()") == std::string::npos) code |= 1;
    const std::string m2 = message_of([&] { (void)p->allocate(*s, 8 * MiB); });
    if (m2.find("fork()") == std::string::npos) code |= 2;
    delete s;  // neither hangs nor crashes
    delete p;
    delete d;
#if !defined(__SANITIZE_THREAD__)  // ThreadSanitizer ends a forked child that starts a thread
    sp::device fresh(sp::make_host_backend({}));  // a device of its own works
    sp::stream t(fresh);
    void* q = fresh.default_pool().allocate(t, 4096);
    fresh.default_pool().deallocate(t, q);
#endif
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1: stream creation, bit 2: allocation";
  void* q = p->allocate(*s, 8 * MiB);  // the parent goes on
  p->deallocate(*s, q);
  delete s;
  delete p;
  delete d;
}
