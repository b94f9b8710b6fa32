// The launch plan over kernels.cl (src/backend/opencl_c/kernel_plan.hpp): pass counts, argument
// lists, scratch sizes, and the plans' results when each launch is emulated on the host exactly
// as kernels.cl's header comment specifies a work group.
#include "backend/opencl_c/kernel_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "streampool/streampool.hpp"

#if defined(STREAMPOOL_HAVE_OPENCL_BACKEND) || defined(STREAMPOOL_HAVE_LEVEL_ZERO_BACKEND)

namespace streampool::detail {
namespace {

kernel_command make(kernel_kind kind, op fn, std::size_t n, const void* in0, void* out,
                    std::int64_t a = 0) {
  kernel_command k{};
  k.kind = kind;
  k.fn = fn;
  k.type = dtype::i64;
  k.in0 = in0;
  k.out = out;
  k.n = n;
  k.a.i64 = a;
  return k;
}

// ---- a host emulator of kernels.cl, i64 only, by the per-group semantics of its header --------

std::int64_t fold(std::uint32_t fn, std::int64_t x, std::int64_t y) {
  switch (static_cast<op>(fn)) {
    case op::add:
      return static_cast<std::int64_t>(static_cast<std::uint64_t>(x) +
                                       static_cast<std::uint64_t>(y));
    case op::mul:
      return static_cast<std::int64_t>(static_cast<std::uint64_t>(x) *
                                       static_cast<std::uint64_t>(y));
    case op::min:
      return y < x ? y : x;
    case op::max:
      return x < y ? y : x;
    default:
      ADD_FAILURE() << "fold op " << fn;
      return 0;
  }
}
std::int64_t id(std::uint32_t fn) {
  switch (static_cast<op>(fn)) {
    case op::mul:
      return 1;
    case op::min:
      return std::numeric_limits<std::int64_t>::max();
    case op::max:
      return std::numeric_limits<std::int64_t>::min();
    default:
      return 0;
  }
}

// Arguments as the kernels see them.
std::int64_t* p64(const kernel_arg& a) {
  EXPECT_EQ(a.what, kernel_arg::kind::pointer);
  return static_cast<std::int64_t*>(const_cast<void*>(a.pointer));
}
std::uint64_t val(const kernel_arg& a) {
  EXPECT_EQ(a.what, kernel_arg::kind::scalar);
  return a.bits;
}

void run_group(const kernel_launch& k, std::size_t g) {
  const std::size_t L = k.group_size;
  const std::size_t G = k.groups;
  const auto& a = k.args;
  switch (k.entry) {
    case kernel_entry::reduce: {
      ASSERT_EQ(k.arg_count, 5u);
      std::int64_t* out = p64(a[0]);
      const std::int64_t* in = p64(a[1]);
      const std::uint64_t n = val(a[2]);
      const auto fn = static_cast<std::uint32_t>(val(a[3]));
      ASSERT_EQ(a[4].what, kernel_arg::kind::local);
      ASSERT_EQ(a[4].size, L * sizeof(std::int64_t));
      std::vector<std::int64_t> acc(L, id(fn));
      for (std::size_t l = 0; l < L; ++l)
        for (std::uint64_t i = g * L + l; i < n; i += G * L) acc[l] = fold(fn, acc[l], in[i]);
      for (std::size_t s = L / 2; s > 0; s /= 2)
        for (std::size_t l = 0; l < s; ++l) acc[l] = fold(fn, acc[l], acc[l + s]);
      out[g] = acc[0];
      return;
    }
    case kernel_entry::scan_tiles: {
      ASSERT_EQ(k.arg_count, 8u);
      std::int64_t* out = p64(a[0]);
      const std::int64_t* in = p64(a[1]);
      std::int64_t* totals = p64(a[2]);
      const std::uint64_t n = val(a[3]);
      const auto fn = static_cast<std::uint32_t>(val(a[4]));
      const bool exclusive = val(a[5]) != 0;
      const auto init = static_cast<std::int64_t>(val(a[6]));
      ASSERT_EQ(a[7].size, L * sizeof(std::int64_t));
      std::vector<std::int64_t> v(L);
      for (std::size_t l = 0; l < L; ++l) v[l] = g * L + l < n ? in[g * L + l] : id(fn);
      for (std::size_t d = 1; d < L; d *= 2) {
        std::vector<std::int64_t> w = v;
        for (std::size_t l = d; l < L; ++l) w[l] = fold(fn, v[l - d], v[l]);
        v = w;
      }
      for (std::size_t l = 0; l < L; ++l) {
        const std::uint64_t i = g * L + l;
        if (i < n) out[i] = exclusive ? (l == 0 ? init : fold(fn, init, v[l - 1])) : v[l];
      }
      if (G > 1) totals[g] = v[L - 1];
      return;
    }
    case kernel_entry::scan_add: {
      ASSERT_EQ(k.arg_count, 4u);
      std::int64_t* data = p64(a[0]);
      const std::int64_t* offsets = p64(a[1]);
      const std::uint64_t n = val(a[2]);
      const auto fn = static_cast<std::uint32_t>(val(a[3]));
      for (std::size_t l = 0; l < L; ++l)
        if (g * L + l < n) data[g * L + l] = fold(fn, offsets[g], data[g * L + l]);
      return;
    }
    default:
      FAIL() << "not emulated: " << k.name();
  }
}

void run_plan(const kernel_plan& p) {
  // In order, and within a launch in reverse group order: kernels.cl promises nothing about the
  // order of groups, so a plan must not depend on it.
  for (const kernel_launch& k : p.launches)
    for (std::size_t g = k.groups; g-- > 0;) run_group(k, g);
}

std::vector<std::int64_t> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = static_cast<std::int64_t>(rng() % 2001) - 1000;
  return v;
}

// ---- tests ------------------------------------------------------------------------------------

TEST(KernelPlan, NamesFollowKindAndDtype) {
  EXPECT_STREQ(kernel_name(kernel_entry::map_unary, dtype::f32), "sp_map_unary_f32");
  EXPECT_STREQ(kernel_name(kernel_entry::scan_tiles, dtype::u64), "sp_scan_tiles_u64");
  EXPECT_STREQ(kernel_name(kernel_entry::scan_add, dtype::f64), "sp_scan_add_f64");
  EXPECT_STREQ(kernel_name(kernel_entry::reduce, static_cast<dtype>(9)), "unknown");
}

TEST(KernelPlan, MapIsOneGridStrideLaunchWithTheDocumentedArguments) {
  std::vector<float> x(1000);
  kernel_command k{};
  k.kind = kernel_kind::map_unary;
  k.fn = op::mul;
  k.type = dtype::f32;
  k.in0 = x.data();
  k.out = x.data();
  k.n = x.size();
  k.a.f32 = 2.5F;
  k.has_scalar = true;
  const kernel_plan p = make_kernel_plan(k, {64, 4}, nullptr, 0);
  ASSERT_EQ(p.launches.size(), 1u);
  const kernel_launch& l = p.launches[0];
  EXPECT_STREQ(l.name(), "sp_map_unary_f32");
  EXPECT_EQ(l.groups, 4u) << "capped at max_groups";
  EXPECT_EQ(l.group_size, 64u);
  ASSERT_EQ(l.arg_count, 6u);
  EXPECT_EQ(l.args[0].pointer, x.data());
  EXPECT_EQ(l.args[1].pointer, x.data());
  EXPECT_EQ(l.args[2].bits, 1000u);
  EXPECT_EQ(l.args[2].size, 8u);
  EXPECT_EQ(l.args[3].bits, static_cast<std::uint64_t>(op::mul));
  EXPECT_EQ(l.args[3].size, 4u);
  EXPECT_EQ(l.args[4].bits, 1u);
  EXPECT_EQ(l.args[5].size, 4u);
  float a = 0;
  std::memcpy(&a, l.args[5].value_ptr(), sizeof a);
  EXPECT_EQ(a, 2.5F);

  k.n = 100;  // fewer groups than the cap
  EXPECT_EQ(make_kernel_plan(k, {64, 4}, nullptr, 0).launches[0].groups, 2u);
  k.n = 0;
  EXPECT_TRUE(make_kernel_plan(k, {64, 4}, nullptr, 0).launches.empty());

  k.kind = kernel_kind::map_binary;
  k.fn = op::axpy;
  k.in1 = x.data() + 1;
  k.n = 10;
  const kernel_plan b = make_kernel_plan(k, {64, 4}, nullptr, 0);
  ASSERT_EQ(b.launches.size(), 1u);
  EXPECT_STREQ(b.launches[0].name(), "sp_map_binary_f32");
  ASSERT_EQ(b.launches[0].arg_count, 6u);
  EXPECT_EQ(b.launches[0].args[2].pointer, x.data() + 1);
  EXPECT_EQ(b.launches[0].args[4].bits, static_cast<std::uint64_t>(op::axpy));
}

TEST(KernelPlan, ReduceIsOneOrTwoPasses) {
  std::vector<std::int64_t> in(10000);
  std::int64_t out = 0;
  const kernel_shape shape{64, 4096};
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{64}}) {
    const kernel_command k = make(kernel_kind::reduce, op::add, n, in.data(), &out);
    EXPECT_EQ(kernel_scratch_bytes(k, shape), 0u) << n;
    const kernel_plan p = make_kernel_plan(k, shape, nullptr, 0);
    ASSERT_EQ(p.launches.size(), 1u) << n << ": n == 0 still writes the identity";
    EXPECT_EQ(p.launches[0].groups, 1u);
    EXPECT_EQ(p.launches[0].args[0].pointer, &out);
  }
  // 65 elements: two groups; 10000: capped at L = 64 groups of partials.
  for (std::size_t n : {std::size_t{65}, std::size_t{10000}}) {
    const kernel_command k = make(kernel_kind::reduce, op::add, n, in.data(), &out);
    const std::size_t groups = std::min<std::size_t>((n + 63) / 64, 64);
    const std::size_t need = kernel_scratch_bytes(k, shape);
    EXPECT_GE(need, groups * sizeof(std::int64_t));
    std::vector<std::byte> scratch(need);
    const kernel_plan p = make_kernel_plan(k, shape, scratch.data(), need);
    ASSERT_EQ(p.launches.size(), 2u);
    EXPECT_EQ(p.launches[0].groups, groups);
    EXPECT_EQ(p.launches[0].args[0].pointer, scratch.data());
    EXPECT_EQ(p.launches[1].groups, 1u);
    EXPECT_EQ(p.launches[1].args[1].pointer, scratch.data());
    EXPECT_EQ(p.launches[1].args[2].bits, groups);
    EXPECT_EQ(p.launches[1].args[0].pointer, &out);
  }
}

TEST(KernelPlan, ScanPassesGrowWithTheLevels) {
  std::vector<std::int64_t> in(5000);
  std::vector<std::int64_t> out(5000);
  const kernel_shape shape{16, 4096};
  struct expected {
    std::size_t n, launches;
  };
  // levels: 16 -> 1; 17 -> 2 (17, 2); 256 -> 2 (256, 16); 257 -> 3 (257, 17, 2); 5000 -> 4.
  for (const expected e : {expected{0, 0}, expected{1, 1}, expected{16, 1}, expected{17, 3},
                           expected{256, 3}, expected{257, 5}, expected{5000, 7}}) {
    const kernel_command k = make(kernel_kind::inclusive_scan, op::add, e.n, in.data(), out.data());
    const std::size_t need = kernel_scratch_bytes(k, shape);
    std::vector<std::byte> scratch(need);
    const kernel_plan p = make_kernel_plan(k, shape, need ? scratch.data() : nullptr, need);
    EXPECT_EQ(p.launches.size(), e.launches) << "n=" << e.n;
    // Every pointer the plan hands out is an operand or lies inside the scratch.
    for (const kernel_launch& l : p.launches) {
      for (std::size_t i = 0; i < l.arg_count; ++i) {
        if (l.args[i].what != kernel_arg::kind::pointer) continue;
        const auto* q = static_cast<const std::byte*>(l.args[i].pointer);
        const bool operand = q == reinterpret_cast<const std::byte*>(in.data()) ||
                             q == reinterpret_cast<const std::byte*>(out.data());
        EXPECT_TRUE(operand || (q >= scratch.data() && q < scratch.data() + need))
            << l.name() << " argument " << i << " n=" << e.n;
      }
    }
  }
}

TEST(KernelPlan, TooLittleScratchOrABadShapeIsRefused) {
  std::vector<std::int64_t> in(1000);
  std::int64_t out = 0;
  const kernel_command k = make(kernel_kind::reduce, op::add, in.size(), in.data(), &out);
  const std::size_t need = kernel_scratch_bytes(k, {16, 8});
  std::vector<std::byte> scratch(need);
  EXPECT_THROW((void)make_kernel_plan(k, {16, 8}, scratch.data(), need - 1), logic_error);
  EXPECT_THROW((void)make_kernel_plan(k, {16, 8}, nullptr, need), logic_error);
  EXPECT_THROW((void)kernel_scratch_bytes(k, {24, 8}), logic_error);
  EXPECT_THROW((void)kernel_scratch_bytes(k, {1, 8}), logic_error);
  EXPECT_THROW((void)kernel_scratch_bytes(k, {16, 0}), logic_error);
}

// The plans compute reduce and both scans (every fold, several levels, in place too) exactly
// when their launches run as kernels.cl specifies.
TEST(KernelPlan, EmulatedPlansMatchTheReference) {
  for (const std::size_t L : {std::size_t{2}, std::size_t{4}, std::size_t{32}}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{31},
                                std::size_t{32}, std::size_t{33}, std::size_t{1000}}) {
      for (const op fn : {op::add, op::mul, op::min, op::max}) {
        const auto f = static_cast<std::uint32_t>(fn);
        const std::vector<std::int64_t> in = random_values(n, n * 31 + L);
        const kernel_shape shape{L, 3};
        SCOPED_TRACE(testing::Message() << "L=" << L << " n=" << n << " op=" << op_name(fn));
        {
          std::int64_t out = -7;
          const kernel_command k = make(kernel_kind::reduce, fn, n, in.data(), &out);
          std::vector<std::byte> scratch(kernel_scratch_bytes(k, shape));
          run_plan(make_kernel_plan(k, shape, scratch.data(), scratch.size()));
          std::int64_t want = id(f);
          for (std::int64_t x : in) want = fold(f, want, x);
          EXPECT_EQ(out, want) << "reduce";
        }
        for (const bool exclusive : {false, true}) {
          for (const bool in_place : {false, true}) {
            std::vector<std::int64_t> data = in;
            std::vector<std::int64_t> out(n, -7);
            std::int64_t* dst = in_place ? data.data() : out.data();
            const kernel_command k =
                make(exclusive ? kernel_kind::exclusive_scan : kernel_kind::inclusive_scan, fn, n,
                     data.data(), dst, /*a=*/5);
            std::vector<std::byte> scratch(kernel_scratch_bytes(k, shape));
            run_plan(make_kernel_plan(k, shape, scratch.data(), scratch.size()));
            std::int64_t acc = exclusive ? 5 : id(f);
            for (std::size_t i = 0; i < n; ++i) {
              const std::int64_t before = acc;
              acc = fold(f, acc, in[i]);
              ASSERT_EQ(dst[i], exclusive ? before : acc)
                  << (exclusive ? "exclusive" : "inclusive") << (in_place ? " in place" : "")
                  << " at " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace streampool::detail

#else

TEST(KernelPlan, NotBuilt) { GTEST_SKIP() << "no backend that runs OpenCL C in this build"; }

#endif
