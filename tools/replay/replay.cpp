// replay: plays an allocation trace through an allocator and reports peak live bytes, peak
// reserved bytes, their ratio and the time per event.
//
//   replay [--backend host|host-segments|cuda|exact|exact-granular|all]... [--granularity BYTES]
//          [--vm-granularity BYTES] [--max-ratio R] [--max-host-waits N] [--quiet-after K]
//          [--lag N]
//          TRACE[.gz]
//
// Trace format: bench/traces/README.md (`<action> <id> <size> <stream>`, '#' comments). The
// replay ignores segment_alloc/segment_free (the allocator under test does its own upstream
// requests) and free_requested; `alloc` on stream k allocates on a stream of its own numbered k;
// `free_completed` frees the block (on the stream that allocated it).
//
// Backends (several may be given; default: host, cuda when available, exact, exact-granular):
//   host            streampool's pool on the host backend with --granularity (default 2 MiB, the
//                   H200's), large blocks on virtual memory in granules of --vm-granularity
//                   (default 8 MiB, the CUDA backend's). The host backend never touches the
//                   memory it hands out unless commands are submitted, and a replay submits none.
//   host-segments   the same without virtual memory (large blocks in whole upstream allocations).
//   cuda            streampool's pool on CUDA device 0 (when the CUDA backend is built and a GPU
//                   is present; it is skipped otherwise).
//   exact           the reference: every allocation reserves exactly its bytes and gives them
//                   back when freed (reserved == live, the lower bound 1.000).
//   exact-granular  each allocation reserved on its own, rounded up to --granularity (a
//                   cudaMalloc per tensor).
// Peak live is the sum of the trace's block sizes, the same measure as PyTorch's "peak live";
// reserved is what the allocator held from its upstream at its peak. For streampool it also
// reports upstream calls (allocate, free, reserve, create, map, unmap, release) and host waits per
// 1,000 events, and per phase of the trace ('# step k begin' lines), so that a steady state that
// still calls the driver shows.
//
// --max-ratio R, --max-host-waits N, --quiet-after K: fail (exit 1) when a streampool replay's peak
// reserved / peak live exceeds R, it made more than N host waits, or it made an upstream call in a
// phase after the K-th (phases counted from 0; CI's check of the large-block policy: a steady state
// makes no driver call).
//
// --lag N: the host backends complete a marker N events after it was recorded, not at once
// (lagged_backend.hpp: a GPU runs behind the threads that queue its work; default 0). The host
// backends always run under the lagged backend, which drops device-side waits (a replay submits
// no work), so that a replay never depends on thread timing. Without it, memory a
// stream freed is known complete to the others as soon as anyone asks, so the replay shows no
// device waits and none of the growth that waiting for completion causes.
//
// Exit status: 0 when every replay completed, balanced afterwards (live 0) and met the limits,
// 1 on any failure, 2 on bad arguments, 77 when the trace file does not exist (a test skips).
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef STREAMPOOL_REPLAY_ZLIB
#include <zlib.h>
#endif

#include "lagged_backend.hpp"
#include "streampool/host.hpp"
#include "streampool/streampool.hpp"
#ifdef STREAMPOOL_HAVE_CUDA_BACKEND
#include "streampool/cuda.hpp"
#endif

namespace {

/// The replay's clock for --lag: the index of the event being replayed.
std::atomic<std::uint64_t> event_clock{0};

enum class action : std::uint8_t { alloc, free };

struct event {
  action what;
  std::uint32_t id;
  std::uint32_t stream;
  std::uint64_t size;
};

struct phase {
  std::size_t first_event;  // index of the phase's first event
  std::string name;
};

struct trace {
  std::vector<event> events;
  std::vector<phase> phases;  // from '# model_to_cuda', '# step k begin' lines, in order
  std::size_t lines = 0;
  std::size_t ignored = 0;  // segment_* and free_requested
};

// ---- reading ------------------------------------------------------------------------------------

class line_reader {
 public:
  explicit line_reader(const std::string& path) {
    const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (!gz) {
      file_ = std::fopen(path.c_str(), "r");
      return;
    }
#ifdef STREAMPOOL_REPLAY_ZLIB
    gz_ = gzopen(path.c_str(), "rb");
#else
    std::string quoted = "'";
    for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    pipe_ = popen(("gzip -dc " + quoted).c_str(), "r");
#endif
  }
  line_reader(const line_reader&) = delete;
  line_reader& operator=(const line_reader&) = delete;
  ~line_reader() { close(); }

  [[nodiscard]] bool ok() const { return file_ != nullptr || pipe_ != nullptr || gz_ != nullptr; }

  /// Reads one line into buf (without the newline). False at the end.
  bool next(std::string& buf) {
    buf.clear();
    char chunk[4096];
    for (;;) {
      const char* got = nullptr;
#ifdef STREAMPOOL_REPLAY_ZLIB
      if (gz_ != nullptr) got = gzgets(static_cast<gzFile>(gz_), chunk, sizeof chunk);
#endif
      if (file_ != nullptr) got = std::fgets(chunk, sizeof chunk, file_);
      if (pipe_ != nullptr) got = std::fgets(chunk, sizeof chunk, pipe_);
      if (got == nullptr) return !buf.empty();
      buf += chunk;
      if (!buf.empty() && buf.back() == '\n') {
        buf.pop_back();
        return true;
      }
    }
  }

  /// Closes the source; false when it reported an error (a truncated gzip stream, say).
  bool close() {
    bool good = true;
    if (file_ != nullptr) {
      good = std::ferror(file_) == 0;
      std::fclose(file_);
      file_ = nullptr;
    }
    if (pipe_ != nullptr) {
      good = pclose(pipe_) == 0;
      pipe_ = nullptr;
    }
#ifdef STREAMPOOL_REPLAY_ZLIB
    if (gz_ != nullptr) {
      int err = Z_OK;
      gzerror(static_cast<gzFile>(gz_), &err);
      good = err == Z_OK || err == Z_STREAM_END;
      gzclose(static_cast<gzFile>(gz_));
      gz_ = nullptr;
    }
#endif
    return good;
  }

 private:
  std::FILE* file_ = nullptr;
  std::FILE* pipe_ = nullptr;
  void* gz_ = nullptr;
};

trace read_trace(const std::string& path) {
  line_reader in(path);
  if (!in.ok()) throw std::runtime_error("cannot open " + path);
  trace t;
  std::string line;
  while (in.next(line)) {
    ++t.lines;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // Phase markers ('# model_to_cuda', '# step 2 begin') are the short comment lines; the
      // header's lines are sentences.
      std::string name = line.substr(std::min(line.size(), line.find_first_not_of("# ")));
      if (name.rfind("step ", 0) == 0 || (!name.empty() && name.find(' ') == std::string::npos &&
                                          name.find('=') == std::string::npos)) {
        if (name.size() > 6 && name.compare(name.size() - 6, 6, " begin") == 0)
          name.resize(name.size() - 6);
        t.phases.push_back({t.events.size(), name});
      }
      continue;
    }
    char name[32];
    unsigned long long id = 0, size = 0, stream = 0;
    if (std::sscanf(line.c_str(), "%31s %llu %llu %llu", name, &id, &size, &stream) != 4) {
      throw std::runtime_error(path + ":" + std::to_string(t.lines) + ": cannot parse '" + line +
                               "'");
    }
    if (std::strcmp(name, "alloc") == 0) {
      t.events.push_back({action::alloc, static_cast<std::uint32_t>(id),
                          static_cast<std::uint32_t>(stream), size});
    } else if (std::strcmp(name, "free_completed") == 0) {
      t.events.push_back(
          {action::free, static_cast<std::uint32_t>(id), static_cast<std::uint32_t>(stream), size});
    } else if (std::strcmp(name, "free_requested") == 0 ||
               std::strcmp(name, "segment_alloc") == 0 || std::strcmp(name, "segment_free") == 0) {
      ++t.ignored;
    } else {
      throw std::runtime_error(path + ":" + std::to_string(t.lines) + ": unknown action '" + name +
                               "'");
    }
  }
  if (!in.close()) throw std::runtime_error("error while reading " + path);
  return t;
}

// ---- allocators under test ----------------------------------------------------------------------

struct phase_counts {
  std::string name;
  std::size_t events = 0;
  std::uint64_t upstream_calls = 0, host_waits = 0, device_waits = 0;
};

struct result {
  std::string name;
  std::size_t peak_live = 0;      // trace block sizes
  std::size_t peak_reserved = 0;  // upstream bytes at the peak
  double ns_per_event = 0;        // wall
  double cpu_ns_per_event = 0;    // CPU time of the replaying thread
  std::size_t events = 0;
  std::string note;
  bool pool = false;  // a streampool replay: the counts below mean something
  std::uint64_t upstream_calls = 0, host_waits = 0;
  std::vector<phase_counts> phases;
};

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// Wall and CPU (this thread) clocks: on a loaded machine the CPU time per event is the stable one.
struct stopwatch {
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = cpu_now();
  static double cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  void finish(result& r, std::size_t events) const {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    const double n = static_cast<double>(std::max<std::size_t>(1, events));
    r.events = events;
    r.ns_per_event = wall * 1e9 / n;
    r.cpu_ns_per_event = (cpu_now() - cpu0) * 1e9 / n;
  }
};

struct live_tracker {
  std::size_t live = 0, peak = 0;
  void add(std::size_t n) { peak = std::max(peak, live += n); }
  void sub(std::size_t n) { live -= n; }
};

[[noreturn]] void bad_trace(const char* what, const event& e) {
  throw std::runtime_error(std::string("trace: ") + what + " (id " + std::to_string(e.id) + ")");
}

/// The exact-fit reference: reserves each allocation on its own, rounded to `granularity`.
result replay_exact(const trace& t, std::size_t granularity, const std::string& name) {
  result r;
  r.name = name;
  std::unordered_map<std::uint32_t, std::size_t> live;
  live_tracker bytes, reserved;
  const stopwatch watch;
  for (const event& e : t.events) {
    if (e.what == action::alloc) {
      if (!live.emplace(e.id, e.size).second) bad_trace("alloc of a live id", e);
      bytes.add(e.size);
      reserved.add(round_up(e.size, granularity));
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) bad_trace("free of an id that is not live", e);
      bytes.sub(it->second);
      reserved.sub(round_up(it->second, granularity));
      live.erase(it);
    }
  }
  watch.finish(r, t.events.size());
  r.peak_live = bytes.peak;
  r.peak_reserved = reserved.peak;
  return r;
}

/// streampool: one pool on `dev`, one stream per trace stream.
result replay_pool(const trace& t, const streampool::device& dev, const std::string& name) {
  using namespace streampool;
  result r;
  r.name = name;
  pool p(dev);
  std::map<std::uint32_t, std::unique_ptr<stream>> streams;
  for (const event& e : t.events) {
    if (!streams.count(e.stream)) streams.emplace(e.stream, std::make_unique<stream>(dev));
  }
  struct block {
    void* p;
    std::size_t size;
    stream* s;
  };
  std::unordered_map<std::uint32_t, block> live;
  live.reserve(4096);
  live_tracker bytes;
  r.pool = true;
  std::size_t next_phase = 0;
  pool_statistics at_phase = p.statistics();
  auto close_phase = [&](std::size_t end_event) {
    if (r.phases.empty()) return;
    const pool_statistics now = p.statistics();
    phase_counts& ph = r.phases.back();
    ph.events = end_event - ph.events;  // held the first event's index until now
    ph.upstream_calls = now.upstream_calls() - at_phase.upstream_calls();
    ph.host_waits = now.host_waits - at_phase.host_waits;
    ph.device_waits = now.device_waits - at_phase.device_waits;
    at_phase = now;
  };
  const stopwatch watch;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    if (next_phase < t.phases.size() && t.phases[next_phase].first_event == i) {
      close_phase(i);
      r.phases.push_back({t.phases[next_phase].name, i});
      ++next_phase;
    }
    const event& e = t.events[i];
    event_clock.store(i, std::memory_order_relaxed);
    if (e.what == action::alloc) {
      stream* s = streams.at(e.stream).get();
      void* q = p.allocate(*s, e.size);
      if (!live.emplace(e.id, block{q, e.size, s}).second) bad_trace("alloc of a live id", e);
      bytes.add(e.size);
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) bad_trace("free of an id that is not live", e);
      p.deallocate(*it->second.s, it->second.p);
      bytes.sub(it->second.size);
      live.erase(it);
    }
  }
  watch.finish(r, t.events.size());
  close_phase(t.events.size());
  const pool_statistics st = p.statistics();
  r.peak_live = bytes.peak;
  r.peak_reserved = st.peak_reserved_bytes;
  r.upstream_calls = st.upstream_calls();
  r.host_waits = st.host_waits;
  if (st.peak_live_bytes < bytes.peak) {
    throw std::runtime_error(name + ": the pool's peak_live_bytes " +
                             std::to_string(st.peak_live_bytes) + " is below the trace's peak " +
                             std::to_string(bytes.peak) + " (it must be exact)");
  }
  char note[512];
  std::snprintf(note, sizeof note,
                "granularity %zu KiB, %s; upstream: %llu allocate, %llu free, %llu reserve, %llu "
                "create, %llu map, %llu unmap, %llu release; %llu host waits, %llu device waits; "
                "%zu blocks live at "
                "the end",
                dev.get_backend().caps().granularity >> 10,
                dev.get_backend().caps().virtual_memory ? "virtual memory" : "segments",
                static_cast<unsigned long long>(st.upstream_allocations),
                static_cast<unsigned long long>(st.upstream_deallocations),
                static_cast<unsigned long long>(st.upstream_reserves),
                static_cast<unsigned long long>(st.upstream_creates),
                static_cast<unsigned long long>(st.upstream_maps),
                static_cast<unsigned long long>(st.upstream_unmaps),
                static_cast<unsigned long long>(st.upstream_releases),
                static_cast<unsigned long long>(st.host_waits),
                static_cast<unsigned long long>(st.device_waits), live.size());
  r.note = note;
  // Free what the trace never freed, then check that the pool balances.
  for (auto& [id, b] : live) p.deallocate(*b.s, b.p);
  live.clear();
  streams.clear();
  const pool_statistics end = p.statistics();
  if (end.live_bytes != 0) {
    throw std::runtime_error(name + ": pool does not balance after the replay: " +
                             std::to_string(end.live_bytes) + " live bytes left");
  }
  return r;
}

// ---- main ---------------------------------------------------------------------------------------

int usage() {
  std::fprintf(
      stderr,
      "usage: replay [--backend host|host-segments|cuda|exact|exact-granular|all]... "
      "[--granularity BYTES] [--vm-granularity BYTES] [--max-ratio R] [--max-host-waits N] "
      "[--quiet-after K] [--lag N] TRACE[.gz]\n");
  return 2;
}

double mib(std::size_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> backends;
  std::size_t granularity = std::size_t{2} << 20;
  std::uint64_t lag = 0;
  std::size_t vm_granularity = std::size_t{8} << 20;
  double max_ratio = 0;
  long long max_host_waits = -1;
  long long quiet_after = -1;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      backends.emplace_back(argv[++i]);
    } else if (a == "--granularity" && i + 1 < argc) {
      granularity = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--vm-granularity" && i + 1 < argc) {
      vm_granularity = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--max-ratio" && i + 1 < argc) {
      max_ratio = std::strtod(argv[++i], nullptr);
    } else if (a == "--max-host-waits" && i + 1 < argc) {
      max_host_waits = std::strtoll(argv[++i], nullptr, 10);
    } else if (a == "--quiet-after" && i + 1 < argc) {
      quiet_after = std::strtoll(argv[++i], nullptr, 10);
    } else if (a == "--lag" && i + 1 < argc) {
      lag = std::strtoull(argv[++i], nullptr, 10);
    } else if (a.rfind("--", 0) == 0 || !path.empty()) {
      return usage();
    } else {
      path = a;
    }
  }
  if (path.empty() || granularity == 0) return usage();
  if (backends.empty() || std::find(backends.begin(), backends.end(), "all") != backends.end()) {
    backends = {"host", "host-segments", "cuda", "exact", "exact-granular"};
  }
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    std::printf("replay: %s does not exist; skipped\n", path.c_str());
    return 77;
  }

  try {
    const auto t0 = std::chrono::steady_clock::now();
    const trace t = read_trace(path);
    const double read_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "replay: %s: %zu lines, %zu events replayed (alloc, free_completed), %zu ignored "
        "(segment_*, free_requested); read in %.2f s%s\n",
        path.c_str(), t.lines, t.events.size(), t.ignored, read_s,
#ifdef STREAMPOOL_REPLAY_ZLIB
        " (zlib)"
#else
        " (gzip -dc)"
#endif
    );

    std::vector<result> results;
    for (const std::string& b : backends) {
      if (b == "host" || b == "host-segments") {
        streampool::host_options o;
        o.granularity = granularity;
        o.vm_granularity = std::max(vm_granularity, granularity);
        o.virtual_memory = b == "host";
        // Always through the lagged backend, also with lag 0: it drops device-side waits, which
        // would otherwise make a host queue busy and the replay depend on thread timing.
        auto lagged = std::make_shared<streampool::replay::lagged_backend>(
            streampool::make_host_backend(o), event_clock, lag);
        results.push_back(replay_pool(
            t, streampool::device(std::move(lagged)),
            b == "host" ? "streampool (host backend)" : "streampool (host backend, segments)"));
      } else if (b == "cuda") {
#ifdef STREAMPOOL_HAVE_CUDA_BACKEND
        if (streampool::cuda_available()) {
          results.push_back(replay_pool(t, streampool::device(streampool::make_cuda_backend(0)),
                                        "streampool (cuda backend)"));
        } else {
          std::printf("replay: cuda: no CUDA device available; skipped\n");
        }
#else
        std::printf("replay: cuda: this build has no CUDA backend; skipped\n");
#endif
      } else if (b == "exact") {
        results.push_back(replay_exact(t, 1, "exact fit (reference)"));
      } else if (b == "exact-granular") {
        results.push_back(replay_exact(t, granularity,
                                       "exact fit per allocation, rounded to "
                                       "granularity"));
      } else {
        return usage();
      }
    }

    std::printf(
        "\n| allocator | peak live MiB | peak reserved MiB | peak reserved / peak live | "
        "wall ns per event | cpu ns per event | note |\n|---|---:|---:|---:|---:|---:|---|\n");
    for (const result& r : results) {
      std::printf("| %s | %.1f | %.1f | %.4f | %.1f | %.1f | %s |\n", r.name.c_str(),
                  mib(r.peak_live), mib(r.peak_reserved),
                  r.peak_live == 0
                      ? 0.0
                      : static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_live),
                  r.ns_per_event, r.cpu_ns_per_event, r.note.c_str());
    }
    bool within = true;
    for (const result& r : results) {
      if (!r.pool) continue;
      const double k = 1000.0 / static_cast<double>(std::max<std::size_t>(1, r.events));
      std::printf("\n%s: %.2f upstream calls and %.2f host waits per 1,000 events\n",
                  r.name.c_str(), static_cast<double>(r.upstream_calls) * k,
                  static_cast<double>(r.host_waits) * k);
      if (!r.phases.empty()) {
        std::printf(
            "| phase | events | upstream calls | host waits | device waits |\n"
            "|---|---:|---:|---:|---:|\n");
        for (const phase_counts& ph : r.phases) {
          std::printf("| %s | %zu | %llu | %llu | %llu |\n", ph.name.c_str(), ph.events,
                      static_cast<unsigned long long>(ph.upstream_calls),
                      static_cast<unsigned long long>(ph.host_waits),
                      static_cast<unsigned long long>(ph.device_waits));
        }
      }
      const double ratio = r.peak_live == 0 ? 0.0
                                            : static_cast<double>(r.peak_reserved) /
                                                  static_cast<double>(r.peak_live);
      if (max_ratio > 0 && ratio > max_ratio) {
        std::printf("replay: FAIL: %s: peak reserved / peak live %.4f > %.4f\n", r.name.c_str(),
                    ratio, max_ratio);
        within = false;
      }
      if (max_host_waits >= 0 && r.host_waits > static_cast<std::uint64_t>(max_host_waits)) {
        std::printf("replay: FAIL: %s: %llu host waits > %lld\n", r.name.c_str(),
                    static_cast<unsigned long long>(r.host_waits), max_host_waits);
        within = false;
      }
      for (std::size_t k = 0; quiet_after >= 0 && k < r.phases.size(); ++k) {
        const phase_counts& ph = r.phases[k];
        if (k > static_cast<std::size_t>(quiet_after) && ph.upstream_calls != 0) {
          std::printf("replay: FAIL: %s: %llu upstream calls in phase %zu (%s), after phase %lld\n",
                      r.name.c_str(), static_cast<unsigned long long>(ph.upstream_calls), k,
                      ph.name.c_str(), quiet_after);
          within = false;
        }
      }
    }
    std::printf("\nreplay: %s\n", within ? "done" : "limits exceeded");
    if (!within) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
