// streampool: the fixed set of device kernels every backend implements.
//
// Arrays (array.hpp) express map, reduce and scan through these descriptors, so that one array
// layer runs on every backend: the host backend interprets them on its worker threads, the CUDA
// backend launches precompiled kernels.
//
// Glossary
//   dtype   the element type of every operand of one kernel.
//   op      the arithmetic: for map_unary it is applied as out[i] = op(in0[i], a), for map_binary
//           as out[i] = op(in0[i], in1[i]), for axpy out[i] = a*in0[i] + in1[i]; reduce and scans
//           fold with add, mul, min or max.
//   valid   the ops each kernel kind defines (valid_for below). backend::submit refuses any
//           other combination, so no backend ever sees one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace streampool {

enum class dtype : std::uint8_t { f32, f64, i32, i64, u32, u64 };

[[nodiscard]] constexpr std::size_t size_of(dtype t) noexcept {
  return (t == dtype::f32 || t == dtype::i32 || t == dtype::u32) ? 4 : 8;
}

enum class op : std::uint8_t {
  identity,  ///< out = x                       (map_unary)
  negate,    ///< out = -x                      (map_unary)
  abs,       ///< out = |x|                     (map_unary)
  sqrt,      ///< out = sqrt(x)                 (map_unary)
  square,    ///< out = x*x                     (map_unary)
  add,       ///< out = x + y, or x + a         (map_unary with scalar, map_binary, fold)
  sub,       ///< out = x - y, or x - a
  mul,       ///< out = x * y, or x * a
  div,       ///< out = x / y, or x / a
  min,       ///< out = min(x, y), or min(x, a)
  max,       ///< out = max(x, y), or max(x, a)
  axpy,      ///< out = a*x + y                 (map_binary)
};

enum class kernel_kind : std::uint8_t {
  map_unary,       ///< out[i] = op(in0[i]) or op(in0[i], a)
  map_binary,      ///< out[i] = op(in0[i], in1[i])  (axpy: a*in0[i] + in1[i])
  reduce,          ///< out[0] = fold(op, in0[0..n))  (n == 0 gives op's identity)
  inclusive_scan,  ///< out[i] = fold(op, in0[0..i])
  exclusive_scan,  ///< out[i] = fold(op, init=a, in0[0..i))
};

/// A scalar operand in the kernel's dtype, stored as 8 raw bytes.
union scalar {
  double f64;
  float f32;
  std::int64_t i64;
  std::int32_t i32;
  std::uint64_t u64;
  std::uint32_t u32;
  std::uint64_t bits;
};

/// Names for messages ("unknown" for a value outside the enum, e.g. from the C ABI).
[[nodiscard]] constexpr const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
      return "f32";
    case dtype::f64:
      return "f64";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
    case dtype::u32:
      return "u32";
    case dtype::u64:
      return "u64";
  }
  return "unknown";
}
[[nodiscard]] constexpr const char* op_name(op fn) noexcept {
  switch (fn) {
    case op::identity:
      return "identity";
    case op::negate:
      return "negate";
    case op::abs:
      return "abs";
    case op::sqrt:
      return "sqrt";
    case op::square:
      return "square";
    case op::add:
      return "add";
    case op::sub:
      return "sub";
    case op::mul:
      return "mul";
    case op::div:
      return "div";
    case op::min:
      return "min";
    case op::max:
      return "max";
    case op::axpy:
      return "axpy";
  }
  return "unknown";
}
[[nodiscard]] constexpr const char* kind_name(kernel_kind kind) noexcept {
  switch (kind) {
    case kernel_kind::map_unary:
      return "map_unary";
    case kernel_kind::map_binary:
      return "map_binary";
    case kernel_kind::reduce:
      return "reduce";
    case kernel_kind::inclusive_scan:
      return "inclusive_scan";
    case kernel_kind::exclusive_scan:
      return "exclusive_scan";
  }
  return "unknown";
}

/// The ops of one operand: map_unary without a scalar.
[[nodiscard]] constexpr bool is_unary(op fn) noexcept {
  return fn == op::identity || fn == op::negate || fn == op::abs || fn == op::sqrt ||
         fn == op::square;
}

/// The ops of two operands: map_binary, and map_unary with the scalar as the second operand.
/// axpy is not one of them: it takes three (a, x, y) and exists only as map_binary.
[[nodiscard]] constexpr bool is_binary(op fn) noexcept {
  return fn == op::add || fn == op::sub || fn == op::mul || fn == op::div || fn == op::min ||
         fn == op::max;
}

/// The ops with an identity element (what reduce of nothing gives): reduce and the scans.
[[nodiscard]] constexpr bool is_fold(op fn) noexcept {
  return fn == op::add || fn == op::mul || fn == op::min || fn == op::max;
}

/// The identity element of fold `fn` (is_fold(fn)): what a reduce of nothing gives, and every
/// backend's starting value. min and max start at the extremes of T (infinities for floating
/// point); an op that is not a fold gives T{0}, which valid_for keeps from ever being asked.
template <class T>
[[nodiscard]] constexpr T fold_identity(op fn) noexcept {
  switch (fn) {
    case op::mul:
      return T(1);
    case op::min:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return std::numeric_limits<T>::infinity();
      else
        return std::numeric_limits<T>::max();
    case op::max:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return -std::numeric_limits<T>::infinity();
      else
        return std::numeric_limits<T>::lowest();
    default:
      return T(0);  // add
  }
}

/// Whether kernel kind `kind` defines op `fn`. `has_scalar` matters only to map_unary, where it
/// says that the op takes the scalar as its second operand (so the op must be binary). Values
/// outside the enums are never valid.
[[nodiscard]] constexpr bool valid_for(kernel_kind kind, op fn, bool has_scalar) noexcept {
  switch (kind) {
    case kernel_kind::map_unary:
      return has_scalar ? is_binary(fn) : is_unary(fn);
    case kernel_kind::map_binary:
      return is_binary(fn) || fn == op::axpy;
    case kernel_kind::reduce:
    case kernel_kind::inclusive_scan:
    case kernel_kind::exclusive_scan:
      return is_fold(fn);
  }
  return false;
}

struct kernel_command {
  kernel_kind kind;
  op fn;
  dtype type;
  const void* in0;  ///< n elements
  const void* in1;  ///< n elements (map_binary), else nullptr
  void* out;        ///< n elements (1 for reduce); may equal in0 for map kernels
  std::size_t n;
  scalar a;         ///< scalar operand (map_unary with binary op, axpy, exclusive scan's init)
  bool has_scalar;  ///< map_unary: op takes the scalar a as its second operand
};

}  // namespace streampool
