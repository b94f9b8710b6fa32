// replay: plays an allocation trace through an allocator and reports peak live bytes, peak
// reserved bytes, their ratio and the time per event.
//
//   replay [--backend host|host-segments|cuda|exact|exact-granular|all]... [--granularity BYTES]
//          [--vm-granularity BYTES] [--max-ratio R] [--max-host-waits N] [--quiet-after K]
//          [--lag N] [--per-stream|--shared] [--large-cache BYTES] [--html OUT.html]
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
// --shared: streampool's pools share large blocks between live streams
// (pool_options::share_between_streams). By default they keep them with the streams
// that free them, as the PyTorch plug-in's pool does; --per-stream says so explicitly.
//
// --large-cache BYTES: streampool's per-stream shelf of large blocks
// (pool_options::large_cache_bytes). Off by default here, as in the PyTorch plug-in.
//
// --html OUT.html: also write the memory picture (docs/memory-picture.md): one self-contained page
// with live and reserved bytes over the events for each allocator replayed, and the block map and
// fragmentation of the first streampool replay's pool at its peak reserved bytes. Recording reads
// the pool's statistics after every event, so the times per event then include it (the table
// says so).
//
// On a terminal, each replay shows its progress on stderr (events done, rate), cleared when it
// ends; when stderr is not a terminal nothing is written there.
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

#include "html_report.hpp"
#include "lagged_backend.hpp"
#include "memory_recorder.hpp"
#include "numbers.hpp"
#include "peak_snapshot.hpp"
#include "progress.hpp"
#include "streampool/host.hpp"
#include "streampool/streampool.hpp"
#ifdef STREAMPOOL_HAVE_CUDA_BACKEND
#include "streampool/cuda.hpp"
#endif

namespace {

using streampool::replay::action;
using streampool::replay::event;
using streampool::replay::memory_recorder;
using streampool::replay::peak_snapshot;
using streampool::replay::progress;
using streampool::replay::trace;

/// The replay's clock for --lag: the index of the event being replayed.
std::atomic<std::uint64_t> event_clock{0};

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
result replay_exact(const trace& t, std::size_t granularity, const std::string& name,
                    memory_recorder& rec) {
  result r;
  r.name = name;
  std::unordered_map<std::uint32_t, std::size_t> live;
  live_tracker bytes, reserved;
  progress shown(name, t.events.size());
  const stopwatch watch;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
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
    rec.record(bytes.live, reserved.live);
    shown.update(i + 1);
  }
  watch.finish(r, t.events.size());
  shown.finish();
  r.peak_live = bytes.peak;
  r.peak_reserved = reserved.peak;
  return r;
}

/// streampool: one pool on `dev`, one stream per trace stream. With the recorder enabled, reads the
/// pool's reserved bytes after every event (statistics(): atomic loads and one lock, cheap enough
/// per event: on the GPT-2 trace recording and the peak's snapshots together add about 0.4 us of
/// CPU time per event) and offers the pool to `peak` at each.
result replay_pool(const trace& t, const streampool::device& dev, const std::string& name,
                   const streampool::pool_options& options, memory_recorder& rec,
                   peak_snapshot& peak) {
  using namespace streampool;
  result r;
  r.name = name;
  pool p(dev, options);
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
  progress shown(name, t.events.size());
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
    if (rec.enabled()) {
      const std::size_t reserved = p.statistics().reserved_bytes;
      rec.record(bytes.live, reserved);
      peak.after_event(p, reserved, i);
    }
    shown.update(i + 1);
  }
  watch.finish(r, t.events.size());
  shown.finish();
  close_phase(t.events.size());
  const pool_statistics st = p.statistics();
  r.peak_live = bytes.peak;
  r.peak_reserved = st.peak_reserved_bytes;
  r.upstream_calls = st.upstream_calls();
  r.host_waits = st.host_waits;
  // pool_statistics::peak_live_bytes: exact with one stream; each other stream's changes reach the
  // shared count in steps of 16 MiB, so the peak may be low by that much per other stream.
  const std::size_t slack = streams.empty() ? 0 : (streams.size() - 1) * (std::size_t{16} << 20);
  if (st.peak_live_bytes + slack < bytes.peak) {
    throw std::runtime_error(
        name + ": the pool's peak_live_bytes " + std::to_string(st.peak_live_bytes) +
        " is below the trace's peak " + std::to_string(bytes.peak) +
        " by more than 16 MiB per other stream (" + std::to_string(streams.size()) + " streams)");
  }
  char note[512];
  std::snprintf(
      note, sizeof note,
      "granularity %zu KiB, %s%s; upstream: %llu allocate, %llu free, %llu reserve, %llu "
      "create, %llu map, %llu unmap, %llu release; %llu host waits, %llu device waits; "
      "%zu blocks live at "
      "the end%s",
      dev.get_backend().caps().granularity >> 10,
      dev.get_backend().caps().virtual_memory ? "virtual memory" : "segments",
      options.share_between_streams ? ", memory shared between streams" : ", memory per stream",
      static_cast<unsigned long long>(st.upstream_allocations),
      static_cast<unsigned long long>(st.upstream_deallocations),
      static_cast<unsigned long long>(st.upstream_reserves),
      static_cast<unsigned long long>(st.upstream_creates),
      static_cast<unsigned long long>(st.upstream_maps),
      static_cast<unsigned long long>(st.upstream_unmaps),
      static_cast<unsigned long long>(st.upstream_releases),
      static_cast<unsigned long long>(st.host_waits),
      static_cast<unsigned long long>(st.device_waits), live.size(),
      rec.enabled() ? "; times include --html's recording" : "");
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
      "[--quiet-after K] [--lag N] [--per-stream|--shared] [--large-cache BYTES] "
      "[--html OUT.html] TRACE[.gz]\n");
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
  std::string html_path;
  std::string path;
  streampool::pool_options pool_options;
  pool_options.large_cache_bytes = 0;  // the PyTorch plug-in's, whose runs the traces are
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
    } else if (a == "--per-stream") {
      pool_options.share_between_streams = false;
    } else if (a == "--shared") {
      pool_options.share_between_streams = true;
    } else if (a == "--large-cache" && i + 1 < argc) {
      pool_options.large_cache_bytes = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--html" && i + 1 < argc) {
      html_path = argv[++i];
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
    const trace t = streampool::replay::read_trace(path);
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
    // --html: every replay records its bytes per event; the first streampool replay also
    // snapshots its pool at its peak, for the block map.
    const bool html = !html_path.empty();
    streampool::replay::html_report report;
    report.trace_path = path;
    auto run_pool = [&](const streampool::device& dev, const std::string& name) {
      memory_recorder rec(html, t.events.size());
      peak_snapshot peak(html && !report.snapshot);
      results.push_back(replay_pool(t, dev, name, pool_options, rec, peak));
      if (html) report.series.push_back(rec.take(name));
      if (peak.taken()) {
        report.snapshot = std::move(peak.taken());
        using streampool::replay::with_commas;
        report.snapshot_caption = name + " at its peak reserved bytes (" +
                                  with_commas(report.snapshot->statistics.reserved_bytes >> 20) +
                                  " MiB), after event " + with_commas(peak.event());
      }
    };
    auto run_exact = [&](std::size_t g, const std::string& name) {
      memory_recorder rec(html, t.events.size());
      results.push_back(replay_exact(t, g, name, rec));
      if (html) report.series.push_back(rec.take(name));
    };
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
        run_pool(streampool::device(std::move(lagged)),
                 b == "host" ? "streampool (host backend)" : "streampool (host backend, segments)");
      } else if (b == "cuda") {
#ifdef STREAMPOOL_HAVE_CUDA_BACKEND
        if (streampool::cuda_available()) {
          run_pool(streampool::device(streampool::make_cuda_backend(0)),
                   "streampool (cuda backend)");
        } else {
          std::printf("replay: cuda: no CUDA device available; skipped\n");
        }
#else
        std::printf("replay: cuda: this build has no CUDA backend; skipped\n");
#endif
      } else if (b == "exact") {
        run_exact(1, "exact fit (reference)");
      } else if (b == "exact-granular") {
        run_exact(granularity, "exact fit per allocation, rounded to granularity");
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
    if (html) {
      streampool::replay::write_html_report(html_path, t, std::move(report));
      std::printf("\nreplay: wrote %s\n", html_path.c_str());
    }
    std::printf("\nreplay: %s\n", within ? "done" : "limits exceeded");
    if (!within) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
