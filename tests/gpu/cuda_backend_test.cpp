// The CUDA backend against the backend contract (backend.hpp), called directly: no pool, no
// streams. Skips when no CUDA driver or device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "streampool/backend.hpp"
#include "streampool/cuda.hpp"

namespace sp = streampool;

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<std::size_t>(8, n - i));
  }
  return v;
}

class CudaBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!sp::cuda_available()) GTEST_SKIP() << "no CUDA driver or device";
    b_ = sp::make_cuda_backend(0);
    q_ = b_->create_queue();
  }
  void TearDown() override {
    if (!b_) return;
    sync(q_);
    for (auto& [p, bytes] : allocations_) b_->deallocate(p, bytes);
    b_->destroy_queue(q_);
  }

  /// Device memory of at least `bytes`, freed at TearDown.
  void* alloc(std::size_t bytes) {
    const std::size_t g = b_->caps().granularity;
    const std::size_t rounded = (bytes + g - 1) / g * g;
    void* p = b_->allocate(rounded);
    EXPECT_NE(p, nullptr);
    allocations_.emplace_back(p, rounded);
    return p;
  }
  void sync(sp::native_queue q) {
    sp::native_marker m = b_->record(q);
    b_->wait_host(m);
    EXPECT_TRUE(b_->query(m));
    b_->release_marker(m);
  }
  void upload(sp::native_queue q, void* dst, const void* src, std::size_t bytes) {
    b_->submit(q, sp::command::make(sp::copy_command{dst, src, bytes, true, false}));
  }
  void download(sp::native_queue q, void* dst, const void* src, std::size_t bytes) {
    b_->submit(q, sp::command::make(sp::copy_command{dst, src, bytes, false, true}));
  }
  template <class T>
  std::vector<T> read(const void* d, std::size_t n) {
    std::vector<T> h(n);
    download(q_, h.data(), d, n * sizeof(T));
    sync(q_);
    return h;
  }
  template <class T>
  void* to_device(const std::vector<T>& h) {
    void* d = alloc(std::max<std::size_t>(h.size() * sizeof(T), 1));
    upload(q_, d, h.data(), h.size() * sizeof(T));
    return d;
  }
  void fill(void* dst, std::uint64_t pattern, std::size_t element_size, std::size_t count) {
    b_->submit(q_, sp::command::make(sp::fill_command{dst, pattern, element_size, count}));
  }

  std::shared_ptr<sp::backend> b_;
  sp::native_queue q_ = nullptr;
  std::vector<std::pair<void*, std::size_t>> allocations_;
};

TEST_F(CudaBackend, Capabilities) {
  EXPECT_EQ(b_->name(), "cuda");
  EXPECT_TRUE(b_->caps().device_wait);
  EXPECT_FALSE(b_->caps().host_accessible);
  EXPECT_EQ(b_->caps().granularity, 2 * mib);
  EXPECT_GT(b_->caps().total_memory, std::size_t{1} << 30);
  EXPECT_GE(sp::cuda_device_count(), 1);
  EXPECT_THROW((void)sp::make_cuda_backend(sp::cuda_device_count()), sp::backend_error);
}

TEST_F(CudaBackend, AllocateIsAlignedToGranularity) {
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
    void* p = b_->allocate(n * 2 * mib);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (2 * mib), 0u);
    b_->deallocate(p, n * 2 * mib);
  }
}

TEST_F(CudaBackend, OutOfMemoryReturnsNull) {
  const std::size_t tib = std::size_t{1} << 40;  // a multiple of 2 MiB, far above 141 GB
  void* p = b_->allocate(tib);
  EXPECT_EQ(p, nullptr);
  // The backend still works afterwards.
  void* q = b_->allocate(2 * mib);
  ASSERT_NE(q, nullptr);
  b_->deallocate(q, 2 * mib);
}

TEST_F(CudaBackend, FillEveryElementSize) {
  const std::size_t bytes = 3 * mib + 40;  // not a multiple of anything convenient
  void* d = alloc(bytes);
  fill(d, 0xAB, 1, bytes);
  for (std::uint8_t v : read<std::uint8_t>(d, bytes)) ASSERT_EQ(v, 0xAB);
  fill(d, 0xBEEF, 2, bytes / 2);
  for (std::uint16_t v : read<std::uint16_t>(d, bytes / 2)) ASSERT_EQ(v, 0xBEEF);
  fill(d, 0xDEADBEEF, 4, bytes / 4);
  for (std::uint32_t v : read<std::uint32_t>(d, bytes / 4)) ASSERT_EQ(v, 0xDEADBEEFu);
  // 8 bytes with different halves (a kernel or two strided memsets) and with equal halves.
  const std::uint64_t pattern = 0x0123456789ABCDEFull;
  fill(d, pattern, 8, bytes / 8);
  for (std::uint64_t v : read<std::uint64_t>(d, bytes / 8)) ASSERT_EQ(v, pattern);
  fill(d, 0x7777777777777777ull, 8, bytes / 8);
  for (std::uint64_t v : read<std::uint64_t>(d, bytes / 8)) ASSERT_EQ(v, 0x7777777777777777ull);
  // A fill of part of the buffer leaves the rest alone.
  fill(d, 0, 8, 1000);
  auto v = read<std::uint64_t>(d, 1001);
  EXPECT_EQ(v[999], 0u);
  EXPECT_EQ(v[1000], 0x7777777777777777ull);
  // A destination aligned to 4 bytes only takes the strided 32-bit memset path.
  void* odd = static_cast<char*>(d) + 4;
  fill(odd, pattern, 8, 4096);
  for (std::uint64_t w : read<std::uint64_t>(odd, 4096)) ASSERT_EQ(w, pattern);
  EXPECT_EQ(read<std::uint32_t>(d, 1)[0], 0u);  // the word before it is untouched
}

TEST_F(CudaBackend, UploadSourceMayBeReusedAtOnce) {
  // Larger than the staging ring (32 MiB), so uploads wrap it and pipeline.
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4097}, 5 * mib + 3, 77 * mib + 5}) {
    std::vector<std::uint8_t> src = random_bytes(bytes, bytes);
    const std::vector<std::uint8_t> expect = src;
    void* d = alloc(bytes);
    upload(q_, d, src.data(), bytes);
    std::fill(src.begin(), src.end(), std::uint8_t{0xEE});  // the contract allows this at once
    std::vector<std::uint8_t> back(bytes, 0);
    download(q_, back.data(), d, bytes);
    sync(q_);
    ASSERT_EQ(back, expect) << bytes << " bytes";
  }
}

TEST_F(CudaBackend, DeviceToDeviceCopy) {
  std::vector<std::int64_t> h(1 << 20);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::int64_t>(i * 7);
  void* a = to_device(h);
  void* b = alloc(h.size() * 8);
  b_->submit(q_, sp::command::make(sp::copy_command{b, a, h.size() * 8, false, false}));
  EXPECT_EQ(read<std::int64_t>(b, h.size()), h);
}

TEST_F(CudaBackend, MarkersOutliveTheirQueue) {
  sp::native_queue q = b_->create_queue();
  void* d = alloc(64 * mib);
  b_->submit(q, sp::command::make(sp::fill_command{d, 1, 4, 16 * mib}));
  sp::native_marker m = b_->record(q);
  sp::native_marker m2 = b_->record(q);
  b_->wait_host(m2);
  b_->destroy_queue(q);  // all its work has completed
  EXPECT_TRUE(b_->query(m));
  b_->wait_host(m);
  b_->wait_device(q_, m);  // waiting for a marker of a destroyed queue is allowed
  sync(q_);
  b_->release_marker(m);
  b_->release_marker(m2);
  // Released markers are recycled; many record/release rounds stay correct.
  for (int i = 0; i < 5000; ++i) {
    sp::native_marker k = b_->record(q_);
    if (i % 1000 == 0) b_->wait_host(k);
    b_->release_marker(k);
  }
  sync(q_);
}

TEST_F(CudaBackend, WaitDeviceOrdersQueues) {
  sp::native_queue a = b_->create_queue();
  sp::native_queue b = b_->create_queue();
  const std::size_t big = 1024 * mib;
  void* x = alloc(big);
  void* y = alloc(big);
  void* flag = alloc(2 * mib);
  void* out = alloc(2 * mib);
  fill(flag, 0, 4, 1024);
  fill(x, 0x11, 1, big);
  sync(q_);
  for (int round = 0; round < 5; ++round) {
    // Queue a: a few GB of copies (milliseconds of work), then writes the flag.
    for (int i = 0; i < 4; ++i) {
      b_->submit(a, sp::command::make(sp::copy_command{y, x, big, false, false}));
      b_->submit(a, sp::command::make(sp::copy_command{x, y, big, false, false}));
    }
    const auto value = static_cast<std::uint64_t>(0x5A5A0000u + static_cast<unsigned>(round));
    b_->submit(a, sp::command::make(sp::fill_command{flag, value, 4, 1024}));
    sp::native_marker ma = b_->record(a);
    // Queue b waits on the device, then reads the flag. The host does not block here.
    b_->wait_device(b, ma);
    b_->submit(b, sp::command::make(sp::copy_command{out, flag, 4096, false, false}));
    sp::native_marker mb = b_->record(b);
    b_->wait_host(mb);
    EXPECT_TRUE(b_->query(ma));  // b completed after waiting for a
    std::vector<std::uint32_t> h(1024);
    download(q_, h.data(), out, 4096);
    sync(q_);
    for (std::uint32_t v : h) ASSERT_EQ(v, value) << "round " << round;
    b_->release_marker(ma);
    b_->release_marker(mb);
  }
  b_->destroy_queue(a);
  b_->destroy_queue(b);
}

TEST_F(CudaBackend, ConcurrentUploadsFromThreads) {
  constexpr int threads = 8;
  std::vector<std::thread> pool;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // A fresh thread: the backend makes its context current here.
      sp::native_queue q = b_->create_queue();
      const std::size_t cap = 12 * mib;
      void* d = b_->allocate(cap);
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      for (int i = 0; i < 20; ++i) {
        const std::size_t n = 1 + rng() % cap;
        std::vector<std::uint8_t> src = random_bytes(n, rng());
        const auto expect = src;
        b_->submit(q, sp::command::make(sp::copy_command{d, src.data(), n, true, false}));
        src.assign(n, 0);
        std::vector<std::uint8_t> back(n);
        b_->submit(q, sp::command::make(sp::copy_command{back.data(), d, n, false, true}));
        sp::native_marker m = b_->record(q);
        b_->wait_host(m);
        b_->release_marker(m);
        if (back != expect) ++failures[static_cast<std::size_t>(t)];
      }
      b_->deallocate(d, cap);
      b_->destroy_queue(q);
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(failures[static_cast<std::size_t>(t)], 0) << t;
}

// ---- kernels ----------------------------------------------------------------------------------

template <class T>
constexpr sp::dtype dtype_of() {
  return std::is_same_v<T, float> ? sp::dtype::f32 : sp::dtype::i64;
}

template <class T>
sp::scalar scalar_of(T v) {
  sp::scalar s{};
  if constexpr (std::is_same_v<T, float>)
    s.f32 = v;
  else
    s.i64 = v;
  return s;
}

template <class T>
T ref_apply(sp::op fn, T x, T a) {
  switch (fn) {
    case sp::op::identity:
      return x;
    case sp::op::negate:
      return static_cast<T>(-x);
    case sp::op::abs:
      return x < T(0) ? static_cast<T>(-x) : x;
    case sp::op::sqrt:
      if constexpr (std::is_same_v<T, float>)
        return std::sqrt(x);
      else
        return static_cast<T>(std::sqrt(static_cast<double>(x)));
    case sp::op::square:
      return static_cast<T>(x * x);
    case sp::op::add:
      return static_cast<T>(x + a);
    case sp::op::sub:
      return static_cast<T>(x - a);
    case sp::op::mul:
      return static_cast<T>(x * a);
    case sp::op::div:
      return static_cast<T>(x / a);
    case sp::op::min:
      return std::min(x, a);
    case sp::op::max:
      return std::max(x, a);
    case sp::op::axpy:
      break;
  }
  return T(0);
}

template <class T>
T ref_identity(sp::op fn) {
  switch (fn) {
    case sp::op::mul:
      return T(1);
    case sp::op::min:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case sp::op::max:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
    default:
      return T(0);
  }
}

template <class T>
class CudaKernels : public CudaBackend {
 protected:
  void SetUp() override {
#if !defined(STREAMPOOL_HAVE_CUDA_KERNELS)
    GTEST_SKIP() << "built without CUDA kernels (no nvcc or STREAMPOOL_BUILD_CUDA_KERNELS=OFF)";
#endif
    CudaBackend::SetUp();
  }
  static constexpr std::size_t n = 100003;  // not a multiple of any block size

  // Integer-valued inputs in [-8, 8] (never 0 in `nonzero`): every f32 sum, product and prefix
  // below is exact, so the GPU's association order cannot change the result.
  std::vector<T> values(std::uint64_t seed, bool nonzero, bool nonnegative) {
    std::mt19937_64 rng(seed);
    std::vector<T> v(n);
    for (auto& x : v) {
      auto k = static_cast<long long>(rng() % 17) - 8;
      if (nonnegative) k = k < 0 ? -k : k;
      if (nonzero && k == 0) k = 3;
      x = static_cast<T>(k);
    }
    return v;
  }
  // For mul folds: mostly 1, a few -1 and 2, so the product stays exact and finite.
  std::vector<T> product_values(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<T> v(n, T(1));
    for (int i = 0; i < 40; ++i) v[rng() % n] = (i % 2 == 0) ? T(2) : T(-1);
    return v;
  }

  void run(const sp::kernel_command& k) { b_->submit(q_, sp::command::make(k)); }
  sp::kernel_command cmd(sp::kernel_kind kind, sp::op fn, const void* in0, const void* in1,
                         void* out, std::size_t count, T a = T(0), bool has_scalar = false) {
    return sp::kernel_command{kind, fn,    dtype_of<T>(),   in0,       in1,
                              out,  count, scalar_of<T>(a), has_scalar};
  }
};

using kernel_types = ::testing::Types<float, std::int64_t>;
TYPED_TEST_SUITE(CudaKernels, kernel_types);

TYPED_TEST(CudaKernels, MapUnary) {
  using T = TypeParam;
  const auto n = this->n;
  for (sp::op fn : {sp::op::identity, sp::op::negate, sp::op::abs, sp::op::sqrt, sp::op::square,
                    sp::op::add, sp::op::sub, sp::op::mul, sp::op::div, sp::op::min, sp::op::max}) {
    const bool scalar = !(fn == sp::op::identity || fn == sp::op::negate || fn == sp::op::abs ||
                          fn == sp::op::sqrt || fn == sp::op::square);
    const auto in = this->values(static_cast<std::uint64_t>(fn), false, fn == sp::op::sqrt);
    const T a = T(3);
    void* din = this->to_device(in);
    void* dout = this->alloc(n * sizeof(T));
    this->run(this->cmd(sp::kernel_kind::map_unary, fn, din, nullptr, dout, n, a, scalar));
    const auto got = this->template read<T>(dout, n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], ref_apply<T>(fn, in[i], a)) << "op " << int(fn) << " at " << i;
    }
  }
}

TYPED_TEST(CudaKernels, MapUnaryInPlace) {
  using T = TypeParam;
  const auto n = this->n;
  const auto in = this->values(7, false, false);
  void* d = this->to_device(in);
  this->run(this->cmd(sp::kernel_kind::map_unary, sp::op::mul, d, nullptr, d, n, T(-2), true));
  const auto got = this->template read<T>(d, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<T>(in[i] * T(-2)));
}

TYPED_TEST(CudaKernels, MapBinary) {
  using T = TypeParam;
  const auto n = this->n;
  const auto x = this->values(11, false, false);
  const auto y = this->values(12, true, false);
  void* dx = this->to_device(x);
  void* dy = this->to_device(y);
  void* dout = this->alloc(n * sizeof(T));
  for (sp::op fn : {sp::op::add, sp::op::sub, sp::op::mul, sp::op::div, sp::op::min, sp::op::max,
                    sp::op::axpy}) {
    const T a = T(3);
    this->run(this->cmd(sp::kernel_kind::map_binary, fn, dx, dy, dout, n, a));
    const auto got = this->template read<T>(dout, n);
    for (std::size_t i = 0; i < n; ++i) {
      const T expect =
          fn == sp::op::axpy ? static_cast<T>(a * x[i] + y[i]) : ref_apply<T>(fn, x[i], y[i]);
      ASSERT_EQ(got[i], expect) << "op " << int(fn) << " at " << i;
    }
  }
}

TYPED_TEST(CudaKernels, Reduce) {
  using T = TypeParam;
  const auto n = this->n;
  void* dout = this->alloc(sizeof(T));
  for (sp::op fn : {sp::op::add, sp::op::mul, sp::op::min, sp::op::max}) {
    const auto in = fn == sp::op::mul ? this->product_values(5) : this->values(5, false, false);
    void* din = this->to_device(in);
    this->run(this->cmd(sp::kernel_kind::reduce, fn, din, nullptr, dout, n));
    T expect = ref_identity<T>(fn);
    for (T v : in) {
      expect = fn == sp::op::add   ? static_cast<T>(expect + v)
               : fn == sp::op::mul ? static_cast<T>(expect * v)
               : fn == sp::op::min ? std::min(expect, v)
                                   : std::max(expect, v);
    }
    EXPECT_EQ(this->template read<T>(dout, 1)[0], expect) << "op " << int(fn);
    // n == 0 gives the op's identity.
    this->run(this->cmd(sp::kernel_kind::reduce, fn, din, nullptr, dout, 0));
    EXPECT_EQ(this->template read<T>(dout, 1)[0], ref_identity<T>(fn)) << "empty, op " << int(fn);
  }
}

TYPED_TEST(CudaKernels, Scans) {
  using T = TypeParam;
  const auto n = this->n;
  void* dout = this->alloc(n * sizeof(T));
  for (sp::op fn : {sp::op::add, sp::op::mul, sp::op::min, sp::op::max}) {
    const auto in = fn == sp::op::mul ? this->product_values(9) : this->values(9, false, false);
    void* din = this->to_device(in);
    auto fold = [fn](T acc, T v) {
      return fn == sp::op::add   ? static_cast<T>(acc + v)
             : fn == sp::op::mul ? static_cast<T>(acc * v)
             : fn == sp::op::min ? std::min(acc, v)
                                 : std::max(acc, v);
    };
    // Inclusive.
    this->run(this->cmd(sp::kernel_kind::inclusive_scan, fn, din, nullptr, dout, n));
    auto got = this->template read<T>(dout, n);
    T acc = in[0];
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0) acc = fold(acc, in[i]);
      ASSERT_EQ(got[i], acc) << "inclusive op " << int(fn) << " at " << i;
    }
    // Exclusive, with an init value.
    const T init = fn == sp::op::mul ? T(2) : T(5);
    this->run(this->cmd(sp::kernel_kind::exclusive_scan, fn, din, nullptr, dout, n, init));
    got = this->template read<T>(dout, n);
    acc = init;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], acc) << "exclusive op " << int(fn) << " at " << i;
      acc = fold(acc, in[i]);
    }
  }
}

#if !defined(STREAMPOOL_HAVE_CUDA_KERNELS)
TEST_F(CudaBackend, KernelsReportTheirAbsence) {
  void* d = alloc(64 * sizeof(float));
  const sp::kernel_command k{sp::kernel_kind::map_unary,
                             sp::op::negate,
                             sp::dtype::f32,
                             d,
                             nullptr,
                             d,
                             64,
                             sp::scalar{},
                             false};
  EXPECT_THROW(b_->submit(q_, sp::command::make(k)), sp::backend_error);
}
#endif

TYPED_TEST(CudaKernels, UndefinedCombinationsAreRejected) {
  using T = TypeParam;
  void* d = this->alloc(64 * sizeof(T));
  EXPECT_THROW(this->run(this->cmd(sp::kernel_kind::map_binary, sp::op::negate, d, d, d, 64)),
               sp::logic_error);
  EXPECT_THROW(this->run(this->cmd(sp::kernel_kind::reduce, sp::op::div, d, nullptr, d, 64)),
               sp::logic_error);
  EXPECT_THROW(this->run(this->cmd(sp::kernel_kind::map_unary, sp::op::add, d, nullptr, d, 64)),
               sp::logic_error);  // a binary op needs the scalar
}

}  // namespace
