// streampool: size classes for sub-allocated (small) requests.
//
// 256-byte steps up to 1 KiB, then four classes per power of two (1280, 1536, 1792, 2048, 2560,
// ...): at most 25% internal waste, O(1) to compute, 60 classes up to 16 MiB.
#pragma once

#include <bit>
#include <cstddef>

namespace streampool::detail {

inline constexpr std::size_t min_block = 256;  // size and alignment of the smallest block
inline constexpr std::size_t max_classes = 60;

[[nodiscard]] constexpr std::size_t class_of(std::size_t n) noexcept {
  if (n <= 1024) return n == 0 ? 0 : (n + 255) / 256 - 1;
  const auto b = static_cast<std::size_t>(std::bit_width(n - 1)) - 1;  // n in (2^b, 2^(b+1)]
  return 4 + (b - 10) * 4 + ((n - 1 - (std::size_t{1} << b)) >> (b - 2));
}

[[nodiscard]] constexpr std::size_t class_size(std::size_t c) noexcept {
  if (c < 4) return 256 * (c + 1);
  const std::size_t b = 10 + (c - 4) / 4;
  return (std::size_t{1} << b) + (std::size_t{1} << (b - 2)) * ((c - 4) % 4 + 1);
}

static_assert(class_of(256) == 0 && class_of(257) == 1 && class_of(1024) == 3);
static_assert(class_size(class_of(1025)) == 1280 && class_size(class_of(2048)) == 2048);
static_assert(class_size(class_of(std::size_t{1} << 20)) == std::size_t{1} << 20);
static_assert(class_of(std::size_t{16} << 20) == max_classes - 1);

}  // namespace streampool::detail
