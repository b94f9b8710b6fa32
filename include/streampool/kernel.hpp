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
#pragma once

#include <cstddef>
#include <cstdint>

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
