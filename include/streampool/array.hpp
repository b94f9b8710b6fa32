// streampool: device arrays, a small array layer over the pool.
//
// Glossary
//   array<T>  a typed view of a buffer (detail/buffer.hpp): offset and length. Views share the
//             buffer; its memory is freed when the last view dies, from any thread, with tokens:
//             never with a reference to a stream.
//   wrap      an array over memory streampool does not own (a foreign allocation): never freed.
//
// Every operation runs on the calling thread's current stream for the array's device
// (stream.hpp), and first orders that stream after the array's last conflicting use on any
// other stream (a device-side wait), so arrays can be handed between threads and streams freely.
// Upload returns once the host data is staged; download returns once the data is in host memory.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "streampool/detail/buffer.hpp"
#include "streampool/kernel.hpp"

namespace streampool {

template <class T>
concept element = std::same_as<T, float> || std::same_as<T, double> ||
    std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t> ||
    std::same_as<T, std::uint32_t> || std::same_as<T, std::uint64_t>;

template <element T>
constexpr dtype dtype_of() {
  if constexpr (std::same_as<T, float>) return dtype::f32;
  if constexpr (std::same_as<T, double>) return dtype::f64;
  if constexpr (std::same_as<T, std::int32_t>) return dtype::i32;
  if constexpr (std::same_as<T, std::int64_t>) return dtype::i64;
  if constexpr (std::same_as<T, std::uint32_t>) return dtype::u32;
  if constexpr (std::same_as<T, std::uint64_t>) return dtype::u64;
}

/// The element type's name in messages: "float", "int32".
template <element T>
constexpr const char* element_name() {
  if constexpr (std::same_as<T, float>) return "float";
  if constexpr (std::same_as<T, double>) return "double";
  if constexpr (std::same_as<T, std::int32_t>) return "int32";
  if constexpr (std::same_as<T, std::int64_t>) return "int64";
  if constexpr (std::same_as<T, std::uint32_t>) return "uint32";
  if constexpr (std::same_as<T, std::uint64_t>) return "uint64";
}

template <element T>
scalar make_scalar(T v) {
  scalar s{};
  if constexpr (std::same_as<T, float>) s.f32 = v;
  if constexpr (std::same_as<T, double>) s.f64 = v;
  if constexpr (std::same_as<T, std::int32_t>) s.i32 = v;
  if constexpr (std::same_as<T, std::int64_t>) s.i64 = v;
  if constexpr (std::same_as<T, std::uint32_t>) s.u32 = v;
  if constexpr (std::same_as<T, std::uint64_t>) s.u64 = v;
  return s;
}

namespace detail {
/// Bytes for n elements of `element_size`, or logic_error naming both on overflow.
STREAMPOOL_EXPORT std::size_t checked_bytes(std::size_t n, std::size_t element_size);
/// Validates a kernel's op for its kind (so that no backend ever sees a malformed kernel).
STREAMPOOL_EXPORT void check_kernel(const kernel_command& k);
/// Submits one command that reads `reads` and writes `writes`, with ownership hand-over.
STREAMPOOL_EXPORT void run_on(stream_ref s, const command& c, std::span<buffer* const> reads,
                              std::span<buffer* const> writes);
STREAMPOOL_EXPORT void check_sizes(std::size_t a, std::size_t b, const char* what);
}  // namespace detail

/// Moved-from and default-constructed arrays are the same thing: an *empty array*, with no
/// buffer, size 0 and data() == nullptr. Whatever an array of zero elements can do, an empty
/// array does as a no-op (size, empty, data, use_count, view(0, 0), upload/download/fill/copy of
/// zero elements, map and scans over zero elements, destruction, assignment of a new value);
/// a size that is not zero is the ordinary size error. What needs memory or a device
/// (get_device, get_buffer, reduce) throws logic_error "array<T>: used after it was moved from
/// or default-constructed". Moving leaves the source empty; self-move-assignment keeps the array.
template <element T>
class array {
 public:
  using value_type = T;

  array() = default;
  /// n uninitialised elements from `p`, first used on the current stream of p's device.
  array(std::size_t n, const pool& p)
      : buf_(std::make_shared<detail::buffer>(p, current_stream(p.get_device()),
                                              detail::checked_bytes(n, sizeof(T)))),
        size_(n) {}
  /// n uninitialised elements from the device's default pool.
  array(std::size_t n, const device& d) : array(n, d.default_pool()) {}
  /// An upload of `host`.
  array(std::span<const T> host, const device& d) : array(host.size(), d) { upload(host); }
  array(std::span<const T> host, const pool& p) : array(host.size(), p) { upload(host); }

  /// An array over `n` elements at `foreign` on `d`, which streampool never frees.
  static array wrap(T* foreign, std::size_t n, const device& d) {
    array a;
    a.buf_ = std::make_shared<detail::buffer>(d, foreign, detail::checked_bytes(n, sizeof(T)));
    a.size_ = n;
    return a;
  }

  // Copying would silently alias or silently allocate; say which with view() or copy_from().
  array(const array&) = delete;
  array& operator=(const array&) = delete;
  array(array&& other) noexcept
      : buf_(std::move(other.buf_)),
        offset_(std::exchange(other.offset_, 0)),
        size_(std::exchange(other.size_, 0)) {}
  array& operator=(array&& other) noexcept {
    if (this != &other) {
      buf_ = std::move(other.buf_);  // drops this array's old view (its memory, if the last)
      offset_ = std::exchange(other.offset_, 0);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~array() = default;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T* data() const noexcept {
    return buf_ ? static_cast<T*>(buf_->data()) + offset_ : nullptr;
  }
  /// @throws logic_error on an empty (moved-from or default-constructed) array: it has no device
  [[nodiscard]] const device& get_device() const { return get_buffer().get_device(); }
  /// @throws logic_error on an empty (moved-from or default-constructed) array
  [[nodiscard]] detail::buffer& get_buffer() const {
    STREAMPOOL_EXPECTS(buf_ != nullptr, detail::format("array<%s>: used after it was moved from or "
                                                       "default-constructed (it has no memory)",
                                                       element_name<T>()));
    return *buf_;
  }
  /// How many arrays (views) share this array's memory.
  [[nodiscard]] long use_count() const noexcept { return buf_.use_count(); }

  /// Elements [offset, offset+count) of this array, sharing its memory.
  [[nodiscard]] array view(std::size_t offset, std::size_t count) const {
    STREAMPOOL_EXPECTS(offset <= size_ && count <= size_ - offset,
                       detail::format("view [%zu, %zu+%zu) is out of bounds of an array of %zu "
                                      "elements",
                                      offset, offset, count, size_));
    array v;
    v.buf_ = buf_;
    v.offset_ = offset_ + offset;
    v.size_ = count;
    return v;
  }

  void upload(std::span<const T> host) {
    detail::check_sizes(host.size(), size_, "upload: host elements vs array elements");
    if (size_ == 0) return;
    stream_ref s = current_stream(get_device());
    detail::buffer* w = buf_.get();
    detail::run_on(s,
                   command::make(copy_command{data(), host.data(), size_ * sizeof(T), true, false}),
                   {}, {&w, 1});
  }

  void download(std::span<T> host) const {
    detail::check_sizes(host.size(), size_, "download: host elements vs array elements");
    if (size_ == 0) return;
    stream_ref s = current_stream(get_device());
    detail::buffer* r = buf_.get();
    detail::run_on(s,
                   command::make(copy_command{host.data(), data(), size_ * sizeof(T), false, true}),
                   {&r, 1}, {});
    s.synchronize();
  }

  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> v(size_);
    download(v);
    return v;
  }

  void fill(T value) {
    if (size_ == 0) return;
    std::uint64_t pattern = 0;
    std::memcpy(&pattern, &value, sizeof(T));
    detail::buffer* w = buf_.get();
    detail::run_on(current_stream(get_device()),
                   command::make(fill_command{data(), pattern, sizeof(T), size_}), {}, {&w, 1});
  }

  /// Copies `other` (same size, same device) into this array.
  void copy_from(const array& other) {
    detail::check_sizes(other.size_, size_, "copy_from: source vs destination elements");
    if (size_ == 0) return;
    detail::buffer* r = other.buf_.get();
    detail::buffer* w = buf_.get();
    detail::run_on(
        current_stream(get_device()),
        command::make(copy_command{data(), other.data(), size_ * sizeof(T), false, false}), {&r, 1},
        {&w, 1});
  }

 private:
  std::shared_ptr<detail::buffer> buf_;
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
};

namespace detail {
template <element T>
void run_kernel(kernel_kind kind, op fn, array<T>& out, const array<T>& in0,
                std::type_identity_t<const array<T>*> in1, scalar a, bool has_scalar,
                std::size_t n) {
  kernel_command k{
      kind, fn, dtype_of<T>(), in0.data(), in1 != nullptr ? in1->data() : nullptr, out.data(),
      n,    a,  has_scalar};
  check_kernel(k);
  if (n == 0 && kind != kernel_kind::reduce) return;
  buffer* reads[2] = {&in0.get_buffer(), in1 != nullptr ? &in1->get_buffer() : nullptr};
  buffer* w = &out.get_buffer();
  run_on(current_stream(out.get_device()), command::make(k),
         std::span<buffer* const>(reads, in1 != nullptr ? 2 : 1), {&w, 1});
}
}  // namespace detail

/// out[i] = fn(in[i])  (identity, negate, abs, sqrt, square)
template <element T>
void map(array<T>& out, const array<T>& in, op fn) {
  detail::check_sizes(in.size(), out.size(), "map: input vs output elements");
  detail::run_kernel(kernel_kind::map_unary, fn, out, in, nullptr, scalar{}, false, in.size());
}
/// out[i] = fn(in[i], a)  (add, sub, mul, div, min, max with a scalar)
template <element T>
void map(array<T>& out, const array<T>& in, op fn, T a) {
  detail::check_sizes(in.size(), out.size(), "map: input vs output elements");
  detail::run_kernel(kernel_kind::map_unary, fn, out, in, nullptr, make_scalar(a), true, in.size());
}
/// out[i] = fn(x[i], y[i])  (add, sub, mul, div, min, max)
template <element T>
void map(array<T>& out, const array<T>& x, const array<T>& y, op fn) {
  detail::check_sizes(x.size(), y.size(), "map: first vs second input elements");
  detail::check_sizes(x.size(), out.size(), "map: input vs output elements");
  detail::run_kernel(kernel_kind::map_binary, fn, out, x, &y, scalar{}, false, x.size());
}
/// out[i] = a*x[i] + y[i]
template <element T>
void axpy(array<T>& out, T a, const array<T>& x, const array<T>& y) {
  detail::check_sizes(x.size(), y.size(), "axpy: x vs y elements");
  detail::check_sizes(x.size(), out.size(), "axpy: input vs output elements");
  detail::run_kernel(kernel_kind::map_binary, op::axpy, out, x, &y, make_scalar(a), true, x.size());
}
/// fold(fn, in) with fn in {add, mul, min, max}; waits for the result.
template <element T>
T reduce(const array<T>& in, op fn) {
  array<T> result(1, in.get_device());
  detail::run_kernel(kernel_kind::reduce, fn, result, in, nullptr, scalar{}, false, in.size());
  return result.download()[0];
}
/// out[i] = fold(fn, in[0..i]); out may be in.
template <element T>
void inclusive_scan(array<T>& out, const array<T>& in, op fn = op::add) {
  detail::check_sizes(in.size(), out.size(), "inclusive_scan: input vs output elements");
  detail::run_kernel(kernel_kind::inclusive_scan, fn, out, in, nullptr, scalar{}, false, in.size());
}
/// out[i] = fold(fn, init, in[0..i)); out may be in.
template <element T>
void exclusive_scan(array<T>& out, const array<T>& in, T init, op fn = op::add) {
  detail::check_sizes(in.size(), out.size(), "exclusive_scan: input vs output elements");
  detail::run_kernel(kernel_kind::exclusive_scan, fn, out, in, nullptr, make_scalar(init), true,
                     in.size());
}

}  // namespace streampool
