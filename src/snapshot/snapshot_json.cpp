// streampool: a snapshot as JSON and back (snapshot.hpp; the schema: docs/snapshot.schema.json).
//
// The statistics are written through one table of (name, member) pairs, read back through the
// same table, so that a field added to pool_statistics is added in one place. Everything is an
// unsigned integer, a boolean or a string: addresses and byte counts are exact.
//
// Reading is strict (docs/memory-picture.md, "Snapshots"): the reader (json.hpp) goes
// through the text once, in place, and each object must hold exactly the schema's members, in any
// order; then what the schema says in words is cross-checked (check_shape, check_summary). Errors
// name the JSON path. Memory is the snapshot read, about the size of its text.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "json.hpp"
#include "streampool/error.hpp"
#include "streampool/snapshot.hpp"

namespace streampool {
namespace {

using detail::json::writer;

template <class T>
using field = std::pair<const char*, T pool_statistics::*>;

constexpr std::array<field<std::size_t>, 6> size_fields{{
    {"live_bytes", &pool_statistics::live_bytes},
    {"cached_bytes", &pool_statistics::cached_bytes},
    {"reserved_bytes", &pool_statistics::reserved_bytes},
    {"peak_live_bytes", &pool_statistics::peak_live_bytes},
    {"peak_reserved_bytes", &pool_statistics::peak_reserved_bytes},
    {"memory_limit", &pool_statistics::memory_limit},
}};
constexpr std::array<field<std::uint64_t>, 16> count_fields{{
    {"allocations", &pool_statistics::allocations},
    {"deallocations", &pool_statistics::deallocations},
    {"fresh_allocations", &pool_statistics::fresh_allocations},
    {"same_stream_reuses", &pool_statistics::same_stream_reuses},
    {"ready_reuses", &pool_statistics::ready_reuses},
    {"waited_reuses", &pool_statistics::waited_reuses},
    {"device_waits", &pool_statistics::device_waits},
    {"host_waits", &pool_statistics::host_waits},
    {"upstream_allocations", &pool_statistics::upstream_allocations},
    {"upstream_deallocations", &pool_statistics::upstream_deallocations},
    {"upstream_reserves", &pool_statistics::upstream_reserves},
    {"upstream_creates", &pool_statistics::upstream_creates},
    {"upstream_releases", &pool_statistics::upstream_releases},
    {"upstream_maps", &pool_statistics::upstream_maps},
    {"upstream_unmaps", &pool_statistics::upstream_unmaps},
    {"reclaim_calls", &pool_statistics::reclaim_calls},
}};
constexpr std::array<std::pair<const char*, std::uint64_t lock_contention::*>, 6> contention_fields{
    {
        {"stream_caches", &lock_contention::stream_caches},
        {"class_lists", &lock_contention::class_lists},
        {"large_shards", &lock_contention::large_shards},
        {"growth", &lock_contention::growth},
        {"segments", &lock_contention::segments},
        {"other", &lock_contention::other},
    }};

void write_statistics(writer& w, const pool_statistics& st) {
  w.begin_object();
  for (const auto& [name, member] : size_fields) w.member(name, std::uint64_t{st.*member});
  for (const auto& [name, member] : count_fields) w.member(name, st.*member);
  w.key("contention");
  w.begin_object();
  for (const auto& [name, member] : contention_fields) w.member(name, st.contention.*member);
  w.end_object();
  w.key("streams");
  w.begin_array();
  for (const stream_statistics& s : st.streams) {
    w.begin_object();
    w.member("timeline_id", s.timeline_id);
    w.member("allocations", s.allocations);
    w.member("deallocations", s.deallocations);
    w.member("cached_bytes", std::uint64_t{s.cached_bytes});
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

void write_summary(writer& w, const snapshot_summary& s) {
  w.begin_object();
  w.member("live_bytes", std::uint64_t{s.live_bytes});
  w.member("free_bytes", std::uint64_t{s.free_bytes});
  w.member("free_ready_bytes", std::uint64_t{s.free_ready_bytes});
  w.member("free_pending_bytes", std::uint64_t{s.free_pending_bytes});
  w.member("largest_free_block", std::uint64_t{s.largest_free_block});
  w.member("reserved_bytes", std::uint64_t{s.reserved_bytes});
  w.member("address_bytes", std::uint64_t{s.address_bytes});
  w.key("classes");
  w.begin_array();
  for (const snapshot_summary::by_size& c : s.classes) {
    w.begin_object();
    w.member("chunk_bytes", std::uint64_t{c.chunk_bytes});
    w.member("live_bytes", std::uint64_t{c.live_bytes});
    w.member("free_bytes", std::uint64_t{c.free_bytes});
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

// ---- reading -----------------------------------------------------------------------------------

using detail::json::reader;

constexpr std::array<block_status, 3> all_status{block_status::live, block_status::free,
                                                 block_status::unmapped};
constexpr std::array<block_place, 6> all_places{block_place::none,        block_place::stream_cache,
                                                block_place::shared_list, block_place::never_used,
                                                block_place::large_free,  block_place::in_transit};
constexpr std::array<range_kind, 3> all_kinds{range_kind::slab, range_kind::segment,
                                              range_kind::virtual_range};

/// The members of one object, each read by `read_one(name)` in the order they come. The schema
/// requires every one of its members and allows no other ("required" lists each property and
/// "additionalProperties" is false everywhere): each of `names` must come once, nothing else.
template <std::size_t N, class F>
void read_members(reader& in, const std::array<std::string_view, N>& names, F&& read_one) {
  in.begin_object();
  std::array<bool, N> seen{};
  while (in.next_member()) {
    const auto* it = std::find(names.begin(), names.end(), in.name());
    if (it == names.end()) in.fail("unknown member");
    bool& once = seen[static_cast<std::size_t>(it - names.begin())];
    if (once) in.fail("appears twice in its object");
    once = true;
    read_one(*it);
  }
  for (std::size_t i = 0; i < N; ++i) {
    if (!seen[i]) {
      in.fail(detail::format("member \"%.*s\" is missing", static_cast<int>(names[i].size()),
                             names[i].data()));
    }
  }
}

/// Each item of an array, read by `read_one()`.
template <class F>
void read_items(reader& in, F&& read_one) {
  in.begin_array();
  while (in.next_item()) read_one();
}

/// An unsigned integer of at least `min` (the schema's "minimum") that fits a std::size_t.
std::size_t read_size(reader& in, std::uint64_t min = 0) {
  const std::uint64_t v = in.read_uint();
  if (v < min) {
    in.fail(detail::format("%llu, expected at least %llu", static_cast<unsigned long long>(v),
                           static_cast<unsigned long long>(min)));
  }
  if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
    if (v > SIZE_MAX) in.fail("a number above this machine's address space");
  }
  return static_cast<std::size_t>(v);
}

template <std::size_t N>
using names = std::array<std::string_view, N>;

constexpr auto statistics_members = [] {
  names<size_fields.size() + count_fields.size() + 2> all{};
  std::size_t i = 0;
  for (const auto& f : size_fields) all[i++] = f.first;
  for (const auto& f : count_fields) all[i++] = f.first;
  all[i++] = "contention";
  all[i] = "streams";
  return all;
}();
constexpr auto contention_members = [] {
  names<contention_fields.size()> all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = contention_fields[i].first;
  return all;
}();
constexpr names<4> stream_members{"timeline_id", "allocations", "deallocations", "cached_bytes"};

pool_statistics read_statistics(reader& in) {
  pool_statistics st;
  read_members(in, statistics_members, [&](std::string_view m) {
    for (const auto& [name, member] : size_fields)
      if (m == name) st.*member = read_size(in);
    for (const auto& [name, member] : count_fields)
      if (m == name) st.*member = in.read_uint();
    if (m == "contention") {
      read_members(in, contention_members, [&](std::string_view c) {
        for (const auto& [name, member] : contention_fields)
          if (c == name) st.contention.*member = in.read_uint();
      });
    } else if (m == "streams") {
      read_items(in, [&] {
        stream_statistics ss;
        read_members(in, stream_members, [&](std::string_view f) {
          if (f == "timeline_id") ss.timeline_id = in.read_uint();
          if (f == "allocations") ss.allocations = in.read_uint();
          if (f == "deallocations") ss.deallocations = in.read_uint();
          if (f == "cached_bytes") ss.cached_bytes = read_size(in);
        });
        st.streams.push_back(ss);
      });
    }
  });
  return st;
}

template <class E, std::size_t N>
E read_enum(reader& in, const std::array<E, N>& all) {
  const std::string s = in.read_string();
  for (E e : all)
    if (s == to_string(e)) return e;
  in.fail(detail::format("unknown value \"%s\"", detail::json::printable(s).c_str()));
}

constexpr names<13> root_members{
    "schema",      "schema_version", "pool_id",        "device_id",     "backend",
    "granularity", "vm_granularity", "virtual_memory", "taken_unix_ns", "statistics",
    "ranges",      "caches",         "summary"};
constexpr names<7> range_members{"base",        "bytes", "reserved_bytes", "kind",
                                 "chunk_bytes", "shard", "blocks"};
constexpr names<7> block_members{"offset", "size", "chunks", "status", "place", "stream", "tokens"};
constexpr names<3> token_members{"timeline", "point", "complete"};
constexpr names<5> cache_members{"timeline", "shard", "stream_gone", "bytes", "bins"};
constexpr names<2> bin_members{"chunk_bytes", "chunks"};
constexpr names<8> summary_members{
    "live_bytes",         "free_bytes",     "free_ready_bytes", "free_pending_bytes",
    "largest_free_block", "reserved_bytes", "address_bytes",    "classes"};
constexpr names<3> class_members{"chunk_bytes", "live_bytes", "free_bytes"};

snapshot_block read_block(reader& in) {
  snapshot_block b;
  read_members(in, block_members, [&](std::string_view m) {
    if (m == "offset") b.offset = read_size(in);
    if (m == "size") b.size = read_size(in, 1);
    if (m == "chunks") b.chunks = read_size(in);
    if (m == "status") b.status = read_enum(in, all_status);
    if (m == "place") b.place = read_enum(in, all_places);
    if (m == "stream") b.stream = in.read_uint();
    if (m == "tokens") {
      read_items(in, [&] {
        snapshot_token t;
        read_members(in, token_members, [&](std::string_view f) {
          if (f == "timeline") t.timeline = in.read_uint();
          if (f == "point") t.point = in.read_uint();
          if (f == "complete") t.complete = in.read_bool();
        });
        b.tokens.push_back(t);
      });
    }
  });
  return b;
}

snapshot_range read_range(reader& in) {
  snapshot_range r;
  read_members(in, range_members, [&](std::string_view m) {
    if (m == "base") r.base = static_cast<std::uintptr_t>(read_size(in));
    if (m == "bytes") r.bytes = read_size(in, 1);
    if (m == "reserved_bytes") r.reserved_bytes = read_size(in);
    if (m == "kind") r.kind = read_enum(in, all_kinds);
    if (m == "chunk_bytes") r.chunk_bytes = read_size(in);
    if (m == "shard") r.shard = read_size(in);
    if (m == "blocks") read_items(in, [&] { r.blocks.push_back(read_block(in)); });
  });
  return r;
}

snapshot_cache read_cache(reader& in) {
  snapshot_cache c;
  read_members(in, cache_members, [&](std::string_view m) {
    if (m == "timeline") c.timeline = in.read_uint();
    if (m == "shard") c.shard = read_size(in);
    if (m == "stream_gone") c.stream_gone = in.read_bool();
    if (m == "bytes") c.bytes = read_size(in);
    if (m == "bins") {
      read_items(in, [&] {
        snapshot_cache::bin b;
        read_members(in, bin_members, [&](std::string_view f) {
          if (f == "chunk_bytes") b.chunk_bytes = read_size(in, 1);
          if (f == "chunks") b.chunks = read_size(in, 1);
        });
        c.bins.push_back(b);
      });
    }
  });
  return c;
}

snapshot_summary read_summary(reader& in) {
  snapshot_summary s;
  read_members(in, summary_members, [&](std::string_view m) {
    if (m == "live_bytes") s.live_bytes = read_size(in);
    if (m == "free_bytes") s.free_bytes = read_size(in);
    if (m == "free_ready_bytes") s.free_ready_bytes = read_size(in);
    if (m == "free_pending_bytes") s.free_pending_bytes = read_size(in);
    if (m == "largest_free_block") s.largest_free_block = read_size(in);
    if (m == "reserved_bytes") s.reserved_bytes = read_size(in);
    if (m == "address_bytes") s.address_bytes = read_size(in);
    if (m == "classes") {
      read_items(in, [&] {
        snapshot_summary::by_size c;
        read_members(in, class_members, [&](std::string_view f) {
          if (f == "chunk_bytes") c.chunk_bytes = read_size(in);
          if (f == "live_bytes") c.live_bytes = read_size(in);
          if (f == "free_bytes") c.free_bytes = read_size(in);
        });
        s.classes.push_back(c);
      });
    }
  });
  return s;
}

// ---- cross-checks ------------------------------------------------------------------------------

/// What the schema and snapshot.hpp say in words, for a snapshot read from text: what draws it
/// trusts them (a block larger than its range would be drawn almost without end). Throws naming
/// the path of what is wrong.
void check_shape(const reader& in, const pool_snapshot& s) {
  if (s.virtual_memory != (s.vm_granularity != 0)) {
    in.fail_at("vm_granularity",
               detail::format("%zu with virtual_memory %s (0 exactly when there is none)",
                              s.vm_granularity, s.virtual_memory ? "true" : "false"));
  }
  std::uintptr_t end = 0;
  for (std::size_t i = 0; i < s.ranges.size(); ++i) {
    const snapshot_range& r = s.ranges[i];
    const std::string at = detail::format("ranges[%zu]", i);
    const auto bad = [&](const std::string& what) {
      in.fail_at(at, detail::format("(base %llu, %zu bytes, a %s) %s",
                                    static_cast<unsigned long long>(r.base), r.bytes,
                                    to_string(r.kind), what.c_str()));
    };
    if (r.base + r.bytes < r.base) bad("wraps around the address space");
    if (i != 0 && r.base < end) bad("overlaps the range before it, or is out of address order");
    end = r.base + r.bytes;
    if (r.reserved_bytes > r.bytes) bad("has reserved_bytes above its bytes");
    if (r.kind == range_kind::slab && r.chunk_bytes == 0) bad("is a slab with chunk_bytes 0");
    if (r.kind != range_kind::slab && r.chunk_bytes != 0)
      bad(detail::format("has chunk_bytes %zu (only slabs have chunks)", r.chunk_bytes));
    if (r.kind == range_kind::virtual_range && !s.virtual_memory)
      bad("is a virtual range in a pool without virtual memory");
    std::size_t offset = 0;
    for (std::size_t k = 0; k < r.blocks.size(); ++k) {
      const snapshot_block& b = r.blocks[k];
      const auto bad_block = [&](const std::string& what) {
        in.fail_at(detail::format("%s.blocks[%zu]", at.c_str(), k),
                   detail::format("(offset %zu, %zu bytes, %s) %s", b.offset, b.size,
                                  to_string(b.status), what.c_str()));
      };
      if (b.offset != offset || b.size > r.bytes - offset) {
        bad_block(
            "is where its range's blocks do not tile it (each at the end of the one "
            "before, inside the range)");
      }
      offset += b.size;
      if (r.kind != range_kind::slab && b.chunks != 1)
        bad_block(detail::format("has chunks %zu (1 for large blocks)", b.chunks));
      if (r.kind == range_kind::slab && b.chunks != 0 &&
          (b.size % r.chunk_bytes != 0 || b.size / r.chunk_bytes != b.chunks))
        bad_block(detail::format("is not its %zu chunks of %zu bytes", b.chunks, r.chunk_bytes));
      if (r.kind == range_kind::slab && b.chunks == 0 &&
          (b.status != block_status::free || k + 1 != r.blocks.size()))
        bad_block("has chunks 0 (a slab's tail) but is not its slab's free last block");
      const bool free = b.status == block_status::free;
      if (free == (b.place == block_place::none)) {
        bad_block(detail::format(R"(has place "%s" (free blocks have one, others "none"))",
                                 to_string(b.place)));
      }
      if (b.status == block_status::unmapped && r.kind != range_kind::virtual_range)
        bad_block("is unmapped outside a virtual range");
      if (b.status == block_status::unmapped && !b.tokens.empty())
        bad_block("is unmapped but has tokens");
    }
    if (offset != r.bytes) bad("ends after its blocks: they do not tile it");
  }
  for (std::size_t i = 0; i < s.caches.size(); ++i) {
    const snapshot_cache& c = s.caches[i];
    const std::string at = detail::format("caches[%zu]", i);
    if (i != 0 && c.timeline < s.caches[i - 1].timeline) {
      in.fail_at(at, detail::format("timeline %llu after %llu (caches are by timeline id)",
                                    static_cast<unsigned long long>(c.timeline),
                                    static_cast<unsigned long long>(s.caches[i - 1].timeline)));
    }
    std::size_t held = 0;
    for (std::size_t k = 0; k < c.bins.size(); ++k) {
      const snapshot_cache::bin& b = c.bins[k];
      if (k != 0 && b.chunk_bytes <= c.bins[k - 1].chunk_bytes) {
        in.fail_at(detail::format("%s.bins[%zu]", at.c_str(), k),
                   detail::format("chunk_bytes %zu after %zu (one bin a size, smallest first)",
                                  b.chunk_bytes, c.bins[k - 1].chunk_bytes));
      }
      std::size_t bytes = 0;
      if (__builtin_mul_overflow(b.chunk_bytes, b.chunks, &bytes) ||
          __builtin_add_overflow(held, bytes, &held)) {
        in.fail_at(at, "its bins hold more than 2^64-1 bytes");
      }
    }
    if (c.bytes != held)
      in.fail_at(at, detail::format("bytes %zu, but its bins hold %zu", c.bytes, held));
  }
}

/// The summary read must be summarize()'s of the ranges read (the schema: "computed from the
/// ranges"). Throws naming the first member that differs.
void check_summary(const reader& in, const snapshot_summary& read, const pool_snapshot& s) {
  const snapshot_summary want = summarize(s);
  const auto same = [&](const std::string& path, std::size_t got, std::size_t expected) {
    if (got != expected)
      in.fail_at(path, detail::format("%zu, but the ranges give %zu", got, expected));
  };
  same("summary.live_bytes", read.live_bytes, want.live_bytes);
  same("summary.free_bytes", read.free_bytes, want.free_bytes);
  same("summary.free_ready_bytes", read.free_ready_bytes, want.free_ready_bytes);
  same("summary.free_pending_bytes", read.free_pending_bytes, want.free_pending_bytes);
  same("summary.largest_free_block", read.largest_free_block, want.largest_free_block);
  same("summary.reserved_bytes", read.reserved_bytes, want.reserved_bytes);
  same("summary.address_bytes", read.address_bytes, want.address_bytes);
  if (read.classes.size() != want.classes.size()) {
    in.fail_at("summary.classes", detail::format("%zu entries, but the ranges give %zu",
                                                 read.classes.size(), want.classes.size()));
  }
  for (std::size_t i = 0; i < want.classes.size(); ++i) {
    const std::string at = detail::format("summary.classes[%zu].", i);
    same(at + "chunk_bytes", read.classes[i].chunk_bytes, want.classes[i].chunk_bytes);
    same(at + "live_bytes", read.classes[i].live_bytes, want.classes[i].live_bytes);
    same(at + "free_bytes", read.classes[i].free_bytes, want.classes[i].free_bytes);
  }
}
}  // namespace

std::string to_json(const pool_snapshot& s) {
  writer w;
  w.begin_object();
  w.member("schema", "streampool.snapshot");
  w.member("schema_version", std::uint64_t{static_cast<unsigned>(s.schema_version)});
  w.member("pool_id", s.pool_id);
  w.member("device_id", s.device_id);
  w.member("backend", s.backend);
  w.member("granularity", std::uint64_t{s.granularity});
  w.member("vm_granularity", std::uint64_t{s.vm_granularity});
  w.member("virtual_memory", s.virtual_memory);
  w.member("taken_unix_ns", s.taken_unix_ns);
  w.key("statistics");
  write_statistics(w, s.statistics);
  w.key("ranges");
  w.begin_array();
  for (const snapshot_range& r : s.ranges) {
    w.begin_object();
    w.member("base", std::uint64_t{r.base});
    w.member("bytes", std::uint64_t{r.bytes});
    w.member("reserved_bytes", std::uint64_t{r.reserved_bytes});
    w.member("kind", to_string(r.kind));
    w.member("chunk_bytes", std::uint64_t{r.chunk_bytes});
    w.member("shard", std::uint64_t{r.shard});
    w.key("blocks");
    w.begin_array();
    for (const snapshot_block& b : r.blocks) {
      w.begin_object();
      w.member("offset", std::uint64_t{b.offset});
      w.member("size", std::uint64_t{b.size});
      w.member("chunks", std::uint64_t{b.chunks});
      w.member("status", to_string(b.status));
      w.member("place", to_string(b.place));
      w.member("stream", b.stream);
      w.key("tokens");
      w.begin_array();
      for (const snapshot_token& t : b.tokens) {
        w.begin_object();
        w.member("timeline", t.timeline);
        w.member("point", t.point);
        w.member("complete", t.complete);
        w.end_object();
      }
      w.end_array();
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("caches");
  w.begin_array();
  for (const snapshot_cache& c : s.caches) {
    w.begin_object();
    w.member("timeline", c.timeline);
    w.member("shard", std::uint64_t{c.shard});
    w.member("stream_gone", c.stream_gone);
    w.member("bytes", std::uint64_t{c.bytes});
    w.key("bins");
    w.begin_array();
    for (const snapshot_cache::bin& b : c.bins) {
      w.begin_object();
      w.member("chunk_bytes", std::uint64_t{b.chunk_bytes});
      w.member("chunks", std::uint64_t{b.chunks});
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("summary");
  write_summary(w, summarize(s));
  w.end_object();
  return w.take();
}

pool_snapshot snapshot_from_json(std::string_view json) {
  reader in(json, "snapshot JSON");
  pool_snapshot s;
  snapshot_summary summary;
  read_members(in, root_members, [&](std::string_view m) {
    if (m == "schema") {
      if (const std::string schema = in.read_string(); schema != "streampool.snapshot") {
        in.fail(detail::format(R"("%s", not "streampool.snapshot")",
                               detail::json::printable(schema).c_str()));
      }
    }
    if (m == "schema_version") {
      if (const std::uint64_t v = in.read_uint(); v != snapshot_schema_version) {
        in.fail_at("", detail::format("schema_version %llu; this library reads version %d only",
                                      static_cast<unsigned long long>(v), snapshot_schema_version));
      }
    }
    if (m == "pool_id") s.pool_id = in.read_uint();
    if (m == "device_id") s.device_id = in.read_uint();
    if (m == "backend") s.backend = in.read_string();
    if (m == "granularity") s.granularity = read_size(in);
    if (m == "vm_granularity") s.vm_granularity = read_size(in);
    if (m == "virtual_memory") s.virtual_memory = in.read_bool();
    if (m == "taken_unix_ns") s.taken_unix_ns = in.read_uint();
    if (m == "statistics") s.statistics = read_statistics(in);
    if (m == "ranges") read_items(in, [&] { s.ranges.push_back(read_range(in)); });
    if (m == "caches") read_items(in, [&] { s.caches.push_back(read_cache(in)); });
    if (m == "summary") summary = read_summary(in);
  });
  check_shape(in, s);
  check_summary(in, summary, s);
  return s;
}

}  // namespace streampool
