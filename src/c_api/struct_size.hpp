// streampool C ABI: versioned structs, the rules of include/streampool.h's "versioned structs".
//
// Glossary
//   struct_size  the first field of every struct of the C ABI: sizeof the struct as its caller
//                compiled it.
//   version      one layout of a struct. Each version appends fields to the one before; version 1
//                is the oldest layout this library accepts, the last is its own header's.
//   covered      a version is covered by a caller's struct when struct_size is at least that
//                version's sizeof. Sizes decide, not the ends of fields: a field appended later
//                may lie in an older layout's tail padding, where an older caller has garbage.
//   tail         the bytes of a newer caller's struct past this library's size: fields this
//                library does not know.
#pragma once

#include <cstddef>
#include <span>

namespace streampool::c_api {

/// A struct of the C ABI: its names and the sizeof of each of its versions, oldest first.
struct abi_struct {
  const char* name;       ///< the C typedef, "sp_pool_options_t"
  const char* init_name;  ///< what initialises it, "sp_pool_options_init"
  std::span<const std::size_t> version_sizes;

  /// This library's size: its newest version's.
  [[nodiscard]] std::size_t size() const noexcept { return version_sizes.back(); }
};

extern const abi_struct host_options_abi;
extern const abi_struct pool_options_abi;
extern const abi_struct pool_statistics_abi;

/// The struct named `name`, or nullptr.
[[nodiscard]] const abi_struct* find_abi_struct(const char* name) noexcept;

/// The newest version (1 = the first) that the caller's struct at `caller` covers, for a struct
/// the library only writes: a larger struct_size is accepted and its tail left alone. Throws
/// error{INVALID_ARGUMENT} naming `function`, the struct and the sizes when struct_size is below
/// the first version's size (0 included).
[[nodiscard]] unsigned version_to_write(const abi_struct& s, const void* caller,
                                        const char* function);

/// The same for a struct the library reads (options): a newer caller's tail must be zero (its
/// newer fields left as *_init set them), else error{INVALID_ARGUMENT} naming the first byte
/// that is not, rather than ignore a setting this library cannot honour.
[[nodiscard]] unsigned version_to_read(const abi_struct& s, const void* caller,
                                       const char* function);

}  // namespace streampool::c_api
