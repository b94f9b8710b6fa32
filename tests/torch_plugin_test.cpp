// The PyTorch plug-in's entry points (src/c_api/torch_plugin.cpp) without PyTorch and without a
// GPU: STREAMPOOL_TORCH_BACKEND=host makes the plug-in's "CUDA device" a checking host backend,
// and host queues stand in for CUstreams. The race detector then sees every command, which is
// what makes the record_stream tests able to fail (the negative control below does). The real
// thing, PyTorch on the H200, is bench/torch/ (bench/RESULTS.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "c_api/handles.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

/// Where the plug-in's recorder writes (STREAMPOOL_TORCH_TRACE, read once per process).
const std::string trace_path = "/tmp/streampool-torch-trace-" + std::to_string(getpid()) + ".txt";

const bool host_plugin = [] {
  setenv("STREAMPOOL_TORCH_BACKEND", "host", 1);
  setenv("STREAMPOOL_TORCH_TRACE", trace_path.c_str(), 1);
  return true;
}();

/// The plug-in's device 0 and its pool (the same objects the entry points use).
struct plugin {
  sp_pool_t handle = nullptr;
  plugin() { EXPECT_EQ(sp_torch_pool(0, &handle), STREAMPOOL_STATUS_SUCCESS); }
  ~plugin() { sp_pool_destroy(handle); }
  sp::pool pool() const { return sp::c_api::pool_behind(handle); }
  sp::device dev() const { return pool().get_device(); }
};

std::size_t violations(const sp::device& d) { return sp::host_violations(d.get_backend()).size(); }

/// Queues standing in for PyTorch's streams. Like PyTorch's, they live as long as the process: the
/// plug-in wraps each handle once and may record markers on it later (a destroyed native stream
/// whose handle the plug-in still knows is the one case it does not cover, docs/torch.md).
struct native_streams {
  sp::stream a, b, c;
};
native_streams& streams(const sp::device& d) {
  static auto* s = new native_streams{sp::stream(d), sp::stream(d), sp::stream(d)};
  return *s;
}

/// The record_stream pattern of the issue: x written on A, read on B after B waited for A, then
/// freed on A (the allocation stream, as PyTorch's free says) while B's read may still run; a
/// new block of the same size is written on A. Returns whether B read what A wrote first.
/// `control`: B reads only the first half of a granule and A writes only the second (see below).
bool record_stream_round(plugin& p, sp::stream& a, sp::stream& b, bool record,
                         bool control = false) {
  constexpr std::size_t n = 1 << 16;
  void* x = sp_torch_malloc(n, 0, a.ref().native());
  a.ref().submit(sp::command::make(sp::fill_command{x, 1, 1, n}));
  void* y = sp_torch_malloc(n, 0, b.ref().native());
  b.ref().wait(a.ref().now());
  // B is busy for a while before it reads x (PyTorch's _sleep in the pattern), so that
  // A's next write normally runs first: the window in which early reuse corrupts the read.
  constexpr std::size_t busy = std::size_t{64} << 20;
  void* scratch = sp_torch_malloc(busy, 0, b.ref().native());
  b.ref().submit(sp::command::make(sp::fill_command{scratch, 3, 1, busy}));
  // Without record_stream (the negative control) B reads and A writes the two halves of one
  // 256-byte granule: the race checker sees the early reuse, and ThreadSanitizer (which sees
  // bytes, not granules) sees no data race in the test itself.
  const std::size_t half = 128;
  b.ref().submit(sp::command::make(sp::copy_command{y, x, control ? half : n, false, false}));
  if (record) sp_torch_record_stream(x, b.ref().native());
  sp_torch_free(x, n, 0, a.ref().native());
  void* z = sp_torch_malloc(n, 0, a.ref().native());
  a.ref().submit(sp::command::make(control
                                       ? sp::fill_command{static_cast<char*>(z) + half, 7, 1, half}
                                       : sp::fill_command{z, 7, 1, n}));
  std::vector<unsigned char> out(n);
  b.ref().submit(sp::command::make(sp::copy_command{out.data(), y, n, false, true}));
  b.synchronize();
  a.synchronize();
  sp_torch_free(y, n, 0, b.ref().native());
  sp_torch_free(scratch, busy, 0, b.ref().native());
  sp_torch_free(z, n, 0, a.ref().native());
  (void)p;
  return std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 1; });
}

}  // namespace

TEST(TorchPlugin, AllocFreeOnNativeStreamsWithSizeZeroAndReuse) {
  ASSERT_TRUE(host_plugin);
  plugin p;
  sp::stream& s = streams(p.dev()).c;
  void* native = s.ref().native();
  void* a = sp_torch_malloc(1000, 0, native);
  void* z1 = sp_torch_malloc(0, 0, native);
  void* z2 = sp_torch_malloc(0, 0, native);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(z1, nullptr);
  EXPECT_NE(z1, z2);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  sp_torch_free(a, 1000, 0, native);
  EXPECT_EQ(sp_torch_malloc(1000, 0, native), a) << "same native stream: same wrapper, reuse";
  sp_torch_free(a, 1000, 0, native);
  sp_torch_free(z1, 0, 0, native);
  sp_torch_free(z2, 0, 0, native);
  void* big = sp_torch_malloc(std::size_t{40} << 20, 0, native);
  sp_torch_free(big, std::size_t{40} << 20, 0, native);
  EXPECT_EQ(p.pool().statistics().live_bytes, 0u);
}

// sp_torch_malloc_sized: the block and its usable size in one call, as sp_pool_block_size says.
TEST(TorchPlugin, MallocSizedGivesTheBlockSize) {
  ASSERT_TRUE(host_plugin);
  plugin p;
  void* native = streams(p.dev()).c.ref().native();
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{40} << 20}) {
    std::size_t size = 0;
    void* b = sp_torch_malloc_sized(n, 0, native, &size);
    EXPECT_GE(size, n);
    EXPECT_EQ(size, p.pool().block_size(b));
    sp_torch_free(b, n, 0, native);
  }
  EXPECT_THROW((void)sp_torch_malloc_sized(8, 0, native, nullptr), sp::logic_error);
  EXPECT_EQ(p.pool().statistics().live_bytes, 0u);
}

TEST(TorchPlugin, LargeBlocksStayWithTheStreamThatFreedThem) {
  // The plug-in's pool keeps large blocks per stream (docs/torch.md): b does not get a's freed
  // block while a lives; a gets it back.
  plugin p;
  auto& [a, b, c] = streams(p.dev());
  constexpr std::size_t n = std::size_t{48} << 20;
  void* x = sp_torch_malloc(n, 0, a.ref().native());
  sp_torch_free(x, n, 0, a.ref().native());
  a.synchronize();
  void* y = sp_torch_malloc(n, 0, b.ref().native());
  EXPECT_NE(y, x);
  void* z = sp_torch_malloc(n, 0, a.ref().native());
  EXPECT_EQ(z, x);
  sp_torch_free(y, n, 0, b.ref().native());
  sp_torch_free(z, n, 0, a.ref().native());
  b.synchronize();
  a.synchronize();
}

TEST(TorchPlugin, RecordStreamKeepsMemoryFromEarlyReuse) {
  plugin p;
  auto& [a, b, c] = streams(p.dev());
  const std::size_t before = violations(p.dev());
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(record_stream_round(p, a, b, /*record=*/true));
  EXPECT_EQ(violations(p.dev()), before);
}

TEST(TorchPlugin, WithoutRecordStreamTheDetectorSeesTheRace) {
  // Negative control: the same pattern with no record_stream call reuses x on A behind B's read.
  // The detector orders by what the host has seen complete, so a round in which A's write happens
  // to run after the host saw B's read finish shows nothing (B's busy fill makes that rare).
  plugin p;
  auto& [a, b, c] = streams(p.dev());
  const std::size_t before = violations(p.dev());
  for (int i = 0; i < 20 && violations(p.dev()) == before; ++i) {
    (void)record_stream_round(p, a, b, /*record=*/false, /*control=*/true);
  }
  EXPECT_GT(violations(p.dev()), before);
}

TEST(TorchPlugin, ConservativeModeIsSafeWithoutTheHook) {
  plugin p;
  auto& [a, b, c] = streams(p.dev());
  ASSERT_EQ(sp_torch_set_conservative(1), STREAMPOOL_STATUS_SUCCESS);
  const std::size_t before = violations(p.dev());
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(record_stream_round(p, a, b, /*record=*/false));
  EXPECT_EQ(violations(p.dev()), before);
  ASSERT_EQ(sp_torch_set_conservative(0), STREAMPOOL_STATUS_SUCCESS);
}

TEST(TorchPlugin, OutOfMemoryThrowsWithTheNumbersAndFreeNeverThrows) {
  plugin p;
  sp::stream& s = streams(p.dev()).c;
  // Earlier tests left free memory behind; a limit below it would still let a request fit there.
  for (sp::stream* q : {&streams(p.dev()).a, &streams(p.dev()).b, &s}) q->synchronize();
  sp_torch_empty_cache();
  p.pool().set_memory_limit(std::size_t{64} << 20);
  try {
    (void)sp_torch_malloc(std::size_t{100} << 20, 0, s.ref().native());
    ADD_FAILURE() << "no exception";
  } catch (const sp::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("requested 104857600 bytes"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("limit 67108864 bytes"), std::string::npos) << e.what();
  }
  p.pool().set_memory_limit(0);
  int local = 0;
  sp_torch_free(&local, 4, 0, s.ref().native());  // reported on stderr, not thrown
  EXPECT_THROW(sp_torch_record_stream(&local, s.ref().native()), sp::logic_error);
}

TEST(TorchPlugin, EmptyCacheTrims) {
  plugin p;
  sp::stream& s = streams(p.dev()).c;
  void* q = sp_torch_malloc(std::size_t{24} << 20, 0, s.ref().native());
  sp_torch_free(q, 0, 0, s.ref().native());
  s.synchronize();
  const std::size_t before = p.pool().statistics().reserved_bytes;
  sp_torch_empty_cache();
  // The large block's granules go back (its free recorded a marker, now complete); small slabs
  // whose last free on a wrapped stream has no marker yet may stay.
  EXPECT_LE(p.pool().statistics().reserved_bytes + (std::size_t{24} << 20), before);
}

TEST(TorchPlugin, TheRecorderWritesWhatTheReplayReads) {
  plugin p;
  sp::stream& s = streams(p.dev()).b;
  // Sizes no other test uses, so that this test finds its own lines among the process's.
  void* a = sp_torch_malloc(12345, 0, s.ref().native());
  sp::stream& other = streams(p.dev()).a;
  void* b = sp_torch_malloc(23456, 0, other.ref().native());
  sp_torch_free(a, 12345, 0, s.ref().native());
  void* c = sp_torch_malloc(34567, 0, s.ref().native());  // takes a's id: the smallest free one
  sp_torch_trace_phase("step 7 begin");                   // also flushes the file
  std::ifstream in(trace_path);
  ASSERT_TRUE(in) << trace_path;
  std::string line;
  std::string id_a, stream_a, id_b, stream_b, id_c, stream_c;
  bool freed_a = false;
  bool phase = false;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("# streampool allocation trace: pool ", 0), 0U) << line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string what, id, size, stream;
    words >> what >> id >> size >> stream;
    if (what == "alloc" && size == "12345") {
      id_a = id;
      stream_a = stream;
    }
    if (what == "alloc" && size == "23456") {
      id_b = id;
      stream_b = stream;
    }
    if (what == "free_completed" && size == "12345") {
      EXPECT_EQ(id, id_a) << line;
      EXPECT_EQ(stream, stream_a) << line;
      freed_a = true;
    }
    if (what == "alloc" && size == "34567") {
      id_c = id;
      stream_c = stream;
    }
    if (line == "# step 7 begin") phase = true;
  }
  EXPECT_TRUE(freed_a);
  EXPECT_TRUE(phase);
  EXPECT_FALSE(id_a.empty());
  EXPECT_NE(id_a, id_b);
  EXPECT_EQ(id_c, id_a);
  EXPECT_EQ(stream_c, stream_a);
  // Numbered per stream in order of first appearance (the pool's allocation log); on CUDA the
  // legacy default stream would be 0, but the host backend has none.
  EXPECT_NE(stream_a, stream_b);
  sp_torch_free(b, 23456, 0, other.ref().native());
  sp_torch_free(c, 34567, 0, s.ref().native());
  std::remove(trace_path.c_str());
}

// Last in this file: it replaces the STREAMPOOL_TORCH_TRACE recording the tests above read.
TEST(TorchPlugin, RecordStartReplacesTheTraceOfTheVariable) {
  plugin p;
  sp::stream& s = streams(p.dev()).a;
  EXPECT_EQ(sp_torch_record_start(0, ""), STREAMPOOL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(sp_torch_record_start(0, nullptr), STREAMPOOL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(sp_torch_record_start(0, "/nonexistent-streampool-dir/t.txt"),
            STREAMPOOL_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sp_last_error_message()).find("/nonexistent-streampool-dir/t.txt"),
            std::string::npos)
      << sp_last_error_message();
  const std::string path = trace_path + ".api";
  ASSERT_EQ(sp_torch_record_start(0, path.c_str()), STREAMPOOL_STATUS_SUCCESS);
  void* a = sp_torch_malloc(4321, 0, s.ref().native());
  sp_torch_trace_phase("step 0 begin");
  sp_torch_free(a, 4321, 0, s.ref().native());
  std::uint64_t events = 0;
  ASSERT_EQ(sp_pool_record_stop(p.handle, &events), STREAMPOOL_STATUS_SUCCESS);
  EXPECT_EQ(events, 2u);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("alloc 0 4321 0\n# step 0 begin\nfree_completed 0 4321 0\n"),
            std::string::npos)
      << text.str();
  std::remove(path.c_str());
}
