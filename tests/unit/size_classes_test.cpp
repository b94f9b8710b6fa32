// White-box: the size classes of small requests (src/core/support/size_classes.hpp). Every class is
// a multiple of the smallest block, classes grow strictly, a request's class is the smallest one
// that holds it, and rounding wastes less than a 256-byte step up to 1 KiB and less than a quarter
// above (the header's promise).
#include "core/support/size_classes.hpp"

#include <gtest/gtest.h>

#include <cstddef>

namespace sd = streampool::detail;

namespace {

constexpr std::size_t top = std::size_t{16} << 20;  // the last class

TEST(SizeClasses, ClassesAreMultiplesOfTheSmallestBlockAndGrowStrictly) {
  for (std::size_t c = 0; c < sd::max_classes; ++c) {
    EXPECT_EQ(sd::class_size(c) % sd::min_block, 0u) << "class " << c;
    if (c > 0) {
      EXPECT_GT(sd::class_size(c), sd::class_size(c - 1)) << "class " << c;
    }
  }
  EXPECT_EQ(sd::class_size(sd::max_classes - 1), top);
}

TEST(SizeClasses, EveryClassSizeMapsToItself) {
  for (std::size_t c = 0; c < sd::max_classes; ++c) {
    EXPECT_EQ(sd::class_of(sd::class_size(c)), c) << "class " << c;
    EXPECT_EQ(sd::class_of(sd::class_size(c) + 1), c + 1) << "one byte over class " << c;
  }
}

TEST(SizeClasses, ARequestGetsTheSmallestClassThatHoldsIt) {
  // Every size up to 64 KiB, then every class boundary and its neighbours up to the top.
  auto check = [](std::size_t n) {
    const std::size_t c = sd::class_of(n);
    ASSERT_LT(c, sd::max_classes) << n << " bytes";
    ASSERT_GE(sd::class_size(c), n) << n << " bytes";
    if (c > 0) {
      ASSERT_LT(sd::class_size(c - 1), n) << n << " bytes";
    }
  };
  for (std::size_t n = 1; n <= (std::size_t{64} << 10); ++n) check(n);
  for (std::size_t c = 1; c < sd::max_classes; ++c) {
    const std::size_t s = sd::class_size(c);
    check(s - 1);
    check(s);
    if (c + 1 < sd::max_classes) check(s + 1);
  }
}

TEST(SizeClasses, RoundingWastesLessThanAStepBelowOneKibAndAQuarterAbove) {
  // 256-byte steps up to 1 KiB; above, four classes per power of two.
  for (std::size_t n = 1; n <= 1024; ++n) {
    const std::size_t s = sd::class_size(sd::class_of(n));
    EXPECT_LT(s - n, sd::min_block) << n << " bytes round to " << s;
  }
  for (std::size_t n = 1025; n <= top; n += n / 97 + 1) {
    const std::size_t s = sd::class_size(sd::class_of(n));
    EXPECT_LT(s - n, n / 4) << n << " bytes round to " << s;
  }
}

TEST(SizeClasses, ZeroBytesIsTheSmallestClass) {
  EXPECT_EQ(sd::class_of(0), 0u);
  EXPECT_EQ(sd::class_size(0), sd::min_block);
}

}  // namespace
