// White-box: a slab's chunk state bytes (src/core/pool/segment.hpp). Every chunk has its own byte,
// the carve order visits every chunk once, and the first chunks carved (by threads that then keep
// reusing them) have their bytes on different cache lines, so that their allocs and frees never
// write a line another thread writes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <set>

#include "core/pool/segment.hpp"

namespace sd = streampool::detail;

namespace {

constexpr std::size_t chunk = 4096;

sd::slab make_slab(std::size_t chunks) {
  // The base is never dereferenced: only the state bytes are.
  return {sd::to_ptr(std::uintptr_t{1} << 40), chunks * chunk, 0, chunk};
}

std::uintptr_t line_of(const std::atomic<std::uint8_t>& b) {
  return reinterpret_cast<std::uintptr_t>(&b) / 64;
}

TEST(Slab, EveryChunkHasItsOwnStateByte) {
  for (std::size_t chunks : {1u, 16u, 128u, 129u, 256u, 512u, 1024u, 1638u, 8192u}) {
    const sd::slab s = make_slab(chunks);
    ASSERT_EQ(s.chunks, chunks);
    std::set<const void*> bytes;
    for (std::size_t i = 0; i < chunks; ++i) {
      bytes.insert(&s.state(i));
      EXPECT_EQ(s.state(i).load(), sd::chunk_free);
    }
    EXPECT_EQ(bytes.size(), chunks) << chunks << " chunks: two chunks share a state byte";
  }
}

TEST(Slab, TheFirstSixteenCarvesNeverShareAStateLine) {
  for (std::size_t chunks : {16u, 128u, 129u, 256u, 512u, 1024u, 1638u, 8192u}) {
    const sd::slab s = make_slab(chunks);
    std::set<std::uintptr_t> lines;
    for (std::size_t k = 0; k < 16; ++k) lines.insert(line_of(s.state(k)));
    EXPECT_EQ(lines.size(), 16u) << chunks << " chunks";
  }
}

}  // namespace
