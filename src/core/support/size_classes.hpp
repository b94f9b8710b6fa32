// streampool: size classes for sub-allocated (small) requests.
//
// 256-byte steps up to 1 KiB, then four classes per power of two (1280, 1536, 1792, 2048, 2560,
// ...): at most 25% internal waste, O(1) to compute, 60 classes up to 16 MiB.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "streampool/error.hpp"

namespace streampool::detail {

inline constexpr std::size_t min_block = 256;  // size and alignment of the smallest block
inline constexpr std::size_t max_classes = 60;

/// The class of n by its formula (class_of's slow half).
[[nodiscard]] constexpr std::size_t class_by_formula(std::size_t n) noexcept {
  if (n <= 1024) return n == 0 ? 0 : (n + 255) / 256 - 1;
  const auto b = static_cast<std::size_t>(std::bit_width(n - 1)) - 1;  // n in (2^b, 2^(b+1)]
  return 4 + (b - 10) * 4 + ((n - 1 - (std::size_t{1} << b)) >> (b - 2));
}

/// Requests up to this many bytes find their class in a table (class_of).
inline constexpr std::size_t class_table_max = std::size_t{64} << 10;

/// The class of every multiple of 256 bytes up to class_table_max, by its number of 256-byte
/// steps. Exact for every n in between too: every class size is a multiple of 256, so n and n
/// rounded up to 256 are in one class.
inline constexpr auto class_table = [] {
  std::array<std::uint8_t, class_table_max / 256 + 1> t{};
  for (std::size_t k = 0; k < t.size(); ++k)
    t[k] = static_cast<std::uint8_t>(class_by_formula(k * 256));
  return t;
}();

/// The class of a request of n bytes (n <= 16 MiB). A table lookup up to 64 KiB: this is on every
/// small allocation's path, where the formula's bit scan, shifts and subtractions would be a
/// visible share of the call (docs/performance.md, "The small path").
[[nodiscard]] constexpr std::size_t class_of(std::size_t n) noexcept {
  if (n <= class_table_max) [[likely]]
    return class_table[(n + 255) / 256];
  return class_by_formula(n);
}

/// The size of class c by its formula.
[[nodiscard]] constexpr std::size_t class_size_by_formula(std::size_t c) noexcept {
  if (c < 4) return 256 * (c + 1);
  const std::size_t b = 10 + (c - 4) / 4;
  return (std::size_t{1} << b) + (std::size_t{1} << (b - 2)) * ((c - 4) % 4 + 1);
}

inline constexpr auto class_sizes = [] {
  std::array<std::size_t, max_classes> t{};
  for (std::size_t c = 0; c < max_classes; ++c) t[c] = class_size_by_formula(c);
  return t;
}();

/// The size of class c (< max_classes): a table, as for class_of (every cached allocation and
/// free counts its class's bytes).
[[nodiscard]] constexpr std::size_t class_size(std::size_t c) noexcept {
  STREAMPOOL_ASSERT_INTERNAL(c < max_classes);
  return class_sizes[c];
}

static_assert(class_of(256) == 0 && class_of(257) == 1 && class_of(1024) == 3);
static_assert(class_size(class_of(1025)) == 1280 && class_size(class_of(2048)) == 2048);
static_assert(class_size(class_of(std::size_t{1} << 20)) == std::size_t{1} << 20);
static_assert(class_of(std::size_t{16} << 20) == max_classes - 1);
static_assert([] {
  // Each 256-byte step's ends and middle (the table's claim above), and past the table.
  for (std::size_t k = 0; k <= class_table_max / 256 + 4; ++k)
    for (std::size_t n : {k * 256, k * 256 + 1, k * 256 + 128, k * 256 + 255})
      if (class_of(n) != class_by_formula(n)) return false;
  return true;
}());

}  // namespace streampool::detail
