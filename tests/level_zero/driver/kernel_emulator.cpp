#include "kernel_emulator.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "streampool/kernel.hpp"
#include "violations.hpp"

namespace streampool::ze_test_driver {
namespace {

// kernels.cl passes ops as streampool::op values (kernel.hpp).
constexpr std::uint32_t op_value(op fn) { return static_cast<std::uint32_t>(fn); }

// ---- element operations, as kernels.cl's header defines them ----------------------------------

template <class T>
T identity(std::uint32_t fn) {
  if (fn == op_value(op::mul)) {
    return T{1};
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (fn == op_value(op::min)) return std::numeric_limits<T>::infinity();
    if (fn == op_value(op::max)) return -std::numeric_limits<T>::infinity();
  } else {
    if (fn == op_value(op::min)) return std::numeric_limits<T>::max();
    if (fn == op_value(op::max)) return std::numeric_limits<T>::lowest();
  }
  return T{0};
}

// Integer arithmetic wraps: it goes through the unsigned type of the same width.
template <class T, bool = std::is_integral_v<T>>
struct wrap {
  using type = T;
};
template <class T>
struct wrap<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using wrap_t = typename wrap<T>::type;

template <class T>
T binary(std::uint32_t fn, T x, T y) {
  using U = wrap_t<T>;
  switch (static_cast<op>(fn)) {
    case op::add:
      return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    case op::sub:
      return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
    case op::mul:
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
    case op::div:
      if constexpr (std::is_integral_v<T>) {
        if (y == T{0}) return T{0};
        if constexpr (std::is_signed_v<T>) {
          if (x == std::numeric_limits<T>::lowest() && y == T{-1}) return x;
        }
      }
      return x / y;
    case op::min:
      return y < x ? y : x;
    case op::max:
      return x < y ? y : x;
    default:
      return x;
  }
}

// The integer square root of kernels.cl without SP_FP64: the exact floor.
template <class T>
T isqrt_floor(T x) {
  if (x <= T{0}) return T{0};
  T r = static_cast<T>(std::sqrt(static_cast<float>(x)));
  while (r > T{0} && r > x / r) --r;
  while (r + T{1} <= x / (r + T{1})) ++r;
  return r;
}

template <class T>
T unary(std::uint32_t fn, T x, bool fp64) {
  using U = wrap_t<T>;
  switch (static_cast<op>(fn)) {
    case op::negate:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(U{0} - static_cast<U>(x));
      return -x;
    case op::abs:
      if constexpr (std::is_integral_v<T>) {
        return x < T{0} ? static_cast<T>(U{0} - static_cast<U>(x)) : x;
      }
      return x < T{0} ? -x : x;
    case op::sqrt:
      if constexpr (std::is_integral_v<T>) {
        if (!fp64) return isqrt_floor(x);
        return x <= T{0} ? T{0} : static_cast<T>(std::sqrt(static_cast<double>(x)));
      }
      return std::sqrt(x);
    case op::square:
      return static_cast<T>(static_cast<U>(x) * static_cast<U>(x));
    default:
      return x;
  }
}

template <class T>
T axpy(T a, T x, T y) {
  using U = wrap_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(x) + static_cast<U>(y));
}

// ---- launch shape
// --------------------------------------------------------------------------------

// kernels.cl's launches are one-dimensional with a power-of-two group size; a local tmp holds L
// elements. A launch that breaks this would compute garbage or overflow local memory on a device,
// so it is reported (in the violation log) and skipped.
bool check_shape(const kernel_launch& k, const char* name, int local_arg, std::size_t elem) {
  const std::uint32_t L = k.group_size[0];
  std::string problem;
  if (k.group_size[1] != 1 || k.group_size[2] != 1 || k.group_count[1] != 1 ||
      k.group_count[2] != 1) {
    problem = "not one-dimensional";
  } else if (L == 0 || (L & (L - 1)) != 0) {
    problem = "group size " + std::to_string(L) + " is not a power of two";
  } else if (local_arg >= 0 && k.args[static_cast<std::size_t>(local_arg)].local_bytes < L * elem) {
    problem = "local memory of " +
              std::to_string(k.args[static_cast<std::size_t>(local_arg)].local_bytes) +
              " bytes for a group of " + std::to_string(L) + " elements of " +
              std::to_string(elem) + " bytes";
  }
  if (problem.empty()) {
    return true;
  }
  report_violation(std::string("kernel launch error: ") + name + ": " + problem +
                   " (launch skipped)");
  return false;
}

// ---- the kernels, group by group -------------------------------------------------------------

// sp_map_unary_S(out, in0, n, op, has_scalar, a)
template <class T>
void map_unary(const kernel_launch& k) {
  if (!check_shape(k, "sp_map_unary", -1, sizeof(T))) return;
  auto* out = k.arg<T*>(0);
  const auto* in0 = k.arg<const T*>(1);
  const auto n = k.arg<std::uint64_t>(2);
  const auto fn = k.arg<std::uint32_t>(3);
  const bool has_scalar = k.arg<std::uint32_t>(4) != 0;
  const T a = k.arg<T>(5);
  const std::uint64_t L = k.group_size[0];
  const std::uint64_t stride = k.group_count[0] * L;
  for (std::uint64_t g = 0; g < k.group_count[0]; ++g) {
    for (std::uint64_t l = 0; l < L; ++l) {
      for (std::uint64_t i = g * L + l; i < n; i += stride) {
        out[i] = has_scalar ? binary(fn, in0[i], a) : unary(fn, in0[i], k.fp64);
      }
    }
  }
}

// sp_map_binary_S(out, in0, in1, n, op, a)
template <class T>
void map_binary(const kernel_launch& k) {
  if (!check_shape(k, "sp_map_binary", -1, sizeof(T))) return;
  auto* out = k.arg<T*>(0);
  const auto* in0 = k.arg<const T*>(1);
  const auto* in1 = k.arg<const T*>(2);
  const auto n = k.arg<std::uint64_t>(3);
  const auto fn = k.arg<std::uint32_t>(4);
  const T a = k.arg<T>(5);
  const std::uint64_t L = k.group_size[0];
  const std::uint64_t stride = k.group_count[0] * L;
  for (std::uint64_t g = 0; g < k.group_count[0]; ++g) {
    for (std::uint64_t l = 0; l < L; ++l) {
      for (std::uint64_t i = g * L + l; i < n; i += stride) {
        out[i] = fn == op_value(op::axpy) ? axpy(a, in0[i], in1[i]) : binary(fn, in0[i], in1[i]);
      }
    }
  }
}

// sp_reduce_S(out, in, n, op, local tmp)
template <class T>
void reduce(const kernel_launch& k) {
  if (!check_shape(k, "sp_reduce", 4, sizeof(T))) return;
  auto* out = k.arg<T*>(0);
  const auto* in = k.arg<const T*>(1);
  const auto n = k.arg<std::uint64_t>(2);
  const auto fn = k.arg<std::uint32_t>(3);
  const std::uint64_t L = k.group_size[0];
  const std::uint64_t stride = k.group_count[0] * L;
  std::vector<T> acc(L);
  for (std::uint64_t g = 0; g < k.group_count[0]; ++g) {
    for (std::uint64_t l = 0; l < L; ++l) {
      acc[l] = identity<T>(fn);
      for (std::uint64_t i = g * L + l; i < n; i += stride) {
        acc[l] = binary(fn, acc[l], in[i]);
      }
    }
    for (std::uint64_t s = L / 2; s > 0; s /= 2) {
      for (std::uint64_t l = 0; l < s; ++l) {
        acc[l] = binary(fn, acc[l], acc[l + s]);
      }
    }
    out[g] = acc[0];
  }
}

// sp_scan_tiles_S(out, in, totals, n, op, exclusive, init, local tmp)
template <class T>
void scan_tiles(const kernel_launch& k) {
  if (!check_shape(k, "sp_scan_tiles", 7, sizeof(T))) return;
  auto* out = k.arg<T*>(0);
  const auto* in = k.arg<const T*>(1);
  auto* totals = k.arg<T*>(2);
  const auto n = k.arg<std::uint64_t>(3);
  const auto fn = k.arg<std::uint32_t>(4);
  const bool exclusive = k.arg<std::uint32_t>(5) != 0;
  const T init = k.arg<T>(6);
  const std::uint64_t L = k.group_size[0];
  const std::uint64_t G = k.group_count[0];
  std::vector<T> v(L);
  std::vector<T> next(L);
  for (std::uint64_t g = 0; g < G; ++g) {
    for (std::uint64_t l = 0; l < L; ++l) {
      const std::uint64_t i = g * L + l;
      v[l] = i < n ? in[i] : identity<T>(fn);
    }
    for (std::uint64_t d = 1; d < L; d *= 2) {
      for (std::uint64_t l = 0; l < L; ++l) {
        next[l] = l >= d ? binary(fn, v[l - d], v[l]) : v[l];
      }
      v.swap(next);
    }
    for (std::uint64_t l = 0; l < L; ++l) {
      const std::uint64_t i = g * L + l;
      if (i < n) {
        out[i] = exclusive ? (l == 0 ? init : binary(fn, init, v[l - 1])) : v[l];
      }
    }
    if (G > 1) {
      totals[g] = v[L - 1];
    }
  }
}

// sp_scan_add_S(data, offsets, n, op)
template <class T>
void scan_add(const kernel_launch& k) {
  if (!check_shape(k, "sp_scan_add", -1, sizeof(T))) return;
  auto* data = k.arg<T*>(0);
  const auto* offsets = k.arg<const T*>(1);
  const auto n = k.arg<std::uint64_t>(2);
  const auto fn = k.arg<std::uint32_t>(3);
  const std::uint64_t L = k.group_size[0];
  for (std::uint64_t g = 0; g < k.group_count[0]; ++g) {
    for (std::uint64_t l = 0; l < L; ++l) {
      const std::uint64_t i = g * L + l;
      if (i < n) {
        data[i] = binary(fn, offsets[g], data[i]);
      }
    }
  }
}

// ---- the table
// -----------------------------------------------------------------------------------

constexpr std::uint8_t ptr = sizeof(void*);
constexpr std::uint8_t u32 = 4;
constexpr std::uint8_t u64 = 8;
constexpr std::uint8_t local = 0;

template <class T>
constexpr std::array<kernel_def, 5> kernels_of(const char* const (&names)[5]) {
  constexpr auto t = static_cast<std::uint8_t>(sizeof(T));
  constexpr bool f64 = std::is_same_v<T, double>;
  return {{
      {names[0], 6, {ptr, ptr, u64, u32, u32, t}, f64, map_unary<T>},
      {names[1], 6, {ptr, ptr, ptr, u64, u32, t}, f64, map_binary<T>},
      {names[2], 5, {ptr, ptr, u64, u32, local}, f64, reduce<T>},
      {names[3], 8, {ptr, ptr, ptr, u64, u32, u32, t, local}, f64, scan_tiles<T>},
      {names[4], 4, {ptr, ptr, u64, u32}, f64, scan_add<T>},
  }};
}

#define SP_ZE_NAMES(S)                                                             \
  {                                                                                \
    "sp_map_unary_" #S, "sp_map_binary_" #S, "sp_reduce_" #S, "sp_scan_tiles_" #S, \
        "sp_scan_add_" #S                                                          \
  }
constexpr const char* f32_names[5] = SP_ZE_NAMES(f32);
constexpr const char* f64_names[5] = SP_ZE_NAMES(f64);
constexpr const char* i32_names[5] = SP_ZE_NAMES(i32);
constexpr const char* i64_names[5] = SP_ZE_NAMES(i64);
constexpr const char* u32_names[5] = SP_ZE_NAMES(u32);
constexpr const char* u64_names[5] = SP_ZE_NAMES(u64);
#undef SP_ZE_NAMES

const std::array<std::array<kernel_def, 5>, 6> all_kernels = {
    kernels_of<float>(f32_names),         kernels_of<double>(f64_names),
    kernels_of<std::int32_t>(i32_names),  kernels_of<std::int64_t>(i64_names),
    kernels_of<std::uint32_t>(u32_names), kernels_of<std::uint64_t>(u64_names),
};

}  // namespace

std::vector<const kernel_def*> module_kernels(const unsigned char* spirv, std::size_t bytes) {
  const std::string_view text(reinterpret_cast<const char*>(spirv), bytes);
  std::vector<const kernel_def*> found;
  for (const auto& per_type : all_kernels) {
    for (const kernel_def& def : per_type) {
      const std::string_view name(def.name);
      // A literal starts a word and ends with a NUL: "sp_map_unary_f32" is not found inside
      // another name that ends with it.
      for (std::size_t at = text.find(name); at != std::string_view::npos;
           at = text.find(name, at + 1)) {
        if (at % 4 == 0 && at + name.size() < text.size() && text[at + name.size()] == '\0') {
          found.push_back(&def);
          break;
        }
      }
    }
  }
  return found;
}

const kernel_def* find_kernel(std::string_view name) noexcept {
  for (const auto& per_type : all_kernels) {
    for (const kernel_def& def : per_type) {
      if (name == def.name) {
        return &def;
      }
    }
  }
  return nullptr;
}

}  // namespace streampool::ze_test_driver
