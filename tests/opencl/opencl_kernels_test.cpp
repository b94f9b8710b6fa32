// Every kernel of kernels.cl on the OpenCL backend against the host backend, the reference
// semantics: each kind, dtype and valid op, in place and not, at sizes around the group size and
// large enough for multi-level scans. Inputs keep the host backend free of undefined behaviour
// (no signed overflow, no minimum / -1) and make floating-point folds exact in any order (small
// integers, +-1 for products), so every result must match bit for bit (NaNs as NaNs).
// Skips where no OpenCL device exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "streampool/host.hpp"
#include "streampool/opencl.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

template <class T>
constexpr sp::dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return sp::dtype::f32;
  if constexpr (std::is_same_v<T, double>) return sp::dtype::f64;
  if constexpr (std::is_same_v<T, std::int32_t>) return sp::dtype::i32;
  if constexpr (std::is_same_v<T, std::int64_t>) return sp::dtype::i64;
  if constexpr (std::is_same_v<T, std::uint32_t>) return sp::dtype::u32;
  if constexpr (std::is_same_v<T, std::uint64_t>) return sp::dtype::u64;
}

template <class T>
sp::scalar scalar_of(T v) {
  sp::scalar s{};
  std::memcpy(&s, &v, sizeof v);
  return s;
}

/// One backend with one queue, running a kernel on host vectors.
class runner {
 public:
  explicit runner(std::shared_ptr<sp::backend> b) : b_(std::move(b)), q_(b_->create_queue()) {}
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;
  ~runner() {
    sp::native_marker m = b_->record(q_);
    b_->wait_host(m);
    b_->release_marker(m);
    b_->destroy_queue(q_);
  }

  /// Runs `k` with in0 (and in1) uploaded; returns `out_count` elements of the output. In place:
  /// out is in0's memory.
  template <class T>
  std::vector<T> run(sp::kernel_command k, const std::vector<T>& in0, const std::vector<T>* in1,
                     std::size_t out_count, bool in_place) {
    void* d0 = upload(in0);
    void* d1 = in1 != nullptr ? upload(*in1) : nullptr;
    void* dout = in_place ? d0 : alloc(out_count * sizeof(T));
    k.in0 = d0;
    k.in1 = d1;
    k.out = dout;
    b_->submit(q_, sp::command::make(k));
    std::vector<T> out(out_count);
    if (out_count != 0) {
      b_->submit(q_, sp::command::make(
                         sp::copy_command{out.data(), dout, out_count * sizeof(T), false, true}));
    }
    sp::native_marker m = b_->record(q_);
    b_->wait_host(m);
    b_->release_marker(m);
    for (auto& [p, bytes] : held_) b_->deallocate(p, bytes);
    held_.clear();
    return out;
  }

 private:
  void* alloc(std::size_t bytes) {
    const std::size_t g = b_->caps().granularity;
    const std::size_t rounded = std::max<std::size_t>(1, (bytes + g - 1) / g) * g;
    void* p = b_->allocate(rounded);
    EXPECT_NE(p, nullptr);
    held_.emplace_back(p, rounded);
    return p;
  }
  template <class T>
  void* upload(const std::vector<T>& h) {
    void* p = alloc(h.size() * sizeof(T));
    if (!h.empty()) {
      b_->submit(
          q_, sp::command::make(sp::copy_command{p, h.data(), h.size() * sizeof(T), true, false}));
    }
    return p;
  }

  std::shared_ptr<sp::backend> b_;
  sp::native_queue q_;
  std::vector<std::pair<void*, std::size_t>> held_;
};

template <class T>
bool same(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) && std::isnan(y)) return true;
    return std::memcmp(&x, &y, sizeof x) == 0;
  } else {
    return x == y;
  }
}

/// Values for `fn`: keep the host free of undefined behaviour and floating-point folds exact.
template <class T>
std::vector<T> values(std::size_t n, sp::kernel_kind kind, sp::op fn, std::mt19937_64& rng) {
  std::vector<T> v(n);
  const bool fold = kind == sp::kernel_kind::reduce || kind == sp::kernel_kind::inclusive_scan ||
                    kind == sp::kernel_kind::exclusive_scan;
  for (auto& x : v) {
    const std::uint64_t r = rng();
    if (fold && fn == sp::op::mul) {
      x = (r & 1) != 0 ? T(1) : std::is_signed_v<T> ? T(-1) : T(1);
      if constexpr (std::is_unsigned_v<T>) x = static_cast<T>(r);  // unsigned products wrap
    } else if constexpr (std::is_floating_point_v<T>) {
      x = fold
              ? static_cast<T>(static_cast<int>(r % 17) - 8)
              : static_cast<T>(
                    static_cast<double>(static_cast<std::int64_t>(r % 2000001) - 1000000) / 1024.0);
    } else if constexpr (std::is_signed_v<T>) {
      // |x| < 2^15 (i32) or 2^31 (i64): squares, products with a small scalar and sums of up to
      // 70000 of them stay in range.
      constexpr std::uint64_t span = std::uint64_t{1} << (sizeof(T) == 4 ? 15 : 31);
      x = static_cast<T>(static_cast<std::int64_t>(r % (2 * span - 1)) -
                         static_cast<std::int64_t>(span - 1));
      if (fold) x = static_cast<T>(x / 64);
    } else {
      x = static_cast<T>(r);
    }
  }
  if (n > 3 && fn == sp::op::div) v[1] = T(0);  // division by zero is part of the semantics
  return v;
}

template <class T>
void check_dtype(runner& ocl, runner& host) {
  constexpr sp::dtype type = dtype_of<T>();
  std::mt19937_64 rng(static_cast<std::uint64_t>(type) + 1);
  const sp::op unary[] = {sp::op::identity, sp::op::negate, sp::op::abs, sp::op::sqrt,
                          sp::op::square};
  const sp::op binary[] = {sp::op::add, sp::op::sub, sp::op::mul,
                           sp::op::div, sp::op::min, sp::op::max};
  const sp::op folds[] = {sp::op::add, sp::op::mul, sp::op::min, sp::op::max};
  struct variant {
    sp::kernel_kind kind;
    sp::op fn;
    bool has_scalar;
  };
  std::vector<variant> variants;
  for (sp::op fn : unary) variants.push_back({sp::kernel_kind::map_unary, fn, false});
  for (sp::op fn : binary) variants.push_back({sp::kernel_kind::map_unary, fn, true});
  for (sp::op fn : binary) variants.push_back({sp::kernel_kind::map_binary, fn, false});
  variants.push_back({sp::kernel_kind::map_binary, sp::op::axpy, false});
  for (sp::op fn : folds) {
    variants.push_back({sp::kernel_kind::reduce, fn, false});
    variants.push_back({sp::kernel_kind::inclusive_scan, fn, false});
    variants.push_back({sp::kernel_kind::exclusive_scan, fn, false});
  }
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{255}, std::size_t{256},
                              std::size_t{257}, std::size_t{5000}, std::size_t{70001}}) {
    for (const variant& v : variants) {
      for (const bool in_place : {false, true}) {
        if (in_place && v.kind == sp::kernel_kind::reduce) continue;
        const std::vector<T> in0 = values<T>(n, v.kind, v.fn, rng);
        const std::vector<T> in1 = values<T>(n, v.kind, v.fn, rng);
        sp::kernel_command k{};
        k.kind = v.kind;
        k.fn = v.fn;
        k.type = type;
        k.n = n;
        k.has_scalar = v.has_scalar;
        const T a = v.kind == sp::kernel_kind::exclusive_scan ? T(3)
                    : v.fn == sp::op::div                     ? T(7)
                                                              : T(2);
        k.a = scalar_of(a);
        const bool binary_kernel = v.kind == sp::kernel_kind::map_binary;
        const std::size_t out_count = v.kind == sp::kernel_kind::reduce ? 1 : n;
        const std::vector<T> got =
            ocl.run<T>(k, in0, binary_kernel ? &in1 : nullptr, out_count, in_place);
        const std::vector<T> want =
            host.run<T>(k, in0, binary_kernel ? &in1 : nullptr, out_count, in_place);
        ASSERT_EQ(got.size(), want.size());
        std::size_t wrong = 0;
        std::size_t first = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!same(got[i], want[i]) && wrong++ == 0) first = i;
        }
        EXPECT_EQ(wrong, 0u) << sp::kind_name(v.kind) << " " << sp::op_name(v.fn)
                             << (v.has_scalar ? " with scalar" : "") << " " << sp::dtype_name(type)
                             << " n=" << n << (in_place ? " in place" : "") << ": first at "
                             << first << " got " << +got[first] << " want " << +want[first];
      }
    }
  }
}

class OpenclKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!sp::opencl_available()) GTEST_SKIP() << "no OpenCL device";
    ocl_ = std::make_unique<runner>(sp::make_opencl_backend(0));
    host_ = std::make_unique<runner>(sp::make_host_backend());
  }
  std::unique_ptr<runner> ocl_, host_;
};

TEST_F(OpenclKernels, F32) { check_dtype<float>(*ocl_, *host_); }
TEST_F(OpenclKernels, F64) {
  // A device without cl_khr_fp64 refuses f64 kernels with an error naming the extension (PoCL
  // has it, so on CI the whole set runs).
  sp::kernel_command k{};
  k.kind = sp::kernel_kind::map_unary;
  k.fn = sp::op::identity;
  k.type = sp::dtype::f64;
  k.n = 1;
  try {
    (void)ocl_->run<double>(k, std::vector<double>{1.0}, nullptr, 1, false);
  } catch (const sp::backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("cl_khr_fp64"), std::string::npos) << e.what();
    return;
  }
  check_dtype<double>(*ocl_, *host_);
}
TEST_F(OpenclKernels, I32) { check_dtype<std::int32_t>(*ocl_, *host_); }
TEST_F(OpenclKernels, I64) { check_dtype<std::int64_t>(*ocl_, *host_); }
TEST_F(OpenclKernels, U32) { check_dtype<std::uint32_t>(*ocl_, *host_); }
TEST_F(OpenclKernels, U64) { check_dtype<std::uint64_t>(*ocl_, *host_); }

}  // namespace
