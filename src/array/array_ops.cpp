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

// The array layer's own check, in the user's terms (which function, which op): it runs before
// run_kernel skips empty arrays, so a bad op is refused whatever the size. The rule itself is
// kernel.hpp's valid_for, the one backend::submit applies again to every command.
void check_kernel(const kernel_command& k) {
  if (valid_for(k.kind, k.fn, k.has_scalar)) return;
  switch (k.kind) {
    case kernel_kind::map_unary:
      STREAMPOOL_FAIL(format("map: op %s (%d) %s a scalar operand", op_name(k.fn),
                             static_cast<int>(k.fn), k.has_scalar ? "does not take" : "needs"));
    case kernel_kind::map_binary:
      STREAMPOOL_FAIL(format("map: op %s (%d) is not a binary operation", op_name(k.fn),
                             static_cast<int>(k.fn)));
    case kernel_kind::reduce:
    case kernel_kind::inclusive_scan:
    case kernel_kind::exclusive_scan:
      STREAMPOOL_FAIL(format("reduce/scan: op %s (%d) cannot fold (use add, mul, min, max)",
                             op_name(k.fn), static_cast<int>(k.fn)));
  }
  STREAMPOOL_FAIL(format("kernel kind %d is not one of kernel.hpp's", static_cast<int>(k.kind)));
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
