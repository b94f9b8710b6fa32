// streampool: a snapshot as JSON and back (snapshot.hpp; the schema: docs/snapshot.schema.json).
//
// The statistics are written through one table of (name, member) pairs, read back through the
// same table, so that a field added to pool_statistics is added in one place. Everything is an
// unsigned integer, a boolean or a string: addresses and byte counts are exact.
#include <array>
#include <string>
#include <utility>

#include "json.hpp"
#include "streampool/error.hpp"
#include "streampool/snapshot.hpp"

namespace streampool {
namespace {

using detail::json::value;
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

pool_statistics read_statistics(const value& v) {
  pool_statistics st;
  for (const auto& [name, member] : size_fields)
    st.*member = static_cast<std::size_t>(v.at(name).as_uint(name));
  for (const auto& [name, member] : count_fields) st.*member = v.at(name).as_uint(name);
  const value& c = v.at("contention");
  for (const auto& [name, member] : contention_fields)
    st.contention.*member = c.at(name).as_uint(name);
  for (const value& s : v.at("streams").items("streams")) {
    stream_statistics ss;
    ss.timeline_id = s.at("timeline_id").as_uint("timeline_id");
    ss.allocations = s.at("allocations").as_uint("allocations");
    ss.deallocations = s.at("deallocations").as_uint("deallocations");
    ss.cached_bytes = static_cast<std::size_t>(s.at("cached_bytes").as_uint("cached_bytes"));
    st.streams.push_back(ss);
  }
  return st;
}

template <class E, std::size_t N>
E read_enum(const value& v, const char* what, const std::array<E, N>& all) {
  const std::string& s = v.as_string(what);
  for (E e : all)
    if (s == to_string(e)) return e;
  throw logic_error(detail::format("%s: unknown value \"%s\"", what, s.c_str()));
}

constexpr std::array<block_status, 3> all_status{block_status::live, block_status::free,
                                                 block_status::unmapped};
constexpr std::array<block_place, 6> all_places{block_place::none,        block_place::stream_cache,
                                                block_place::shared_list, block_place::never_used,
                                                block_place::large_free,  block_place::in_transit};
constexpr std::array<range_kind, 3> all_kinds{range_kind::slab, range_kind::segment,
                                              range_kind::virtual_range};

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

/// The invariants of snapshot.hpp, for a snapshot read from text: what draws it trusts them (a
/// block larger than its range would be drawn almost without end). Throws naming the range.
void check_shape(const pool_snapshot& s) {
  std::uintptr_t end = 0;
  for (std::size_t i = 0; i < s.ranges.size(); ++i) {
    const snapshot_range& r = s.ranges[i];
    const auto bad = [&](const char* what) {
      throw logic_error(detail::format("ranges[%zu] (base %llu, %zu bytes): %s", i,
                                       static_cast<unsigned long long>(r.base), r.bytes, what));
    };
    if (r.bytes == 0 || r.base + r.bytes < r.base) bad("an empty or wrapping span");
    if (i != 0 && r.base < end) bad("overlaps the range before it, or is out of address order");
    end = r.base + r.bytes;
    if (r.kind == range_kind::slab && r.chunk_bytes == 0) bad("a slab with chunk_bytes 0");
    std::size_t at = 0;
    for (const snapshot_block& b : r.blocks) {
      if (b.offset != at || b.size == 0 || b.size > r.bytes - at)
        bad("its blocks do not tile it (each at the end of the one before, size > 0, inside it)");
      at += b.size;
      if (r.kind == range_kind::slab && b.chunks != 0 &&
          (b.size % r.chunk_bytes != 0 || b.size / r.chunk_bytes != b.chunks))
        bad("a block that is not its count of chunks");
      if (b.status == block_status::unmapped && r.kind != range_kind::virtual_range)
        bad("an unmapped block outside a virtual range");
    }
    if (at != r.bytes) bad("its blocks end before it does");
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
  const value doc = detail::json::parse(json, "snapshot JSON");
  try {
    if (doc.at("schema").as_string("schema") != "streampool.snapshot")
      throw logic_error("schema: not \"streampool.snapshot\"");
    pool_snapshot s;
    const std::uint64_t version = doc.at("schema_version").as_uint("schema_version");
    if (version != static_cast<std::uint64_t>(snapshot_schema_version)) {
      throw logic_error(detail::format("schema_version %llu; this library reads version %d",
                                       static_cast<unsigned long long>(version),
                                       snapshot_schema_version));
    }
    const auto size = [](const value& v, const char* name) {
      return static_cast<std::size_t>(v.at(name).as_uint(name));
    };
    s.pool_id = doc.at("pool_id").as_uint("pool_id");
    s.device_id = doc.at("device_id").as_uint("device_id");
    s.backend = doc.at("backend").as_string("backend");
    s.granularity = size(doc, "granularity");
    s.vm_granularity = size(doc, "vm_granularity");
    s.virtual_memory = doc.at("virtual_memory").as_bool("virtual_memory");
    s.taken_unix_ns = doc.at("taken_unix_ns").as_uint("taken_unix_ns");
    s.statistics = read_statistics(doc.at("statistics"));
    for (const value& rv : doc.at("ranges").items("ranges")) {
      snapshot_range r;
      r.base = static_cast<std::uintptr_t>(rv.at("base").as_uint("base"));
      r.bytes = size(rv, "bytes");
      r.reserved_bytes = size(rv, "reserved_bytes");
      r.kind = read_enum(rv.at("kind"), "kind", all_kinds);
      r.chunk_bytes = size(rv, "chunk_bytes");
      r.shard = size(rv, "shard");
      for (const value& bv : rv.at("blocks").items("blocks")) {
        snapshot_block b;
        b.offset = size(bv, "offset");
        b.size = size(bv, "size");
        b.chunks = size(bv, "chunks");
        b.status = read_enum(bv.at("status"), "status", all_status);
        b.place = read_enum(bv.at("place"), "place", all_places);
        b.stream = bv.at("stream").as_uint("stream");
        for (const value& tv : bv.at("tokens").items("tokens")) {
          b.tokens.push_back({tv.at("timeline").as_uint("timeline"),
                              tv.at("point").as_uint("point"),
                              tv.at("complete").as_bool("complete")});
        }
        r.blocks.push_back(std::move(b));
      }
      s.ranges.push_back(std::move(r));
    }
    for (const value& cv : doc.at("caches").items("caches")) {
      snapshot_cache c;
      c.timeline = cv.at("timeline").as_uint("timeline");
      c.shard = size(cv, "shard");
      c.stream_gone = cv.at("stream_gone").as_bool("stream_gone");
      c.bytes = size(cv, "bytes");
      for (const value& bv : cv.at("bins").items("bins"))
        c.bins.push_back({size(bv, "chunk_bytes"), size(bv, "chunks")});
      s.caches.push_back(std::move(c));
    }
    check_shape(s);
    return s;
  } catch (const logic_error& e) {
    throw logic_error(std::string("snapshot JSON: ") + e.what());
  }
}

}  // namespace streampool
