// The allocation log (pool::start_recording, src/core/pool/trace_recorder.hpp) on the host backend:
// what it writes, in the trace format tools/replay reads (bench/traces/README.md), and that it
// stays consistent while threads allocate, free, start and stop at once (run under TSan too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

/// A file in the temporary directory, removed when the test is done.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("streampool-recording-" + std::to_string(getpid()) + "-" + name + ".txt"))
                 .string()) {}
  ~temp_file() { std::remove(path.c_str()); }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
};

struct event {
  std::string action;
  unsigned long long id, size, stream;
  friend bool operator==(const event&, const event&) = default;
};

std::ostream& operator<<(std::ostream& o, const event& e) {
  return o << e.action << ' ' << e.id << ' ' << e.size << ' ' << e.stream;
}

struct trace {
  std::vector<std::string> comments;  // '#' lines without the "# "
  std::vector<event> events;
  std::size_t live_at_end = 0;      // blocks allocated and never freed
  std::size_t peak_live = 0;        // bytes, the sum of the live blocks' sizes at its highest
  std::vector<std::string> errors;  // what broke the format or the balance
};

/// Reads a recording and replays its ids: an alloc must name an id that is not live, the
/// smallest such id; a free a live id with the size it was allocated with.
trace read_trace(const std::string& path) {
  trace t;
  std::ifstream in(path);
  if (!in) {
    t.errors.push_back("cannot open " + path);
    return t;
  }
  std::map<unsigned long long, unsigned long long> live;  // id -> size
  std::size_t bytes = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind('#', 0) == 0) {
      t.comments.push_back(line.size() > 2 ? line.substr(2) : "");
      continue;
    }
    std::istringstream words(line);
    event e{};
    std::string rest;
    if (!(words >> e.action >> e.id >> e.size >> e.stream) || (words >> rest)) {
      t.errors.push_back("cannot parse '" + line + "'");
      continue;
    }
    if (e.action == "alloc") {
      unsigned long long smallest = 0;
      while (live.count(smallest) != 0) ++smallest;
      if (e.id != smallest)
        t.errors.push_back("alloc of id " + std::to_string(e.id) +
                           ", not the smallest free one: " + line);
      live[e.id] = e.size;
      bytes += e.size;
      t.peak_live = std::max(t.peak_live, bytes);
    } else if (e.action == "free_completed") {
      auto it = live.find(e.id);
      if (it == live.end()) {
        t.errors.push_back("free of an id that is not live: " + line);
      } else {
        if (it->second != e.size) t.errors.push_back("free with another size: " + line);
        bytes -= it->second;
        live.erase(it);
      }
    } else {
      t.errors.push_back("unknown action: " + line);
    }
    t.events.push_back(e);
  }
  t.live_at_end = live.size();
  return t;
}

std::string errors_of(const trace& t) {
  std::string out;
  for (const std::string& e : t.errors) out += e + "\n";
  return out;
}

#if defined(STREAMPOOL_TEST_UNDER_SANITIZER) || defined(__SANITIZE_ADDRESS__) || \
    defined(__SANITIZE_THREAD__)
constexpr int rounds = 300;
#else
constexpr int rounds = 3000;
#endif

}  // namespace

TEST(Recording, WritesWhatThePoolWasAskedFor) {
  sp::device d(sp::make_host_backend({.checking = true}));
  sp::pool p(d);
  sp::stream a(d), b(d);
  temp_file file("what");
  void* before = p.allocate(a, 5000);  // allocated before the start: never written
  p.start_recording(file.path);
  void* x = p.allocate(a, 1000);                    // alloc 0 1000 0
  void* y = p.allocate(b, std::size_t{300} << 10);  // alloc 1 307200 1 (a large block)
  p.record_phase("step 0 begin");
  p.deallocate(a, x);                             // free_completed 0 1000 0
  void* z = p.allocate(b, 2000);                  // alloc 0 2000 1: id 0 recycled
  p.deallocate(y, std::span<const sp::token>{});  // free_completed 1 307200 1: its own stream
  void* e = p.allocate(a, 0);                     // alloc 1 0 0: size 0 as asked
  p.deallocate(b, e);                             // free_completed 1 0 0: the block's stream
  p.deallocate(a, before);                        // not written: allocated before the start
  {
    sp::stream_scope on_a(a);
    sp::array<float> arr(100, p);  // alloc 1 400 0 (the current stream)
  }                                // free_completed 1 400 0 (an array frees with tokens)
  p.record_phase("multi\nline");
  EXPECT_EQ(p.stop_recording(), 9u);
  EXPECT_EQ(p.stop_recording(), 0u);  // nothing records now
  void* after = p.allocate(a, 7000);  // not written
  p.deallocate(a, after);

  const trace t = read_trace(file.path);
  EXPECT_TRUE(t.errors.empty()) << errors_of(t);
  const std::vector<event> want = {{"alloc", 0, 1000, 0},
                                   {"alloc", 1, 307200, 1},
                                   {"free_completed", 0, 1000, 0},
                                   {"alloc", 0, 2000, 1},
                                   {"free_completed", 1, 307200, 1},
                                   {"alloc", 1, 0, 0},
                                   {"free_completed", 1, 0, 0},
                                   {"alloc", 1, 400, 0},
                                   {"free_completed", 1, 400, 0}};
  EXPECT_EQ(t.events, want);
  EXPECT_EQ(t.live_at_end, 1u);  // z: live at the stop, which the replay tolerates
  ASSERT_GE(t.comments.size(), 3u);
  EXPECT_EQ(t.comments[0].rfind("streampool allocation trace: pool " + std::to_string(p.id()), 0),
            0u)
      << t.comments[0];
  EXPECT_NE(std::find(t.comments.begin(), t.comments.end(), "step 0 begin"), t.comments.end());
  EXPECT_NE(std::find(t.comments.begin(), t.comments.end(), "multi line"), t.comments.end());
  p.deallocate(b, z);
}

// The trace reader takes UTF-8 text with no control character but tab (tools/replay, issue 45):
// a phase name is written so that it reads back, whatever bytes it was given.
TEST(Recording, PhaseNamesAreWrittenAsTextTheReaderTakes) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  temp_file file("phase");
  p.start_recording(file.path);
  p.record_phase(
      std::string("a\x01"
                  "b\xff\xc0\x80\xed\xa0\x80 \xc3\xa9\tc\x7f",
                  15));
  (void)p.stop_recording();
  std::ifstream in(file.path, std::ios::binary);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind("# a", 0) == 0) last = line;
  EXPECT_EQ(last, "# a b?????? \xc3\xa9\tc ");  // ff, c0 80 (overlong), ed a0 80 (a surrogate)
}

TEST(Recording, TheNamedDefaultStreamIsZero) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream a(d), b(d), c(d);
  temp_file file("zero");
  p.start_recording(file.path, b);
  void* x = p.allocate(a, 100);  // stream 1: the first other stream
  void* y = p.allocate(b, 100);  // stream 0
  void* z = p.allocate(c, 100);  // stream 2
  p.deallocate(a, x);
  p.deallocate(a, y);
  p.deallocate(a, z);
  EXPECT_EQ(p.stop_recording(), 6u);
  const trace t = read_trace(file.path);
  EXPECT_TRUE(t.errors.empty()) << errors_of(t);
  ASSERT_EQ(t.events.size(), 6u);
  EXPECT_EQ(t.events[0].stream, 1u);
  EXPECT_EQ(t.events[1].stream, 0u);
  EXPECT_EQ(t.events[2].stream, 2u);
  EXPECT_EQ(t.live_at_end, 0u);

  sp::device other(sp::make_host_backend({}));
  sp::stream foreign(other);
  EXPECT_THROW(p.start_recording(file.path, foreign), sp::logic_error);
}

TEST(Recording, ABadPathThrowsNamingItAndChangesNothing) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  const std::string bad = "/nonexistent-streampool-dir/trace.txt";
  try {
    p.start_recording(bad);
    FAIL() << "start_recording(" << bad << ") did not throw";
  } catch (const sp::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(bad), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_THROW(p.start_recording(""), sp::logic_error);
  EXPECT_EQ(p.stop_recording(), 0u);  // nothing was started
  void* x = p.allocate(s, 100);       // the pool works
  p.deallocate(s, x);

  // A recording in progress goes on past a failed start.
  temp_file file("bad");
  p.start_recording(file.path);
  void* y = p.allocate(s, 100);
  EXPECT_THROW(p.start_recording(bad), sp::logic_error);
  p.deallocate(s, y);
  EXPECT_EQ(p.stop_recording(), 2u);
  EXPECT_EQ(read_trace(file.path).events.size(), 2u);
}

TEST(Recording, AStartReplacesTheRecordingInProgress) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  temp_file first("first"), second("second");
  p.start_recording(first.path);
  void* x = p.allocate(s, 100);
  p.start_recording(second.path);  // closes the first
  void* y = p.allocate(s, 200);
  p.deallocate(s, x);  // allocated in the first recording: not in the second
  p.deallocate(s, y);
  EXPECT_EQ(p.stop_recording(), 2u);
  const trace t1 = read_trace(first.path), t2 = read_trace(second.path);
  EXPECT_TRUE(t1.errors.empty()) << errors_of(t1);
  EXPECT_TRUE(t2.errors.empty()) << errors_of(t2);
  EXPECT_EQ(t1.events, (std::vector<event>{{"alloc", 0, 100, 0}}));
  EXPECT_EQ(t2.events, (std::vector<event>{{"alloc", 0, 200, 0}, {"free_completed", 0, 200, 0}}));
}

TEST(Recording, AStartOnTheSamePathReplacesItCleanly) {
  // The recording in progress writes the same file: its last buffer must not land in the new
  // recording (it did, at its old offset, when the new start truncated the file first).
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  sp::stream s(d);
  temp_file file("same");
  p.start_recording(file.path);
  for (int i = 0; i < 3000; ++i) p.deallocate(s, p.allocate(s, 100 + static_cast<std::size_t>(i)));
  p.start_recording(file.path);
  void* y = p.allocate(s, 200);
  p.deallocate(s, y);
  EXPECT_EQ(p.stop_recording(), 2u);
  const trace t = read_trace(file.path);
  EXPECT_TRUE(t.errors.empty()) << errors_of(t);
  EXPECT_EQ(t.events, (std::vector<event>{{"alloc", 0, 200, 0}, {"free_completed", 0, 200, 0}}));
}

TEST(Recording, APhaseWithoutARecordingAndAMovedFromPool) {
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  p.record_phase("step 1 begin");  // nothing records: nothing happens
  sp::pool q = std::move(p);
  EXPECT_THROW(p.start_recording("x"), sp::logic_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)p.stop_recording(), sp::logic_error);
  EXPECT_THROW(p.record_phase("x"), sp::logic_error);
  EXPECT_EQ(q.stop_recording(), 0u);
}

TEST(Recording, ThreadsRecordAtOnce) {
  // Each thread allocates and frees on its own stream, some frees with no stream and some on
  // another thread's block; the file must balance exactly, with the count stop() returned.
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  temp_file file("threads");
  p.start_recording(file.path);
  constexpr int threads = 4;
  std::vector<std::thread> pool_threads;
  std::atomic<void*> handed{nullptr};  // a block one thread leaves for another to free
  for (int t = 0; t < threads; ++t) {
    pool_threads.emplace_back([&, t] {
      sp::stream s(d);
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<void*> mine;
      for (int i = 0; i < rounds; ++i) {
        const std::size_t n = std::size_t{1} << (rng() % 20);  // 1 B .. 512 KiB
        mine.push_back(p.allocate(s, n));
        if (mine.size() > 8 || rng() % 3 == 0) {
          const std::size_t k = rng() % mine.size();
          void* q = mine[k];
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
          if (rng() % 4 == 0) {
            p.deallocate(q, std::span<const sp::token>{});
          } else if (void* theirs = handed.exchange(q)) {
            p.deallocate(s, theirs);  // another thread's block, freed here
          }
        }
      }
      for (void* q : mine) p.deallocate(s, q);
    });
  }
  for (std::thread& t : pool_threads) t.join();
  sp::stream s(d);
  if (void* last = handed.exchange(nullptr)) p.deallocate(s, last);
  const std::uint64_t events = p.stop_recording();
  const trace t = read_trace(file.path);
  EXPECT_TRUE(t.errors.empty()) << errors_of(t);
  EXPECT_EQ(t.events.size(), events);
  EXPECT_EQ(t.live_at_end, 0u);
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

TEST(Recording, StopAndStartWhileAnotherThreadAllocates) {
  // Recordings come and go while a thread allocates and frees: each file must balance (a free
  // only after its alloc, never an id twice) and hold what its stop() counted.
  sp::device d(sp::make_host_backend({}));
  sp::pool p(d);
  std::atomic<bool> done{false};
  std::thread worker([&] {
    sp::stream s(d);
    std::vector<void*> held;
    std::mt19937 rng(7);
    while (!done.load(std::memory_order_relaxed)) {
      held.push_back(p.allocate(s, 256 + rng() % 4096));
      if (held.size() > 16) {
        p.deallocate(s, held.front());
        held.erase(held.begin());
      }
    }
    for (void* q : held) p.deallocate(s, q);
  });
  std::vector<std::unique_ptr<temp_file>> files;
  std::vector<std::uint64_t> counted;
  for (int i = 0; i < 20; ++i) {
    files.push_back(std::make_unique<temp_file>("stop" + std::to_string(i)));
    p.start_recording(files.back()->path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    p.record_phase("step " + std::to_string(i) + " begin");
    if (i % 2 == 0)
      counted.push_back(p.stop_recording());  // else the next start replaces it
    else
      counted.push_back(~std::uint64_t{0});
  }
  counted.back() = p.stop_recording();
  done = true;
  worker.join();
  for (std::size_t i = 0; i < files.size(); ++i) {
    const trace t = read_trace(files[i]->path);
    EXPECT_TRUE(t.errors.empty()) << files[i]->path << ":\n" << errors_of(t);
    if (counted[i] != ~std::uint64_t{0}) {
      EXPECT_EQ(t.events.size(), counted[i]) << i;
    }
  }
}
