// streampool: the fixed kernel set of include/streampool/kernel.hpp in OpenCL C 1.2.
//
// One source for every backend that runs OpenCL C (the OpenCL backend builds it at run time; the
// Level Zero backend reuses it). kernel_plan.hpp turns a kernel_command into the launches below;
// a backend only sets arguments and enqueues.
//
// Glossary
//   S        the dtype suffix: f32 f64 i32 i64 u32 u64 (kernel.hpp's dtype), T its OpenCL C type
//            (float double int long uint ulong). Every kernel below exists once per S, named
//            sp_<kernel>_<S>. The f64 kernels exist only when SP_FP64 is defined (the host defines
//            it for devices with cl_khr_fp64), so the source builds on devices without doubles.
//   op       a streampool::op value (kernel.hpp: identity 0, negate 1, abs 2, sqrt 3, square 4,
//            add 5, sub 6, mul 7, div 8, min 9, max 10, axpy 11), passed as a uint argument.
//   L, G, g  the work-group size, the number of groups and a group's index. Every launch is
//            one-dimensional with global size G*L and no offset; item l of group g has global
//            index g*L + l. L is a power of two (the reduce tree needs it; kernel_plan picks it).
//   id(op)   the identity of a fold: add 0, mul 1, min +inf (floats) or the type's maximum, max
//            -inf (floats) or the type's minimum.
//
// Element operations (the same as the host backend, src/backend/host/host_kernels.cpp):
//   binary(op, x, y)  add x+y, sub x-y, mul x*y, div x/y, min (y < x ? y : x), max (x < y ? y : x).
//                     Integers wrap (two's complement, computed in the unsigned type); integer
//                     division by zero gives 0, and the signed minimum divided by -1 gives the
//                     minimum (wrapped negation) instead of trapping.
//   unary(op, x)      identity x, negate -x (wrapping; unsigned: 0-x), abs (unsigned: x; signed:
//                     x < 0 ? -x : x, wrapping), square x*x, sqrt: floats sqrt(x); integers 0 for
//                     x <= 0, else (T)sqrt((double)x) with SP_FP64, else the exact floor of the
//                     square root (devices without doubles; may differ from the host by one for
//                     64-bit values above 2^53).
//   axpy              a*x + y (integers wrap).
//   Floats: the backend builds with -cl-fp32-correctly-rounded-divide-sqrt where the device
//   supports it, so that f32 div and sqrt match the host exactly.
//
// The kernels, their exact argument lists (in order) and what group g of G groups of L items
// does. "i < n" bounds every access; n is a ulong.
//
//   sp_map_unary_S(global T* out, global const T* in0, ulong n, uint op, uint has_scalar, T a)
//     For every i in {g*L + l + k*G*L : 0 <= l < L, k >= 0, i < n}:
//       out[i] = has_scalar ? binary(op, in0[i], a) : unary(op, in0[i]).
//     (A grid-stride loop: any G covers all n; out may equal in0.)
//
//   sp_map_binary_S(global T* out, global const T* in0, global const T* in1, ulong n, uint op,
//                   T a)
//     Same index set as map_unary: out[i] = op == axpy ? a*in0[i] + in1[i]
//                                                      : binary(op, in0[i], in1[i]).
//
//   sp_reduce_S(global T* out, global const T* in, ulong n, uint op, local T* tmp /* L elems */)
//     Item l folds its strided elements left to right:
//       acc[l] = id(op); for (i = g*L + l; i < n; i += G*L) acc[l] = binary(op, acc[l], in[i]);
//     then a tree over the L accumulators:
//       for (s = L/2; s > 0; s /= 2) for each l < s: acc[l] = binary(op, acc[l], acc[l + s]);
//     and writes out[g] = acc[0]. (Pass 1 writes G partials; pass 2 is one group over them.)
//
//   sp_scan_tiles_S(global T* out, global const T* in, global T* totals, ulong n, uint op,
//                   uint exclusive, T init, local T* tmp /* L elems */)
//     Group g scans tile g, the elements i = g*L + l (0 <= l < L). With x[l] = (i < n ? in[i] :
//     id(op)), the inclusive tile scan is computed by Hillis-Steele steps:
//       v[l] = x[l]; for (d = 1; d < L; d *= 2) v'[l] = l >= d ? binary(op, v[l - d], v[l]) : v[l];
//     Then for i < n: out[i] = exclusive ? (l == 0 ? init : binary(op, init, v[l - 1])) : v[l].
//     When G > 1, item L-1 writes totals[g] = v[L - 1] (the tile's fold, without init); when
//     G == 1 totals is never touched (any pointer may be passed). Every element is read before
//     any is written, so out may equal in.
//
//   sp_scan_add_S(global T* data, global const T* offsets, ulong n, uint op)
//     For i = g*L + l < n: data[i] = binary(op, offsets[g], data[i]). offsets[g] is the
//     exclusive scan (init id(op)) of the totals of the tiles before tile g, so L must be the L
//     of the sp_scan_tiles_S pass whose tiles these are.
//
// Why multi-pass: OpenCL 1.2 has no device-wide synchronisation inside a kernel, so each level of
// a reduction or a scan is its own launch; an in-order queue orders the launches.
#ifdef SP_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define SP_OP_IDENTITY 0u
#define SP_OP_NEGATE 1u
#define SP_OP_ABS 2u
#define SP_OP_SQRT 3u
#define SP_OP_SQUARE 4u
#define SP_OP_ADD 5u
#define SP_OP_SUB 6u
#define SP_OP_MUL 7u
#define SP_OP_DIV 8u
#define SP_OP_MIN 9u
#define SP_OP_MAX 10u
#define SP_OP_AXPY 11u

// ---- element operations: floats ----------------------------------------------------------------
#define SP_FLOAT_OPS(T, S)                                                                         \
  inline T sp_identity_##S(uint op) {                                                              \
    return op == SP_OP_MUL ? (T)1 : op == SP_OP_MIN ? (T)INFINITY : op == SP_OP_MAX ? (T)(-INFINITY) \
                                                                                    : (T)0;        \
  }                                                                                                \
  inline T sp_binary_##S(uint op, T x, T y) {                                                      \
    switch (op) {                                                                                  \
      case SP_OP_ADD: return x + y;                                                                \
      case SP_OP_SUB: return x - y;                                                                \
      case SP_OP_MUL: return x * y;                                                                \
      case SP_OP_DIV: return x / y;                                                                \
      case SP_OP_MIN: return y < x ? y : x;                                                        \
      case SP_OP_MAX: return x < y ? y : x;                                                        \
      default: return x;                                                                           \
    }                                                                                              \
  }                                                                                                \
  inline T sp_unary_##S(uint op, T x) {                                                            \
    switch (op) {                                                                                  \
      case SP_OP_NEGATE: return -x;                                                                \
      case SP_OP_ABS: return x < (T)0 ? -x : x;                                                    \
      case SP_OP_SQRT: return sqrt(x);                                                             \
      case SP_OP_SQUARE: return x * x;                                                             \
      default: return x;                                                                           \
    }                                                                                              \
  }                                                                                                \
  inline T sp_axpy_##S(T a, T x, T y) { return a * x + y; }

// ---- element operations: integers (T signed or unsigned, U the unsigned type of T's width) ------
// Arithmetic goes through U: signed overflow is undefined in OpenCL C as in C99, wrapping is what
// the host backend (and the GPU) give.
#ifdef SP_FP64
#define SP_INT_SQRT(T, x) ((x) <= (T)0 ? (T)0 : (T)sqrt((double)(x)))
#else
#define SP_INT_SQRT(T, x) sp_isqrt_floor_##T(x)
#endif

#define SP_INT_OPS(T, U, S, TMIN, TMAX)                                                            \
  inline T sp_isqrt_floor_##T(T x) {                                                               \
    if (x <= (T)0) return (T)0;                                                                    \
    T r = (T)sqrt((float)x);                                                                       \
    while (r > (T)0 && r > x / r) --r;                                                             \
    while (r + (T)1 <= x / (r + (T)1)) ++r;                                                        \
    return r;                                                                                      \
  }                                                                                                \
  inline T sp_identity_##S(uint op) {                                                              \
    return op == SP_OP_MUL ? (T)1 : op == SP_OP_MIN ? (T)(TMAX) : op == SP_OP_MAX ? (T)(TMIN) : (T)0; \
  }                                                                                                \
  inline T sp_binary_##S(uint op, T x, T y) {                                                      \
    switch (op) {                                                                                  \
      case SP_OP_ADD: return (T)((U)x + (U)y);                                                     \
      case SP_OP_SUB: return (T)((U)x - (U)y);                                                     \
      case SP_OP_MUL: return (T)((U)x * (U)y);                                                     \
      case SP_OP_DIV:                                                                              \
        if (y == (T)0) return (T)0;                                                                \
        if ((T)(TMIN) != (T)0 && x == (T)(TMIN) && y == (T)(-1)) return x;                         \
        return x / y;                                                                              \
      case SP_OP_MIN: return y < x ? y : x;                                                        \
      case SP_OP_MAX: return x < y ? y : x;                                                        \
      default: return x;                                                                           \
    }                                                                                              \
  }                                                                                                \
  inline T sp_unary_##S(uint op, T x) {                                                            \
    switch (op) {                                                                                  \
      case SP_OP_NEGATE: return (T)((U)0 - (U)x);                                                  \
      case SP_OP_ABS: return x < (T)0 ? (T)((U)0 - (U)x) : x;                                      \
      case SP_OP_SQRT: return SP_INT_SQRT(T, x);                                                   \
      case SP_OP_SQUARE: return (T)((U)x * (U)x);                                                  \
      default: return x;                                                                           \
    }                                                                                              \
  }                                                                                                \
  inline T sp_axpy_##S(T a, T x, T y) { return (T)((U)a * (U)x + (U)y); }

// ---- the kernels, once per dtype -----------------------------------------------------------------
#define SP_KERNELS(T, S)                                                                           \
  kernel void sp_map_unary_##S(global T* out, global const T* in0, ulong n, uint op,              \
                               uint has_scalar, T a) {                                             \
    const ulong stride = get_global_size(0);                                                       \
    for (ulong i = get_global_id(0); i < n; i += stride)                                           \
      out[i] = has_scalar ? sp_binary_##S(op, in0[i], a) : sp_unary_##S(op, in0[i]);               \
  }                                                                                                \
  kernel void sp_map_binary_##S(global T* out, global const T* in0, global const T* in1, ulong n, \
                                uint op, T a) {                                                    \
    const ulong stride = get_global_size(0);                                                       \
    for (ulong i = get_global_id(0); i < n; i += stride)                                           \
      out[i] = op == SP_OP_AXPY ? sp_axpy_##S(a, in0[i], in1[i]) : sp_binary_##S(op, in0[i], in1[i]); \
  }                                                                                                \
  kernel void sp_reduce_##S(global T* out, global const T* in, ulong n, uint op, local T* tmp) {  \
    const size_t l = get_local_id(0);                                                              \
    const size_t L = get_local_size(0);                                                            \
    const ulong stride = (ulong)get_num_groups(0) * L;                                             \
    T acc = sp_identity_##S(op);                                                                   \
    for (ulong i = (ulong)get_group_id(0) * L + l; i < n; i += stride)                             \
      acc = sp_binary_##S(op, acc, in[i]);                                                         \
    tmp[l] = acc;                                                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                  \
    for (size_t s = L / 2; s > 0; s /= 2) {                                                        \
      if (l < s) tmp[l] = sp_binary_##S(op, tmp[l], tmp[l + s]);                                   \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    }                                                                                              \
    if (l == 0) out[get_group_id(0)] = tmp[0];                                                     \
  }                                                                                                \
  kernel void sp_scan_tiles_##S(global T* out, global const T* in, global T* totals, ulong n,     \
                                uint op, uint exclusive, T init, local T* tmp) {                   \
    const size_t l = get_local_id(0);                                                              \
    const size_t L = get_local_size(0);                                                            \
    const ulong i = (ulong)get_group_id(0) * L + l;                                                \
    tmp[l] = i < n ? in[i] : sp_identity_##S(op);                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                  \
    for (size_t d = 1; d < L; d *= 2) {                                                            \
      T v = tmp[l];                                                                                \
      if (l >= d) v = sp_binary_##S(op, tmp[l - d], v);                                            \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                \
      tmp[l] = v;                                                                                  \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    }                                                                                              \
    if (i < n) out[i] = exclusive ? (l == 0 ? init : sp_binary_##S(op, init, tmp[l - 1])) : tmp[l]; \
    if (l == L - 1 && get_num_groups(0) > 1) totals[get_group_id(0)] = tmp[L - 1];                 \
  }                                                                                                \
  kernel void sp_scan_add_##S(global T* data, global const T* offsets, ulong n, uint op) {        \
    const ulong i = get_global_id(0);                                                              \
    if (i < n) data[i] = sp_binary_##S(op, offsets[get_group_id(0)], data[i]);                     \
  }

SP_FLOAT_OPS(float, f32)
SP_KERNELS(float, f32)

SP_INT_OPS(int, uint, i32, INT_MIN, INT_MAX)
SP_KERNELS(int, i32)
SP_INT_OPS(long, ulong, i64, LONG_MIN, LONG_MAX)
SP_KERNELS(long, i64)
SP_INT_OPS(uint, uint, u32, 0, UINT_MAX)
SP_KERNELS(uint, u32)
SP_INT_OPS(ulong, ulong, u64, 0, ULONG_MAX)
SP_KERNELS(ulong, u64)

#ifdef SP_FP64
SP_FLOAT_OPS(double, f64)
SP_KERNELS(double, f64)
#endif
