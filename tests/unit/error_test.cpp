// Errors (include/streampool/error.hpp): messages name files from the source root, never by the
// build machine's absolute path, whether they come from the library's sources or from a public
// header's inline code compiled here; backend errors carry a kind.
#include "streampool/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "streampool/array.hpp"
#include "streampool/cuda.hpp"
#include "streampool/host.hpp"

namespace sp = streampool;

namespace {

/// The message of the logic_error that `call` throws ("" if none).
template <class Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const sp::logic_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no logic_error";
  return "";
}

/// The file of a message's trailing "(file:line)". Parsed by hand: std::regex trips g++ 12's
/// -Wmaybe-uninitialized under the sanitizer presets' -O1.
std::string file_of(const std::string& message) {
  const std::size_t open = message.rfind('(');
  const std::size_t colon = message.rfind(':');
  const bool digits_then_paren =
      colon != std::string::npos && colon + 2 < message.size() && message.back() == ')' &&
      std::all_of(message.begin() + static_cast<std::ptrdiff_t>(colon) + 1, message.end() - 1,
                  [](char c) { return c >= '0' && c <= '9'; });
  if (open == std::string::npos || !digits_then_paren || colon < open) {
    ADD_FAILURE() << "no (file:line) at the end of: " << message;
    return "";
  }
  return message.substr(open + 1, colon - open - 1);
}

/// The root of this checkout as the compiler named it, from this file's own __FILE__ ("" when the
/// build already made __FILE__ relative).
std::string source_root() {
  const std::string self = __FILE__;
  const std::string tail = "tests/unit/error_test.cpp";
  if (self.size() <= tail.size() || self.compare(self.size() - tail.size(), tail.size(), tail) != 0)
    return "";
  return self.substr(0, self.size() - tail.size());
}

void expect_from_source_root(const std::string& message, std::string_view expected_prefix) {
  const std::string file = file_of(message);
  EXPECT_EQ(file.rfind(expected_prefix, 0), 0u) << message;
  EXPECT_NE(file.front(), '/') << message;
  const std::string root = source_root();
  if (!root.empty() && root != "/") {
    EXPECT_EQ(message.find(root), std::string::npos) << message;
  }
}

TEST(ErrorPaths, LibrarySourcesAreNamedFromTheSourceRoot) {
  auto b = sp::make_host_backend();
  const std::string message = message_of([&] { (void)b->allocate(1); });
  expect_from_source_root(message, "src/core/stream/backend.cpp");
}

TEST(ErrorPaths, PublicHeadersAreNamedFromTheSourceRoot) {
  // The check is inline code of array.hpp, compiled in this translation unit.
  const sp::array<float> empty;
  const std::string message = message_of([&] { (void)empty.get_buffer(); });
  expect_from_source_root(message, "include/streampool/array.hpp");
}

TEST(ErrorPaths, TrimmingRules) {
  auto thrown_at = [](const char* file) {
    return file_of(message_of([&] { sp::detail::throw_logic_error(file, 7, "m"); }));
  };
  // The last src/ or include/streampool/ that starts a path component wins.
  EXPECT_EQ(thrown_at("/home/me/src/checkout/src/core/pool.cpp"), "src/core/pool.cpp");
  EXPECT_EQ(thrown_at("/opt/x/include/streampool/detail/buffer.hpp"),
            "include/streampool/detail/buffer.hpp");
  EXPECT_EQ(thrown_at("/home/me/src/checkout/include/streampool/array.hpp"),
            "include/streampool/array.hpp");
  EXPECT_EQ(thrown_at("src/core/pool.cpp"), "src/core/pool.cpp");  // already relative
  // Anything else (a user's file) is named by its last component.
  EXPECT_EQ(thrown_at("/home/me/app/main.cpp"), "main.cpp");
  EXPECT_EQ(thrown_at("/home/me/mysrc/main.cpp"), "main.cpp");
  EXPECT_EQ(thrown_at("main.cpp"), "main.cpp");
  EXPECT_EQ(
      message_of([] { sp::detail::throw_logic_error("/a/src/b.cpp", 12, "what went wrong"); }),
      "streampool: what went wrong (src/b.cpp:12)");
}

TEST(ErrorPathsDeathTest, AssertionsNameFilesFromTheSourceRoot) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(sp::detail::assert_fail("x > 0", "/build/machine/src/core/pool.cpp", 3),
               "internal assertion failed: x > 0 \\(src/core/pool.cpp:3\\)");
}

TEST(BackendErrors, CarryTheirKind) {
  const sp::backend_error missing(sp::backend_error_kind::unavailable, "m", "cuda", 3);
  EXPECT_EQ(missing.kind(), sp::backend_error_kind::unavailable);
  EXPECT_EQ(missing.backend(), "cuda");
  EXPECT_EQ(missing.native_code(), 3);
  EXPECT_STREQ(missing.what(), "m");
}

#if defined(STREAMPOOL_HAVE_CUDA_BACKEND)
TEST(BackendErrors, CudaSaysWhyItIsMissing) {
  // With a GPU: an ordinal past the last device. Without a driver: the driver is unavailable.
  const int count = sp::cuda_device_count();
  for (int ordinal : {-1, count}) {
    try {
      (void)sp::make_cuda_backend(ordinal);
      ADD_FAILURE() << "device " << ordinal << " exists";
    } catch (const sp::backend_error& e) {
      EXPECT_EQ(e.backend(), "cuda");
      if (sp::cuda_available()) {
        EXPECT_EQ(e.kind(), sp::backend_error_kind::no_device) << e.what();
      } else {
        // No driver (unavailable), or a driver that sees no device (no_device).
        EXPECT_NE(e.kind(), sp::backend_error_kind::runtime) << e.what();
      }
    }
  }
}
#endif

}  // namespace
