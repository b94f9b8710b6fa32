#include <limits>

#include "streampool/array.hpp"

namespace streampool::detail {

std::size_t checked_bytes(std::size_t n, std::size_t element_size) {
  STREAMPOOL_EXPECTS(
      n <= std::numeric_limits<std::size_t>::max() / element_size,
      format("array of %zu elements of %zu bytes: the size overflows", n, element_size));
  return n * element_size;
}

void check_sizes(std::size_t a, std::size_t b, const char* what) {
  STREAMPOOL_EXPECTS(a == b, format("%s differ: %zu vs %zu", what, a, b));
}

void check_kernel(const kernel_command& k) {
  const auto fn = static_cast<int>(k.fn);
  const bool unary = k.fn == op::identity || k.fn == op::negate || k.fn == op::abs ||
                     k.fn == op::sqrt || k.fn == op::square;
  const bool binary = k.fn == op::add || k.fn == op::sub || k.fn == op::mul || k.fn == op::div ||
                      k.fn == op::min || k.fn == op::max;
  const bool fold = k.fn == op::add || k.fn == op::mul || k.fn == op::min || k.fn == op::max;
  switch (k.kind) {
    case kernel_kind::map_unary:
      STREAMPOOL_EXPECTS(
          k.has_scalar ? binary : unary,
          format("map: op %d %s a scalar operand", fn, k.has_scalar ? "does not take" : "needs"));
      return;
    case kernel_kind::map_binary:
      STREAMPOOL_EXPECTS(binary || k.fn == op::axpy,
                         format("map: op %d is not a binary operation", fn));
      return;
    case kernel_kind::reduce:
    case kernel_kind::inclusive_scan:
    case kernel_kind::exclusive_scan:
      STREAMPOOL_EXPECTS(fold,
                         format("reduce/scan: op %d cannot fold (use add, mul, min, max)", fn));
      return;
  }
}

void run_on(stream_ref s, const command& c, std::span<buffer* const> reads,
            std::span<buffer* const> writes) {
  for (buffer* b : reads) b->acquire(s, false);
  for (buffer* b : writes) b->acquire(s, true);
  s.submit(c);
  for (buffer* b : reads) b->release(s, false);
  for (buffer* b : writes) b->release(s, true);
}

}  // namespace streampool::detail
