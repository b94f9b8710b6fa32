// streampool: the launch plan over kernels.cl (see kernel_plan.hpp).
#include "backend/opencl_c/kernel_plan.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

constexpr std::size_t scratch_alignment = 128;

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) { return a / b + (a % b != 0); }
constexpr std::size_t align_up(std::size_t a) {
  return ceil_div(a, scratch_alignment) * scratch_alignment;
}

void check_shape(const kernel_shape& s) {
  if (s.group_size < 2 || !std::has_single_bit(s.group_size) || s.max_groups == 0) {
    STREAMPOOL_FAIL(
        format("kernel plan: invalid shape (group_size %zu must be a power of two >= 2, "
               "max_groups %zu must be >= 1)",
               s.group_size, s.max_groups));
  }
}

template <class T>
std::uint64_t bits_of(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

/// id(op) of kernels.cl as the scalar argument's bytes.
std::uint64_t identity_bits(op fn, dtype t) {
  switch (t) {
    case dtype::f32:
      return bits_of(fold_identity<float>(fn));
    case dtype::f64:
      return bits_of(fold_identity<double>(fn));
    case dtype::i32:
      return bits_of(fold_identity<std::int32_t>(fn));
    case dtype::i64:
      return bits_of(fold_identity<std::int64_t>(fn));
    case dtype::u32:
      return bits_of(fold_identity<std::uint32_t>(fn));
    case dtype::u64:
      return bits_of(fold_identity<std::uint64_t>(fn));
  }
  return 0;
}

/// The scalar `a` as an argument of the dtype's width (the union holds it from its first byte).
kernel_arg scalar_arg(const scalar& a, dtype t) {
  const std::size_t size = size_of(t);
  const std::uint64_t mask = size == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (size * 8)) - 1;
  return kernel_arg::value(a.bits & mask, size);
}
kernel_arg u64_arg(std::uint64_t v) { return kernel_arg::value(v, 8); }
kernel_arg u32_arg(std::uint32_t v) { return kernel_arg::value(v, 4); }

/// Builds one launch from its arguments.
class launch_builder {
 public:
  launch_builder(kernel_entry e, dtype t, std::size_t groups, std::size_t group_size) {
    l_.entry = e;
    l_.type = t;
    l_.groups = groups;
    l_.group_size = group_size;
  }
  launch_builder& arg(const kernel_arg& a) {
    STREAMPOOL_ASSERT(l_.arg_count < max_kernel_args);
    l_.args[l_.arg_count++] = a;
    return *this;
  }
  launch_builder& ptr(const void* p) { return arg(kernel_arg::device_pointer(p)); }
  [[nodiscard]] kernel_launch done() const { return l_; }

 private:
  kernel_launch l_;
};

/// Element counts of the scan levels: c0 = n, c(j+1) = ceil(cj / L) while cj > L.
std::vector<std::size_t> scan_levels(std::size_t n, std::size_t group_size) {
  std::vector<std::size_t> c{n};
  while (c.back() > group_size) c.push_back(ceil_div(c.back(), group_size));
  return c;
}

std::size_t reduce_groups(std::size_t n, std::size_t group_size) {
  return n <= group_size ? 1 : std::min(ceil_div(n, group_size), group_size);
}

bool is_scan(kernel_kind k) {
  return k == kernel_kind::inclusive_scan || k == kernel_kind::exclusive_scan;
}

}  // namespace

const char* kernel_name(kernel_entry e, dtype t) noexcept {
  // [entry][dtype], in the enums' order.
  static constexpr const char* names[5][6] = {
      {"sp_map_unary_f32", "sp_map_unary_f64", "sp_map_unary_i32", "sp_map_unary_i64",
       "sp_map_unary_u32", "sp_map_unary_u64"},
      {"sp_map_binary_f32", "sp_map_binary_f64", "sp_map_binary_i32", "sp_map_binary_i64",
       "sp_map_binary_u32", "sp_map_binary_u64"},
      {"sp_reduce_f32", "sp_reduce_f64", "sp_reduce_i32", "sp_reduce_i64", "sp_reduce_u32",
       "sp_reduce_u64"},
      {"sp_scan_tiles_f32", "sp_scan_tiles_f64", "sp_scan_tiles_i32", "sp_scan_tiles_i64",
       "sp_scan_tiles_u32", "sp_scan_tiles_u64"},
      {"sp_scan_add_f32", "sp_scan_add_f64", "sp_scan_add_i32", "sp_scan_add_i64",
       "sp_scan_add_u32", "sp_scan_add_u64"},
  };
  const auto ei = static_cast<std::size_t>(e);
  const auto ti = static_cast<std::size_t>(t);
  if (ei >= 5 || ti >= 6) return "unknown";
  return names[ei][ti];
}

std::size_t kernel_scratch_bytes(const kernel_command& k, const kernel_shape& shape) {
  check_shape(shape);
  const std::size_t elem = size_of(k.type);
  if (k.kind == kernel_kind::reduce) {
    const std::size_t g = reduce_groups(k.n, shape.group_size);
    return g > 1 ? align_up(g * elem) : 0;
  }
  if (!is_scan(k.kind) || k.n == 0) return 0;
  std::size_t bytes = 0;
  const std::vector<std::size_t> c = scan_levels(k.n, shape.group_size);
  for (std::size_t j = 1; j < c.size(); ++j) bytes += align_up(c[j] * elem);
  return bytes;
}

kernel_plan make_kernel_plan(const kernel_command& k, const kernel_shape& shape, void* scratch,
                             std::size_t scratch_bytes) {
  const std::size_t need = kernel_scratch_bytes(k, shape);
  if (scratch_bytes < need || (need > 0 && scratch == nullptr)) {
    STREAMPOOL_FAIL(
        format("kernel plan: %s (%s, n=%zu, group size %zu) needs %zu scratch bytes, "
               "got %zu at %s",
               kind_name(k.kind), dtype_name(k.type), k.n, shape.group_size, need, scratch_bytes,
               format_ptr(scratch).c_str()));
  }
  const std::size_t group = shape.group_size;
  const std::size_t elem = size_of(k.type);
  const auto fn = u32_arg(static_cast<std::uint32_t>(k.fn));
  kernel_plan plan;
  plan.scratch_bytes = need;
  switch (k.kind) {
    case kernel_kind::map_unary:
    case kernel_kind::map_binary: {
      if (k.n == 0) return plan;
      const std::size_t groups = std::min(ceil_div(k.n, group), shape.max_groups);
      if (k.kind == kernel_kind::map_unary) {
        plan.launches.push_back(launch_builder(kernel_entry::map_unary, k.type, groups, group)
                                    .ptr(k.out)
                                    .ptr(k.in0)
                                    .arg(u64_arg(k.n))
                                    .arg(fn)
                                    .arg(u32_arg(k.has_scalar ? 1 : 0))
                                    .arg(scalar_arg(k.a, k.type))
                                    .done());
      } else {
        plan.launches.push_back(launch_builder(kernel_entry::map_binary, k.type, groups, group)
                                    .ptr(k.out)
                                    .ptr(k.in0)
                                    .ptr(k.in1)
                                    .arg(u64_arg(k.n))
                                    .arg(fn)
                                    .arg(scalar_arg(k.a, k.type))
                                    .done());
      }
      return plan;
    }
    case kernel_kind::reduce: {
      const std::size_t groups = reduce_groups(k.n, group);
      const kernel_arg tmp = kernel_arg::local_bytes(group * elem);
      if (groups == 1) {
        plan.launches.push_back(launch_builder(kernel_entry::reduce, k.type, 1, group)
                                    .ptr(k.out)
                                    .ptr(k.in0)
                                    .arg(u64_arg(k.n))
                                    .arg(fn)
                                    .arg(tmp)
                                    .done());
        return plan;
      }
      plan.launches.push_back(launch_builder(kernel_entry::reduce, k.type, groups, group)
                                  .ptr(scratch)
                                  .ptr(k.in0)
                                  .arg(u64_arg(k.n))
                                  .arg(fn)
                                  .arg(tmp)
                                  .done());
      plan.launches.push_back(launch_builder(kernel_entry::reduce, k.type, 1, group)
                                  .ptr(k.out)
                                  .ptr(scratch)
                                  .arg(u64_arg(groups))
                                  .arg(fn)
                                  .arg(tmp)
                                  .done());
      return plan;
    }
    case kernel_kind::inclusive_scan:
    case kernel_kind::exclusive_scan: {
      if (k.n == 0) return plan;
      const std::vector<std::size_t> c = scan_levels(k.n, group);
      // data[j]: level j's array (level 0: the output; j >= 1: the totals of level j-1's tiles,
      // carved from the scratch in order).
      std::vector<void*> data(c.size());
      data[0] = k.out;
      auto* next = static_cast<unsigned char*>(scratch);
      for (std::size_t j = 1; j < c.size(); ++j) {
        data[j] = next;
        next += align_up(c[j] * elem);
      }
      const kernel_arg tmp = kernel_arg::local_bytes(group * elem);
      const kernel_arg identity = kernel_arg::value(identity_bits(k.fn, k.type), elem);
      for (std::size_t j = 0; j < c.size(); ++j) {
        const bool top = j + 1 == c.size();
        const std::size_t groups = top ? 1 : c[j + 1];
        const bool level0 = j == 0;
        const bool exclusive = !level0 || k.kind == kernel_kind::exclusive_scan;
        // The top level has one tile and writes no totals; its own array stands in for the
        // pointer (kernels.cl: never touched when G == 1).
        plan.launches.push_back(launch_builder(kernel_entry::scan_tiles, k.type, groups, group)
                                    .ptr(data[j])
                                    .ptr(level0 ? k.in0 : data[j])
                                    .ptr(top ? data[j] : data[j + 1])
                                    .arg(u64_arg(c[j]))
                                    .arg(fn)
                                    .arg(u32_arg(exclusive ? 1 : 0))
                                    .arg(level0 ? scalar_arg(k.a, k.type) : identity)
                                    .arg(tmp)
                                    .done());
      }
      for (std::size_t j = c.size() - 1; j-- > 0;) {
        plan.launches.push_back(launch_builder(kernel_entry::scan_add, k.type, c[j + 1], group)
                                    .ptr(data[j])
                                    .ptr(data[j + 1])
                                    .arg(u64_arg(c[j]))
                                    .arg(fn)
                                    .done());
      }
      return plan;
    }
  }
  return plan;
}

}  // namespace streampool::detail
