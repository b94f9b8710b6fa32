// The device-array conformance suite (see pool_conformance.hpp for the fixture contract).
// Every operation is checked against the same computation on the host.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "conformance/accessor.hpp"
#include "streampool/streampool.hpp"

namespace streampool::test {

/// Small integers, so that float sums and products are exact in any order.
template <class T>
std::vector<T> values(std::size_t n, std::uint64_t seed, int lo = -4, int hi = 4) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

template <class F>
class ArrayConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!F::available()) GTEST_SKIP() << F::name << ": backend not available here";
    dev_.emplace(F::make_device());
    stream_.emplace(*dev_);
    scope_.emplace(*stream_);
  }
  void TearDown() override {
    scope_.reset();
    stream_.reset();
    if (dev_) {
      EXPECT_EQ(F::violations(*dev_), std::vector<std::string>{}) << F::name;
    }
  }
  const device& dev() const { return *dev_; }

  std::optional<device> dev_;
  std::optional<stream> stream_;
  std::optional<stream_scope> scope_;
};

TYPED_TEST_SUITE_P(ArrayConformance);

template <class T, class F>
void upload_fill_copy(const device& d) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
    const auto h = values<T>(n, n);
    array<T> a(std::span<const T>(h), d);
    EXPECT_EQ(a.size(), n);
    EXPECT_EQ(a.download(), h);
    array<T> b(n, d);
    b.copy_from(a);
    EXPECT_EQ(b.download(), h);
    b.fill(T(7));
    EXPECT_EQ(b.download(), std::vector<T>(n, T(7)));
    EXPECT_EQ(a.download(), h) << "copy_from/fill of b must not touch a";
  }
}

TYPED_TEST_P(ArrayConformance, UploadDownloadFillCopy) {
  upload_fill_copy<float, TypeParam>(this->dev());
  upload_fill_copy<std::int64_t, TypeParam>(this->dev());
}

template <class T, class F>
void maps(const device& d) {
  const std::size_t n = 4099;
  const auto x = values<T>(n, 1);
  auto y = values<T>(n, 2, 1, 5);  // no zeros: divisor
  array<T> ax(std::span<const T>(x), d), ay(std::span<const T>(y), d), out(n, d);
  auto check = [&](auto expect_fn, const char* what) {
    const std::vector<T> got = out.download();
    for (std::size_t i = 0; i < n; ++i) {
      if (got[i] != static_cast<T>(expect_fn(i))) {
        ADD_FAILURE() << what << " at " << i << ": " << got[i] << " vs " << expect_fn(i);
        return;
      }
    }
  };
  map(out, ax, op::negate);
  check([&](std::size_t i) { return -x[i]; }, "negate");
  map(out, ax, op::abs);
  check([&](std::size_t i) { return x[i] < 0 ? -x[i] : x[i]; }, "abs");
  map(out, ax, op::square);
  check([&](std::size_t i) { return x[i] * x[i]; }, "square");
  map(out, ax, op::identity);
  check([&](std::size_t i) { return x[i]; }, "identity");
  map(out, ay, op::sqrt);
  check([&](std::size_t i) { return static_cast<T>(std::sqrt(static_cast<double>(y[i]))); },
        "sqrt");
  map(out, ax, op::add, T(3));
  check([&](std::size_t i) { return x[i] + T(3); }, "add scalar");
  map(out, ax, op::mul, T(-2));
  check([&](std::size_t i) { return x[i] * T(-2); }, "mul scalar");
  map(out, ax, op::max, T(0));
  check([&](std::size_t i) { return std::max(x[i], T(0)); }, "max scalar");
  map(out, ax, ay, op::add);
  check([&](std::size_t i) { return x[i] + y[i]; }, "add");
  map(out, ax, ay, op::sub);
  check([&](std::size_t i) { return x[i] - y[i]; }, "sub");
  map(out, ax, ay, op::mul);
  check([&](std::size_t i) { return x[i] * y[i]; }, "mul");
  map(out, ax, ay, op::min);
  check([&](std::size_t i) { return std::min(x[i], y[i]); }, "min");
  axpy(out, T(3), ax, ay);
  check([&](std::size_t i) { return T(3) * x[i] + y[i]; }, "axpy");
  // In place.
  map(ax, ax, op::add, T(1));
  EXPECT_EQ(ax.download()[0], x[0] + T(1));
  EXPECT_THROW(map(out, ax, op::negate, T(1)), logic_error);  // negate takes no scalar
  EXPECT_THROW(map(out, ax, ay, op::sqrt), logic_error);
  array<T> shorter(n - 1, d);
  EXPECT_THROW(map(shorter, ax, op::negate), logic_error);
}

TYPED_TEST_P(ArrayConformance, Map) {
  maps<float, TypeParam>(this->dev());
  maps<std::int64_t, TypeParam>(this->dev());
}

template <class T, class F>
void reductions(const device& d) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
    const auto h = values<T>(n, 3 + n);
    array<T> a(std::span<const T>(h), d);
    EXPECT_EQ(reduce(a, op::add), std::accumulate(h.begin(), h.end(), T(0))) << n;
    EXPECT_EQ(reduce(a, op::min), *std::min_element(h.begin(), h.end())) << n;
    EXPECT_EQ(reduce(a, op::max), *std::max_element(h.begin(), h.end())) << n;
  }
  const std::vector<T> small{T(1), T(2), T(-3), T(2), T(1), T(-1)};
  array<T> s(std::span<const T>(small), d);
  EXPECT_EQ(reduce(s, op::mul), T(12));
  array<T> empty(0, d);
  EXPECT_EQ(reduce(empty, op::add), T(0));
  EXPECT_THROW((void)reduce(s, op::negate), logic_error);
}

TYPED_TEST_P(ArrayConformance, Reduce) {
  reductions<float, TypeParam>(this->dev());
  reductions<std::int64_t, TypeParam>(this->dev());
}

template <class T, class F>
void scans(const device& d) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
    const auto h = values<T>(n, 5 + n, 0, 3);
    array<T> a(std::span<const T>(h), d), out(n, d);
    std::vector<T> expect(n);
    inclusive_scan(out, a);
    std::inclusive_scan(h.begin(), h.end(), expect.begin());
    EXPECT_EQ(out.download(), expect) << "inclusive " << n;
    exclusive_scan(out, a, T(10));
    std::exclusive_scan(h.begin(), h.end(), expect.begin(), T(10));
    EXPECT_EQ(out.download(), expect) << "exclusive " << n;
    inclusive_scan(out, a, op::max);
    std::inclusive_scan(h.begin(), h.end(), expect.begin(),
                        [](T x, T y) { return std::max(x, y); });
    EXPECT_EQ(out.download(), expect) << "inclusive max " << n;
    inclusive_scan(a, a);  // in place
    std::inclusive_scan(h.begin(), h.end(), expect.begin());
    EXPECT_EQ(a.download(), expect) << "in place " << n;
  }
}

TYPED_TEST_P(ArrayConformance, Scans) {
  scans<float, TypeParam>(this->dev());
  scans<std::int64_t, TypeParam>(this->dev());
}

TYPED_TEST_P(ArrayConformance, ViewsAliasAndKeepMemoryAlive) {
  pool p(this->dev());
  std::optional<array<float>> parent(std::in_place, 1000, p);
  parent->fill(1.f);
  const std::size_t block = p.statistics().live_bytes;
  EXPECT_GE(block, 1000 * sizeof(float));
  array<float> v = parent->view(100, 50);
  EXPECT_EQ(v.size(), 50u);
  EXPECT_EQ(v.data(), parent->data() + 100);
  EXPECT_EQ(parent->use_count(), 2);
  v.fill(5.f);                                        // write through the view ...
  const std::vector<float> all = parent->download();  // ... read through the parent
  for (std::size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(all[i], (i >= 100 && i < 150) ? 5.f : 1.f) << i;
  array<float> vv = v.view(10, 5);  // a view of a view
  EXPECT_EQ(vv.data(), parent->data() + 110);
  parent->view(110, 5).fill(9.f);
  EXPECT_EQ(vv.download(), std::vector<float>(5, 9.f));
  // Out of bounds.
  EXPECT_THROW((void)parent->view(990, 11), logic_error);
  EXPECT_THROW((void)parent->view(1001, 0), logic_error);
  EXPECT_THROW((void)v.view(40, 11), logic_error);
  EXPECT_THROW((void)v.view(std::size_t{1} << 62, std::size_t{1} << 62), logic_error);
  EXPECT_NO_THROW((void)parent->view(1000, 0));
  // The memory goes only when the last view dies.
  parent.reset();
  EXPECT_EQ(p.statistics().live_bytes, block);
  EXPECT_EQ(v.download()[10], 9.f);
  { array<float> gone = std::move(v); }
  EXPECT_EQ(p.statistics().live_bytes, block);
  EXPECT_EQ(vv.download(), std::vector<float>(5, 9.f));
  { array<float> gone = std::move(vv); }
  EXPECT_EQ(p.statistics().live_bytes, 0u);
}

TYPED_TEST_P(ArrayConformance, WrapForeignMemoryIsNotFreed) {
  pool owner(this->dev());
  const stream_ref s = current_stream(this->dev());
  constexpr std::size_t n = 5000;
  void* raw = owner.allocate(s, n * sizeof(std::int64_t));
  const pool_statistics before = owner.statistics();
  {
    auto w = array<std::int64_t>::wrap(static_cast<std::int64_t*>(raw), n, this->dev());
    EXPECT_EQ(w.data(), raw);
    EXPECT_FALSE(w.get_buffer().owned());
    w.fill(42);
    const auto h = values<std::int64_t>(n, 9);
    array<std::int64_t> src(std::span<const std::int64_t>(h), this->dev());
    w.view(0, n / 2).copy_from(src.view(0, n / 2));
    const auto got = w.download();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], i < n / 2 ? h[i] : 42) << i;
    auto wv = w.view(n / 2, 10);
    EXPECT_EQ(reduce(wv, op::add), 420);
  }
  // Wrapped arrays are gone; the memory is still the owner's, untouched by streampool.
  EXPECT_TRUE(owner.owns(raw));
  const pool_statistics after = owner.statistics();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.deallocations, before.deallocations);
  EXPECT_EQ(read_bytes(s, static_cast<char*>(raw) + (n - 1) * 8, 1)[0], 42);
  owner.deallocate(s, raw);  // would throw "double free" had streampool freed it
  EXPECT_EQ(owner.statistics().live_bytes, 0u);
  EXPECT_THROW((void)array<float>::wrap(nullptr, 10, this->dev()), logic_error);
}

TYPED_TEST_P(ArrayConformance, BadInput) {
  const std::size_t too_many = std::numeric_limits<std::size_t>::max() / 2;
  try {
    array<float> a(too_many, this->dev());
    ADD_FAILURE() << "an array of " << too_many << " floats was created";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(too_many)), std::string::npos) << e.what();
  }
  array<float> a(10, this->dev());
  std::vector<float> wrong(11);
  EXPECT_THROW(a.upload(wrong), logic_error);
  EXPECT_THROW(a.download(wrong), logic_error);
  array<float> b(11, this->dev());
  EXPECT_THROW(a.copy_from(b), logic_error);
  // Another device's array.
  device d2 = TypeParam::make_device();
  stream s2(d2);
  std::optional<stream_scope> in_d2(std::in_place, s2);
  array<float> other(10, d2);
  in_d2.reset();
  EXPECT_THROW(a.copy_from(other), logic_error);
  // Everything still works.
  a.fill(2.f);
  EXPECT_EQ(reduce(a, op::add), 20.f);
  EXPECT_EQ(TypeParam::violations(d2), std::vector<std::string>{});
}

REGISTER_TYPED_TEST_SUITE_P(ArrayConformance, UploadDownloadFillCopy, Map, Reduce, Scans,
                            ViewsAliasAndKeepMemoryAlive, WrapForeignMemoryIsNotFreed, BadInput);

}  // namespace streampool::test
