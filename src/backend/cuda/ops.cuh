// streampool: the element operations of kernel.hpp as device functors (CUDA backend).
//
// Semantics, shared with every backend (kernel.hpp):
//   min(x, y) = y < x ? y : x, max(x, y) = x < y ? y : x (std::min/std::max; with a NaN operand
//   the other result depends on order, as on the host);
//   negate and abs of unsigned types wrap / are the identity;
//   sqrt of an integer is the truncated square root of its value as a double (0 for negatives,
//   whose square root is not a number of the type).
//   Integer division by zero does not trap on the GPU; its result is unspecified.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "streampool/kernel.hpp"

namespace streampool::detail::cuda_ops {

template <class T>
struct fold_add {
  __host__ __device__ T operator()(T x, T y) const { return static_cast<T>(x + y); }
};
template <class T>
struct fold_mul {
  __host__ __device__ T operator()(T x, T y) const { return static_cast<T>(x * y); }
};
template <class T>
struct fold_min {
  __host__ __device__ T operator()(T x, T y) const { return y < x ? y : x; }
};
template <class T>
struct fold_max {
  __host__ __device__ T operator()(T x, T y) const { return x < y ? y : x; }
};

/// out = fn(x, a) for map_unary (a is ignored by the unary ops), fn(x, y) for map_binary.
template <class T, op Fn>
__device__ __forceinline__ T apply(T x, T a) {
  if constexpr (Fn == op::identity) {
    return x;
  } else if constexpr (Fn == op::negate) {
    return static_cast<T>(T(0) - x);
  } else if constexpr (Fn == op::abs) {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? static_cast<T>(-x) : x;
  } else if constexpr (Fn == op::sqrt) {
    if constexpr (std::is_same_v<T, float>)
      return sqrtf(x);
    else if constexpr (std::is_same_v<T, double>)
      return ::sqrt(x);
    else {
      if constexpr (std::is_signed_v<T>) {
        if (x < T(0)) return T(0);
      }
      return static_cast<T>(::sqrt(static_cast<double>(x)));
    }
  } else if constexpr (Fn == op::square) {
    return static_cast<T>(x * x);
  } else if constexpr (Fn == op::add) {
    return static_cast<T>(x + a);
  } else if constexpr (Fn == op::sub) {
    return static_cast<T>(x - a);
  } else if constexpr (Fn == op::mul) {
    return static_cast<T>(x * a);
  } else if constexpr (Fn == op::div) {
    return static_cast<T>(x / a);
  } else if constexpr (Fn == op::min) {
    return a < x ? a : x;
  } else if constexpr (Fn == op::max) {
    return x < a ? a : x;
  } else {
    static_assert(Fn != Fn, "axpy is handled by the map_binary kernel");
  }
}

template <class T>
__host__ __device__ T scalar_as(const scalar& s) {
  if constexpr (std::is_same_v<T, float>)
    return s.f32;
  else if constexpr (std::is_same_v<T, double>)
    return s.f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return s.i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return s.i64;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return s.u32;
  else
    return s.u64;
}

/// Calls f(fold) with the fold functor for `fn` (add, mul, min, max); cudaErrorInvalidValue for
/// any other op (callers validate first; this is the last line).
template <class T, class F>
__host__ int with_fold(op fn, F&& f) {
  switch (fn) {
    case op::add:
      return f(fold_add<T>{});
    case op::mul:
      return f(fold_mul<T>{});
    case op::min:
      return f(fold_min<T>{});
    case op::max:
      return f(fold_max<T>{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

/// Runs a CUB device algorithm `run(tmp, bytes)` twice, the CUB way: once to size its temporary
/// storage, once for real. The storage is taken with cudaMallocAsync and given back with
/// cudaFreeAsync on the algorithm's own stream, so the free is ordered after the kernels: never
/// reused while they may still read it, and no host synchronisation.
template <class Run>
__host__ int run_with_temp_storage(cudaStream_t s, Run&& run) {
  std::size_t bytes = 0;
  cudaError_t e = run(nullptr, bytes);
  if (e != cudaSuccess) return static_cast<int>(e);
  void* tmp = nullptr;
  e = cudaMallocAsync(&tmp, bytes > 0 ? bytes : 1, s);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = run(tmp, bytes);
  const cudaError_t f = cudaFreeAsync(tmp, s);
  return static_cast<int>(e != cudaSuccess ? e : f);
}

/// Calls f(T{}) with T the C++ type of `t`.
template <class F>
__host__ decltype(auto) with_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::f32:
      return f(float{});
    case dtype::f64:
      return f(double{});
    case dtype::i32:
      return f(std::int32_t{});
    case dtype::i64:
      return f(std::int64_t{});
    case dtype::u32:
      return f(std::uint32_t{});
    default:
      return f(std::uint64_t{});
  }
}

}  // namespace streampool::detail::cuda_ops
