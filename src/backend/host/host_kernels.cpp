#include "host_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>

#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

// backend::submit admits only the ops that kernel.hpp's valid_for defines for each kernel kind,
// so the switches below never see another; their default is the last line, not a check.
[[noreturn]] void unreachable_op(const char* where, op fn) noexcept {
  char what[128];
  std::snprintf(what, sizeof what, "%s: op %s (%u) is not valid here (backend::submit refuses it)",
                where, op_name(fn), static_cast<unsigned>(fn));
  assert_fail(what, __FILE__, __LINE__);
}

template <class T>
T scalar_as(const scalar& s) {
  if constexpr (std::is_same_v<T, float>) return s.f32;
  if constexpr (std::is_same_v<T, double>) return s.f64;
  if constexpr (std::is_same_v<T, std::int32_t>) return s.i32;
  if constexpr (std::is_same_v<T, std::int64_t>) return s.i64;
  if constexpr (std::is_same_v<T, std::uint32_t>) return s.u32;
  if constexpr (std::is_same_v<T, std::uint64_t>) return s.u64;
}

template <class T>
T apply_binary(op fn, T x, T y) {
  switch (fn) {
    case op::add:
      return static_cast<T>(x + y);
    case op::sub:
      return static_cast<T>(x - y);
    case op::mul:
      return static_cast<T>(x * y);
    case op::div:
      if constexpr (std::is_integral_v<T>) {
        // Integer division by zero is undefined on the CPU; give 0 like a GPU lane would not
        // trap either, and keep the host backend free of UB under UBSan.
        return y == 0 ? T{0} : static_cast<T>(x / y);
      } else {
        return x / y;
      }
    case op::min:
      return std::min(x, y);
    case op::max:
      return std::max(x, y);
    default:
      unreachable_op("apply_binary", fn);
  }
}

template <class T>
T apply_unary(op fn, T x) {
  switch (fn) {
    case op::identity:
      return x;
    case op::negate:
      if constexpr (std::is_unsigned_v<T>)
        return static_cast<T>(T{0} - x);
      else
        return static_cast<T>(-x);
    case op::abs:
      if constexpr (std::is_unsigned_v<T>)
        return x;
      else
        return x < T{0} ? static_cast<T>(-x) : x;
    case op::sqrt:
      // Same as the CUDA kernels: the square root of a negative integer is 0 (converting NaN to
      // an integer would be undefined behaviour).
      if constexpr (std::is_integral_v<T>) {
        if (x <= T{0}) return T{0};
      }
      return static_cast<T>(std::sqrt(static_cast<double>(x)));
    case op::square:
      return static_cast<T>(x * x);
    default:
      unreachable_op("apply_unary", fn);
  }
}

template <class T>
void run_typed(const kernel_command& k) {
  const T* in0 = static_cast<const T*>(k.in0);
  const T* in1 = static_cast<const T*>(k.in1);
  T* out = static_cast<T*>(k.out);
  const T a = scalar_as<T>(k.a);
  switch (k.kind) {
    case kernel_kind::map_unary:
      for (std::size_t i = 0; i < k.n; ++i)
        out[i] = k.has_scalar ? apply_binary(k.fn, in0[i], a) : apply_unary(k.fn, in0[i]);
      return;
    case kernel_kind::map_binary:
      for (std::size_t i = 0; i < k.n; ++i)
        out[i] = k.fn == op::axpy ? static_cast<T>(a * in0[i] + in1[i])
                                  : apply_binary(k.fn, in0[i], in1[i]);
      return;
    case kernel_kind::reduce: {
      T acc = fold_identity<T>(k.fn);
      for (std::size_t i = 0; i < k.n; ++i) acc = apply_binary(k.fn, acc, in0[i]);
      out[0] = acc;
      return;
    }
    case kernel_kind::inclusive_scan: {
      T acc = fold_identity<T>(k.fn);
      for (std::size_t i = 0; i < k.n; ++i) out[i] = acc = apply_binary(k.fn, acc, in0[i]);
      return;
    }
    case kernel_kind::exclusive_scan: {
      T acc = a;
      for (std::size_t i = 0; i < k.n; ++i) {
        const T x = in0[i];  // read first: out may alias in0
        out[i] = acc;
        acc = apply_binary(k.fn, acc, x);
      }
      return;
    }
  }
}

}  // namespace

void run_host_kernel(const kernel_command& k) {
  switch (k.type) {
    case dtype::f32:
      return run_typed<float>(k);
    case dtype::f64:
      return run_typed<double>(k);
    case dtype::i32:
      return run_typed<std::int32_t>(k);
    case dtype::i64:
      return run_typed<std::int64_t>(k);
    case dtype::u32:
      return run_typed<std::uint32_t>(k);
    case dtype::u64:
      return run_typed<std::uint64_t>(k);
  }
}

}  // namespace streampool::detail
