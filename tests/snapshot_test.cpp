// pool::snapshot() (streampool/snapshot.hpp) on the host backend: what it says of each kind of
// block, the invariants written in snapshot.hpp, its JSON both ways and its errors, and snapshots
// taken while other threads allocate and free.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

sp::device host_device(bool virtual_memory = true) {
  return sp::device(
      sp::make_host_backend({.granularity = 2 * MiB, .virtual_memory = virtual_memory}));
}

/// The invariants of snapshot.hpp; returns the first broken one, empty when all hold.
std::string broken(const sp::pool_snapshot& s) {
  std::uintptr_t end = 0;
  for (const sp::snapshot_range& r : s.ranges) {
    if (r.base < end) return "ranges overlap or are out of order at " + std::to_string(r.base);
    end = r.base + r.bytes;
    std::size_t at = 0;
    for (const sp::snapshot_block& b : r.blocks) {
      if (b.offset != at || b.size == 0) {
        return "blocks of range " + std::to_string(r.base) + " do not tile it at offset " +
               std::to_string(at);
      }
      at += b.size;
      if (r.kind == sp::range_kind::slab && b.chunks != 0 && b.size != b.chunks * r.chunk_bytes)
        return "a slab block is not a whole number of chunks";
      if (b.status == sp::block_status::unmapped &&
          (r.kind != sp::range_kind::virtual_range || !b.tokens.empty()))
        return "an unmapped block outside a virtual range, or with tokens";
    }
    if (at != r.bytes) return "blocks of range " + std::to_string(r.base) + " end short";
  }
  return {};
}

/// The snapshot block holding address p, or null.
const sp::snapshot_block* block_at(const sp::pool_snapshot& s, const void* p,
                                   const sp::snapshot_range** range = nullptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const sp::snapshot_range& r : s.ranges) {
    if (a < r.base || a >= r.base + r.bytes) continue;
    for (const sp::snapshot_block& b : r.blocks) {
      if (a >= r.base + b.offset && a < r.base + b.offset + b.size) {
        if (range != nullptr) *range = &r;
        return &b;
      }
    }
  }
  return nullptr;
}

/// A token that stays pending while its stream lives: a point far beyond anything submitted.
sp::token pending_token(const sp::stream& s) {
  sp::token t = s.ref().now();
  t.at += 1'000'000;
  return t;
}

}  // namespace

TEST(Snapshot, AnEmptyPool) {
  sp::device d = host_device();
  sp::pool p(d);
  const sp::pool_snapshot s = p.snapshot();
  EXPECT_EQ(s.schema_version, sp::snapshot_schema_version);
  EXPECT_EQ(s.pool_id, p.id());
  EXPECT_EQ(s.device_id, p.device_id());
  EXPECT_EQ(s.backend, d.get_backend().name());
  EXPECT_TRUE(s.virtual_memory);
  EXPECT_TRUE(s.ranges.empty());
  EXPECT_GT(s.taken_unix_ns, 0u);
  const sp::snapshot_summary sum = sp::summarize(s);
  EXPECT_EQ(sum.live_bytes + sum.free_bytes + sum.reserved_bytes, 0u);
}

TEST(Snapshot, SaysWhereEachKindOfBlockIs) {
  sp::device d = host_device();
  sp::pool p(d);
  sp::stream s1(d), s2(d);
  void* live_small = p.allocate(s1, 1000);
  void* cached_small = p.allocate(s1, 1000);
  void* shared_small = p.allocate(s2, 1000);
  void* live_large = p.allocate(s2, 5 * MiB);
  void* pending_large = p.allocate(s1, 7 * MiB);
  p.deallocate(s1, cached_small);  // to s1's stream cache
  const sp::token wait_s1 = pending_token(s1);
  p.deallocate(shared_small, std::span(&wait_s1, 1));  // no stream: the shared list
  p.deallocate(pending_large, std::span(&wait_s1, 1));

  const sp::pool_snapshot s = p.snapshot();
  ASSERT_EQ(broken(s), "");
  const std::uint64_t line1 = s1.get_timeline()->id(), line2 = s2.get_timeline()->id();

  const sp::snapshot_range* r = nullptr;
  const sp::snapshot_block* b = block_at(s, live_small, &r);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(r->kind, sp::range_kind::slab);
  EXPECT_EQ(r->chunk_bytes, p.block_size(live_small));
  EXPECT_EQ(b->status, sp::block_status::live);

  b = block_at(s, cached_small);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, sp::block_status::free);
  EXPECT_EQ(b->place, sp::block_place::stream_cache);
  EXPECT_EQ(b->stream, line1);

  b = block_at(s, shared_small);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->place, sp::block_place::shared_list);
  ASSERT_EQ(b->tokens.size(), 1u);
  EXPECT_EQ(b->tokens[0].timeline, line1);
  EXPECT_FALSE(b->tokens[0].complete);
  EXPECT_TRUE(b->pending());

  b = block_at(s, live_large, &r);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(r->kind, sp::range_kind::virtual_range);
  EXPECT_EQ(b->status, sp::block_status::live);
  EXPECT_EQ(b->stream, line2) << "a live large block names the stream it went to";
  EXPECT_EQ(r->base + b->offset, reinterpret_cast<std::uintptr_t>(live_large));

  b = block_at(s, pending_large);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, sp::block_status::free);
  EXPECT_EQ(b->place, sp::block_place::large_free);
  EXPECT_TRUE(b->pending());

  // The stream caches: s1 holds one chunk of the class.
  bool found = false;
  for (const sp::snapshot_cache& c : s.caches) {
    if (c.timeline != line1) continue;
    found = true;
    EXPECT_FALSE(c.stream_gone);
    ASSERT_EQ(c.bins.size(), 1u);
    EXPECT_EQ(c.bins[0].chunk_bytes, p.block_size(live_small));
    EXPECT_EQ(c.bins[0].chunks, 1u);
    EXPECT_EQ(c.bytes, c.bins[0].chunk_bytes);
  }
  EXPECT_TRUE(found);

  // The summary agrees with the statistics, which were read first (nothing moved since).
  const sp::snapshot_summary sum = sp::summarize(s);
  EXPECT_EQ(sum.live_bytes, s.statistics.live_bytes);
  EXPECT_EQ(sum.live_bytes, p.block_size(live_small) + p.block_size(live_large));
  EXPECT_GE(sum.free_pending_bytes, p.block_size(live_small) + 7 * MiB);
  EXPECT_EQ(sum.free_bytes, sum.free_ready_bytes + sum.free_pending_bytes);
  EXPECT_LE(sum.reserved_bytes, s.statistics.reserved_bytes);
  EXPECT_GE(sum.largest_free_block, 7 * MiB);

  p.deallocate(s1, live_small);
  p.deallocate(s2, live_large);
}

TEST(Snapshot, SlabRunsAreMergedAndSegmentsHaveNoUnmappedBlocks) {
  sp::device d = host_device(/*virtual_memory=*/false);
  sp::pool p(d);
  sp::stream s(d);
  std::vector<void*> chunks;
  for (int i = 0; i < 100; ++i) chunks.push_back(p.allocate(s, 256));
  void* large = p.allocate(s, 3 * MiB);
  const sp::pool_snapshot snap = p.snapshot();
  ASSERT_EQ(broken(snap), "");
  const sp::snapshot_range* r = nullptr;
  const sp::snapshot_block* b = block_at(snap, chunks[0], &r);
  ASSERT_NE(b, nullptr);
  // 100 chunks handed out (carved in a stride, so apart), the rest never used: at most a run
  // between two of them, not one block per chunk.
  EXPECT_LE(r->blocks.size(), 2u * 100 + 2);
  EXPECT_LT(r->blocks.size(), r->bytes / r->chunk_bytes);
  std::size_t live_chunks = 0;
  for (const sp::snapshot_block& x : r->blocks)
    if (x.status == sp::block_status::live) live_chunks += x.chunks;
  EXPECT_EQ(live_chunks, 100u);
  block_at(snap, large, &r);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->kind, sp::range_kind::segment);
  for (void* c : chunks) p.deallocate(s, c);
  p.deallocate(s, large);
}

TEST(Snapshot, JsonRoundTrips) {
  sp::device d = host_device();
  sp::pool p(d);
  sp::stream s1(d), s2(d);
  void* a = p.allocate(s1, 3000);
  void* b = p.allocate(s2, 9 * MiB);
  void* c = p.allocate(s1, 300);
  p.deallocate(s1, c);
  const sp::token t = pending_token(s2);
  p.deallocate(b, std::span(&t, 1));
  const sp::pool_snapshot snap = p.snapshot();
  const std::string json = sp::to_json(snap);
  EXPECT_NE(json.find("\"schema_version\":1"), std::string::npos);
  EXPECT_NE(json.find("\"summary\""), std::string::npos);
  const sp::pool_snapshot back = sp::snapshot_from_json(json);
  EXPECT_EQ(sp::to_json(back), json);
  EXPECT_EQ(back.ranges.size(), snap.ranges.size());
  EXPECT_EQ(back.statistics.live_bytes, snap.statistics.live_bytes);
  p.deallocate(s1, a);
}

TEST(Snapshot, BadJsonNamesWhereAndWhat) {
  const auto message = [](const std::string& text) -> std::string {
    try {
      (void)sp::snapshot_from_json(text);
    } catch (const sp::logic_error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message("{\"schema\": ").find("at byte 11"), std::string::npos)
      << message("{\"schema\": ");
  EXPECT_NE(message("[1,2] x").find("the end of the document"), std::string::npos);
  EXPECT_NE(message("{}").find("\"schema\" is missing"), std::string::npos) << message("{}");
  EXPECT_NE(
      message(R"({"schema":"streampool.snapshot","schema_version":2})").find("schema_version 2"),
      std::string::npos);
  std::string deep(100, '[');
  EXPECT_NE(message(deep).find("less nesting"), std::string::npos);
  // A member twice (the reader refuses an unknown member, "a", before it could see a second).
  EXPECT_NE(message(R"({"schema":"streampool.snapshot","schema":"x"})").find("appears twice"),
            std::string::npos);
  EXPECT_NE(message("[007]").find("no leading zero"), std::string::npos);
  EXPECT_NE(message(R"(["\udc00"])").find("high surrogate"), std::string::npos);
  EXPECT_NE(message(R"(["\ud83d x"])").find("low surrogate"), std::string::npos);

  // A field of the wrong type or value, in an otherwise good snapshot.
  sp::device d = host_device();
  sp::pool p(d);
  sp::stream s(d);
  void* q = p.allocate(s, 4 * MiB);
  std::string json = sp::to_json(p.snapshot());
  const std::size_t at = json.find("\"status\":\"live\"");
  ASSERT_NE(at, std::string::npos);
  std::string lively = json;
  lively.replace(at, std::strlen("\"status\":\"live\""), "\"status\":\"lively\"");
  EXPECT_NE(message(lively).find("status: unknown value \"lively\""), std::string::npos)
      << message(lively);
  // A block larger than its range (what would make a drawing run almost without end).
  const std::size_t size_at = json.find("\"size\":", json.find("\"blocks\":["));
  ASSERT_NE(size_at, std::string::npos);
  std::string huge = json;
  huge.insert(size_at + std::strlen("\"size\":"), "4611686018427387904");
  huge.erase(size_at + std::strlen("\"size\":") + 19,
             huge.find(',', size_at + std::strlen("\"size\":") + 19) -
                 (size_at + std::strlen("\"size\":") + 19));
  EXPECT_NE(message(huge).find("do not tile it"), std::string::npos) << message(huge);
  // Characters outside the Basic Multilingual Plane, as Python's json.dumps escapes them.
  std::string named = json;
  const std::size_t backend_at = named.find("\"backend\":\"") + std::strlen("\"backend\":\"");
  named.insert(backend_at, R"(\ud83d\ude00 )");
  EXPECT_EQ(sp::snapshot_from_json(named).backend.substr(0, 5), "\xF0\x9F\x98\x80 ");
  p.deallocate(s, q);
}

TEST(Snapshot, WhileOtherThreadsAllocateAndFree) {
  sp::device d = host_device();
  sp::pool p(d);
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};  // threads past their first 200 operations
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      sp::stream s(d);
      std::vector<void*> held;
      for (unsigned i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::size_t n =
            (i % 7 == 0) ? (1 + (i + static_cast<unsigned>(t)) % 5) * MiB : 64 + (i * 37) % 4000;
        if (i == 200) running.fetch_add(1);
        held.push_back(p.allocate(s, n));
        if (held.size() > 16) {
          p.deallocate(s, held.front());
          held.erase(held.begin());
        }
      }
      for (void* q : held) p.deallocate(s, q);
    });
  }
  // One more thread trims (slabs and granules go back while snapshots read them) and one makes
  // and drops streams (caches orphaned mid-snapshot), freeing on another stream than it allocated.
  threads.emplace_back([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)p.trim();
  });
  threads.emplace_back([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      sp::stream a(d);
      void* q = p.allocate(a, 3000);
      void* r = p.allocate(a, 3 * MiB);
      sp::stream b(d);
      p.deallocate(b, q);
      p.deallocate(a, r);
    }
  });
  while (running.load() < 3) std::this_thread::yield();  // every thread busy, not done
  for (int i = 0; i < 50; ++i) {
    const sp::pool_snapshot s = p.snapshot();
    if (const std::string why = broken(s); !why.empty()) {
      ADD_FAILURE() << "snapshot " << i << ": " << why;
      break;  // the threads must still be joined
    }
    (void)sp::snapshot_from_json(sp::to_json(s));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const sp::snapshot_summary sum = sp::summarize(p.snapshot());
  EXPECT_EQ(sum.live_bytes, 0u);
}

// ---- the reader, strict and bounded (issue 45) -------------------------------------------------
//
// `python -m streampool.report` on a 40 MB JSON array peaked at 3.4 GB before refusing it (the
// reader built a tree of 100-byte nodes); an error named `live_bytes` without saying whose; invalid
// UTF-8 in a string reached the page. The reader now reads the schema's members in place, names
// every error's JSON path, refuses what the schema does not allow and cross-checks what it says.

namespace {

// Every allocation of this program goes through these, so that a test can measure the most bytes
// the reader holds at once. Blocks freed while counting but allocated before count negative; the
// peak is measured from the count at the start.
std::atomic<bool> counting{false};
std::atomic<long long> held_bytes{0}, peak_held_bytes{0};

void count_allocation(void* p, bool allocated) {
  if (!counting.load(std::memory_order_relaxed) || p == nullptr) return;
  const auto n = static_cast<long long>(malloc_usable_size(p));
  const long long now = allocated ? held_bytes.fetch_add(n) + n : held_bytes.fetch_sub(n) - n;
  long long peak = peak_held_bytes.load();
  while (now > peak && !peak_held_bytes.compare_exchange_weak(peak, now)) {
  }
}

/// The most bytes `f` held allocated at once.
template <class F>
std::size_t peak_allocated_by(F&& f) {
  held_bytes = 0;
  peak_held_bytes = 0;
  counting = true;
  try {
    f();
  } catch (...) {
    counting = false;
    throw;
  }
  counting = false;
  return static_cast<std::size_t>(peak_held_bytes.load());
}

}  // namespace

void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  count_allocation(p, true);
  return p;
}
void operator delete(void* p) noexcept {
  count_allocation(p, false);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

namespace {

/// The reader's error for `text`, or "(no error)".
std::string refusal(std::string_view text) {
  try {
    (void)sp::snapshot_from_json(text);
  } catch (const sp::logic_error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_REFUSED(text, ...)                                                             \
  do {                                                                                        \
    const std::string why_ = refusal(text);                                                   \
    for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__})          \
      EXPECT_NE(why_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << why_; \
  } while (0)

/// `text` with the first `from` after position `after` replaced by `to`.
std::string edited(std::string text, std::string_view from, std::string_view to,
                   std::string_view after = {}) {
  const std::size_t start = after.empty() ? 0 : text.find(after);
  const std::size_t at = text.find(from, start == std::string::npos ? 0 : start);
  if (start == std::string::npos || at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' not in the snapshot";
    return text;
  }
  return text.replace(at, from.size(), to);
}

/// A snapshot built by hand with one of everything: a slab with a live run, a cached chunk with a
/// token and its tail, a segment with a live block (a recorded use) and a free one, a cache.
sp::pool_snapshot sample_snapshot() {
  sp::pool_snapshot s;
  s.pool_id = 7;
  s.device_id = 1;
  s.backend = "host";
  s.granularity = 65536;
  s.statistics.live_bytes = 512 + MiB;
  sp::snapshot_range slab;
  slab.base = 0x10000;
  slab.bytes = 1000;
  slab.reserved_bytes = 1000;
  slab.kind = sp::range_kind::slab;
  slab.chunk_bytes = 256;
  slab.blocks = {
      {0, 512, 2, sp::block_status::live, sp::block_place::none, 0, {}},
      {512, 256, 1, sp::block_status::free, sp::block_place::stream_cache, 3, {{3, 7, false}}},
      {768, 232, 0, sp::block_status::free, sp::block_place::never_used, 0, {}}};
  sp::snapshot_range segment;
  segment.base = 0x100000;
  segment.bytes = 2 * MiB;
  segment.reserved_bytes = 2 * MiB;
  segment.kind = sp::range_kind::segment;
  segment.shard = 1;
  segment.blocks = {
      {0, MiB, 1, sp::block_status::live, sp::block_place::none, 3, {{4, 9, true}}},
      {MiB, MiB, 1, sp::block_status::free, sp::block_place::large_free, 0, {{3, 8, false}}}};
  s.ranges = {slab, segment};
  s.caches = {{3, 1, false, 256, {{256, 1}}}};
  return s;
}

}  // namespace

TEST(SnapshotReader, MemoryIsASmallMultipleOfTheInput) {
  // A JSON array of 2,000,000 zeros (4 MB): refused as not a snapshot, holding next to nothing.
  std::string zeros = "[0";
  for (int i = 1; i < 2'000'000; ++i) zeros += ",0";
  zeros += "]";
  std::string why;
  const std::size_t for_zeros = peak_allocated_by([&] { why = refusal(zeros); });
  EXPECT_NE(why.find("expected an object, found an array"), std::string::npos) << why;
  EXPECT_LT(for_zeros, std::size_t{64} << 10) << "bytes held to refuse " << zeros.size();

  // A valid snapshot of 40,000 blocks (about 4 MB): what is read is what the snapshot holds, at
  // most three times the text (a block is 64 bytes in memory and about 90 as text; its vector may
  // double).
  sp::pool_snapshot big;
  big.backend = "host";
  sp::snapshot_range r;
  r.base = 0x200000;
  r.kind = sp::range_kind::segment;
  for (std::size_t i = 0; i < 40'000; ++i) {
    const bool live = i % 2 == 0;
    r.blocks.push_back({r.bytes, 4096, 1, live ? sp::block_status::live : sp::block_status::free,
                        live ? sp::block_place::none : sp::block_place::large_free, 0,
                        live ? std::vector<sp::snapshot_token>{}
                             : std::vector<sp::snapshot_token>{{1, i, i % 4 == 1}}});
    r.bytes += 4096;
  }
  r.reserved_bytes = r.bytes;
  big.ranges.push_back(std::move(r));
  const std::string text = sp::to_json(big);
  sp::pool_snapshot back;
  const std::size_t for_big = peak_allocated_by([&] { back = sp::snapshot_from_json(text); });
  EXPECT_EQ(back.ranges.at(0).blocks.size(), 40'000u);
  EXPECT_LE(for_big, 3 * text.size()) << "bytes held to read " << text.size();
  // (The snapshot read holds 40,000 blocks of 64 bytes: the count sees the reader's allocations.)
  EXPECT_GE(for_big, 40'000u * sizeof(sp::snapshot_block));
}

TEST(SnapshotReader, ErrorsNameTheJsonPath) {
  const std::string good = sp::to_json(sample_snapshot());
  ASSERT_EQ(sp::to_json(sp::snapshot_from_json(good)), good);
  // Three members are called live_bytes: each error says which.
  EXPECT_REFUSED(edited(good, "\"live_bytes\":1049088", "\"live_bytes\":\"1049088\""),
                 "statistics.live_bytes: expected an unsigned integer, found a string");
  EXPECT_REFUSED(edited(good, "\"live_bytes\":1049088", "\"live_bytes\":1049089", "\"summary\""),
                 "summary.live_bytes: 1049089, but the ranges give 1049088");
  EXPECT_REFUSED(edited(good, "\"live_bytes\":512,", "\"live_bytes\":-512,", "\"classes\""),
                 "summary.classes[0].live_bytes: expected an unsigned integer, found a negative");
  EXPECT_REFUSED(edited(good, "\"size\":256", "\"size\":true"),
                 "ranges[0].blocks[1].size: expected an unsigned integer, found a boolean");
  EXPECT_REFUSED(edited(good, "\"complete\":true", "\"complete\":1"),
                 "ranges[1].blocks[0].tokens[0].complete: expected a boolean, found a number");
  EXPECT_REFUSED(edited(good, "\"chunks\":1}]", "\"chunks\":1,\"colour\":\"red\"}]"),
                 "caches[0].bins[0].colour: unknown member");
  EXPECT_REFUSED(edited(good, "\"other\":0", "\"other\":0,\"more\":0"),
                 "statistics.contention.more: unknown member");
  EXPECT_REFUSED(edited(good, "\"point\":9,", ""),
                 "ranges[1].blocks[0].tokens[0]: member \"point\" is missing");
}

TEST(SnapshotReader, RefusesInvalidUtf8WithItsOffset) {
  const std::string good = sp::to_json(sample_snapshot());
  const std::size_t at = good.find("\"host\"") + 1;
  for (const char* bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string text = edited(good, "\"host\"", std::string("\"") + bad + "host\"");
    EXPECT_REFUSED(text, "at byte " + std::to_string(at), "UTF-8");
  }
  EXPECT_REFUSED(edited(good, "\"host\"", "\"ho\\u0000st\""), "backend", "NUL");
  // Valid UTF-8 of every length reads back.
  const std::string text = edited(good, "\"host\"", "\"h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  EXPECT_EQ(sp::snapshot_from_json(text).backend, "h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
}

TEST(SnapshotReader, TheWriterNeverWritesInvalidUtf8) {
  // A backend's name is the backend's: each byte that is not part of UTF-8 is written as U+FFFD,
  // so that what to_json writes always reads back.
  sp::pool_snapshot s = sample_snapshot();
  s.backend = std::string("ho\xffst\xe2\x82", 7);
  const std::string text = sp::to_json(s);
  EXPECT_EQ(sp::snapshot_from_json(text).backend, "ho\xef\xbf\xbdst\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(SnapshotReader, RefusesWhatTheSchemaDoesNot) {
  const std::string good = sp::to_json(sample_snapshot());
  // Members: none unknown, none twice, none missing (the schema requires each, summary included).
  EXPECT_REFUSED(edited(good, "{", "{\"extra\":1,"), "extra: unknown member");
  EXPECT_REFUSED(edited(good, "\"pool_id\":7", "\"pool_id\":7,\"pool_id\":8"),
                 "pool_id: appears twice");
  EXPECT_REFUSED(good.substr(0, good.find(",\"summary\"")) + "}", "member \"summary\" is missing");
  // Numbers: unsigned integers that fit 64 bits, nothing else.
  EXPECT_REFUSED(edited(good, "\"pool_id\":7", "\"pool_id\":18446744073709551616"),
                 "pool_id: expected an unsigned integer, found a number above 2^64-1");
  EXPECT_REFUSED(edited(good, "\"pool_id\":7", "\"pool_id\":7.0"),
                 "pool_id: expected an unsigned integer, found a number with a fraction");
  EXPECT_REFUSED(edited(good, "\"pool_id\":7", "\"pool_id\":-0"), "pool_id", "negative");
  // Truncation is named as truncation.
  EXPECT_REFUSED(good.substr(0, good.size() / 2), "ends early");
  EXPECT_REFUSED("", "at byte 0", "ends early");
  // Cross-checks the schema states in words.
  EXPECT_REFUSED(edited(good, "\"chunk_bytes\":0", "\"chunk_bytes\":4096", "\"segment\""),
                 "ranges[1]", "chunk_bytes");
  EXPECT_REFUSED(edited(good, "\"reserved_bytes\":1000", "\"reserved_bytes\":1001"), "ranges[0]",
                 "reserved_bytes above its bytes");
  EXPECT_REFUSED(edited(good, "\"place\":\"none\"", "\"place\":\"shared_list\""),
                 "ranges[0].blocks[0]", "place");
  EXPECT_REFUSED(edited(good, "\"place\":\"large_free\"", "\"place\":\"none\""),
                 "ranges[1].blocks[1]", "place");
  EXPECT_REFUSED(edited(good, "\"chunks\":1,", "\"chunks\":2,", "\"segment\""),
                 "ranges[1].blocks[0]", "chunks");
  EXPECT_REFUSED(edited(good, "\"bytes\":256,\"bins\"", "\"bytes\":512,\"bins\""), "caches[0]",
                 "bytes");
  EXPECT_REFUSED(edited(good, "\"chunks\":1}]", "\"chunks\":0}]", "\"bins\""),
                 "caches[0].bins[0].chunks", "at least 1");
  EXPECT_REFUSED(edited(good, "\"vm_granularity\":0", "\"vm_granularity\":8388608"),
                 "vm_granularity", "virtual_memory");
  EXPECT_REFUSED(edited(good, "\"largest_free_block\":1048576", "\"largest_free_block\":1"),
                 "summary.largest_free_block: 1, but the ranges give 1048576");
}
