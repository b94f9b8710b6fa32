// streampool C ABI: the versions of each struct, the struct_size checks, and sp_struct_size.
#include "struct_size.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "errors.hpp"
#include "streampool/error.hpp"

namespace streampool::c_api {

using streampool::detail::format;

namespace {

// struct_size is read from the caller's bytes before the struct's type is trusted.
static_assert(offsetof(sp_host_options_t, struct_size) == 0);
static_assert(offsetof(sp_pool_options_t, struct_size) == 0);
static_assert(offsetof(sp_pool_statistics_t, struct_size) == 0);

// Version 1 of the structs that grew: their layouts before the virtual-memory fields were
// appended (the C ABI's first form, with struct_size in front), as a caller built against them
// lays them out. sp_host_options_t has no such version: its appended field (virtual_memory) lies
// in the older layout's tail padding, so the two sizes are equal and only the newer is accepted.
struct pool_options_v1 {
  std::size_t struct_size;
  std::size_t memory_limit;
  std::size_t small_max;
  std::size_t stream_cache_bytes;
  int poison_on_free;
};
static_assert(offsetof(pool_options_v1, poison_on_free) ==
              offsetof(sp_pool_options_t, poison_on_free));

// Version 2 of the pool options: before share_between_streams was appended.
struct pool_options_v2 {
  std::size_t struct_size;
  std::size_t memory_limit;
  std::size_t small_max;
  std::size_t stream_cache_bytes;
  int poison_on_free;
  int virtual_memory;
  std::size_t release_threshold;
};
static_assert(offsetof(pool_options_v2, release_threshold) ==
              offsetof(sp_pool_options_t, release_threshold));

// Version 3 of the pool options: before large_cache_bytes (the shelf's bound) was appended.
// Version 2 ends in a size_t, so it has no tail padding for the next field to fall into.
struct pool_options_v3 {
  pool_options_v2 v2;
  int share_between_streams;
};
static_assert(offsetof(pool_options_v3, share_between_streams) ==
              offsetof(sp_pool_options_t, share_between_streams));

struct pool_statistics_v1 {
  std::size_t struct_size;
  std::size_t live_bytes;
  std::size_t cached_bytes;
  std::size_t reserved_bytes;
  std::size_t peak_live_bytes;
  std::size_t peak_reserved_bytes;
  std::size_t memory_limit;
  std::uint64_t allocations;
  std::uint64_t deallocations;
  std::uint64_t fresh_allocations;
  std::uint64_t same_stream_reuses;
  std::uint64_t ready_reuses;
  std::uint64_t waited_reuses;
  std::uint64_t device_waits;
  std::uint64_t host_waits;
  std::uint64_t upstream_allocations;
  std::uint64_t upstream_deallocations;
  std::uint64_t reclaim_calls;
  std::size_t stream_caches;
};
static_assert(offsetof(pool_statistics_v1, stream_caches) ==
              offsetof(sp_pool_statistics_t, stream_caches));

// Version 2 of the pool statistics: before alloc_retries (PyTorch's num_alloc_retries) was
// appended.
struct pool_statistics_v2 {
  pool_statistics_v1 v1;
  std::uint64_t upstream_reserves;
  std::uint64_t upstream_creates;
  std::uint64_t upstream_releases;
  std::uint64_t upstream_maps;
  std::uint64_t upstream_unmaps;
  std::uint64_t upstream_calls;
};
static_assert(offsetof(pool_statistics_v2, upstream_calls) ==
              offsetof(sp_pool_statistics_t, upstream_calls));

// Version 4 of the pool options: before keep_memory (for CUDA graph pools) was appended.
struct pool_options_v4 {
  pool_options_v3 v3;
  std::size_t large_cache_bytes;
};
static_assert(offsetof(pool_options_v4, large_cache_bytes) ==
              offsetof(sp_pool_options_t, large_cache_bytes));

constexpr std::array<std::size_t, 1> host_options_sizes{sizeof(sp_host_options_t)};
constexpr std::array<std::size_t, 5> pool_options_sizes{
    sizeof(pool_options_v1), sizeof(pool_options_v2), sizeof(pool_options_v3),
    sizeof(pool_options_v4), sizeof(sp_pool_options_t)};
constexpr std::array<std::size_t, 3> pool_statistics_sizes{
    sizeof(pool_statistics_v1), sizeof(pool_statistics_v2), sizeof(sp_pool_statistics_t)};
static_assert(sizeof(pool_options_v1) < sizeof(pool_options_v2));
static_assert(sizeof(pool_options_v2) < sizeof(pool_options_v3));
static_assert(sizeof(pool_options_v3) < sizeof(pool_options_v4));
static_assert(sizeof(pool_options_v4) < sizeof(sp_pool_options_t));
static_assert(sizeof(pool_statistics_v1) < sizeof(pool_statistics_v2));
static_assert(sizeof(pool_statistics_v2) < sizeof(sp_pool_statistics_t));

const std::array<const abi_struct*, 3> all_structs{&host_options_abi, &pool_options_abi,
                                                   &pool_statistics_abi};

// The sizes of the struct's versions, for a message: "40 (version 1), 48 (version 2)".
std::string version_list(const abi_struct& s) {
  std::string text;
  for (std::size_t v = 0; v < s.version_sizes.size(); ++v) {
    if (v > 0) text += ", ";
    text += format("%zu (version %zu)", s.version_sizes[v], v + 1);
  }
  return text;
}

std::size_t struct_size_of(const void* caller) {
  std::size_t size = 0;
  std::memcpy(&size, caller, sizeof size);
  return size;
}

}  // namespace

const abi_struct host_options_abi{"sp_host_options_t", "sp_host_options_init", host_options_sizes};
const abi_struct pool_options_abi{"sp_pool_options_t", "sp_pool_options_init", pool_options_sizes};
const abi_struct pool_statistics_abi{"sp_pool_statistics_t", "sp_pool_statistics_init",
                                     pool_statistics_sizes};

const abi_struct* find_abi_struct(const char* name) noexcept {
  for (const abi_struct* s : all_structs) {
    if (std::strcmp(s->name, name) == 0) return s;
  }
  return nullptr;
}

unsigned version_to_write(const abi_struct& s, const void* caller, const char* function) {
  const std::size_t size = struct_size_of(caller);
  if (size < s.version_sizes.front()) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s.struct_size is %zu, below %zu, the size of its "
                       "first version (this library's versions: %s); initialise the struct with "
                       "%s",
                       function, s.name, size, s.version_sizes.front(), version_list(s).c_str(),
                       s.init_name)};
  }
  // A struct never grows by more than a few fields per release: a size far beyond this library's
  // is not a newer header but a struct_size never set (an uninitialised struct), and reading up
  // to it would run past the caller's memory.
  const std::size_t most = 8 * s.size();
  if (size > most) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s.struct_size is %zu, more than %zu (8 times this "
                       "library's %zu): it was never set; initialise the struct with %s",
                       function, s.name, size, most, s.size(), s.init_name)};
  }
  unsigned version = 0;
  for (std::size_t v : s.version_sizes) {
    if (size >= v) ++version;
  }
  return version;
}

unsigned version_to_read(const abi_struct& s, const void* caller, const char* function) {
  const unsigned version = version_to_write(s, caller, function);
  const std::size_t size = struct_size_of(caller);
  const auto* bytes = static_cast<const unsigned char*>(caller);
  for (std::size_t i = s.size(); i < size; ++i) {
    if (bytes[i] != 0) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  format("streampool: %s: %s.struct_size is %zu, larger than this library's "
                         "%zu (a newer header), and byte %zu, past the fields this library "
                         "knows, is %u, not 0: a newer field is set that this library cannot "
                         "honour",
                         function, s.name, size, s.size(), i, static_cast<unsigned>(bytes[i]))};
    }
  }
  return version;
}

}  // namespace streampool::c_api

extern "C" {

sp_status_t sp_struct_size(const char* name, size_t* size) {
  return streampool::c_api::guarded(__func__, [&](const char* entry) {
    using streampool::c_api::error;
    streampool::c_api::require(name, entry, "name");
    streampool::c_api::require(size, entry, "size");
    const streampool::c_api::abi_struct* s = streampool::c_api::find_abi_struct(name);
    if (s == nullptr) {
      std::string known;
      for (const streampool::c_api::abi_struct* k : streampool::c_api::all_structs) {
        known += known.empty() ? "" : ", ";
        known += k->name;
      }
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  std::string("streampool: ") + entry + ": no struct of the C ABI is named '" +
                      name + "' (the structs are " + known + ")"};
    }
    *size = s->size();
  });
}

}  // extern "C"
