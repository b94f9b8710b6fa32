// streampool C ABI: from handles to payloads and back (handles.hpp, handle_table.hpp).
#include "handles.hpp"

#include "allocation_registry.hpp"
#include "streampool/error.hpp"

namespace streampool::c_api {
namespace {

using streampool::detail::format;

template <class Handle, class Payload>
Handle add(handle_kind k, std::unique_ptr<Payload> payload) {
  const std::uint64_t h = handle_table::of(k).add(payload.get());
  (void)payload.release();  // the table's now, until the handle is destroyed
  return as_handle<Handle>(h);
}

}  // namespace

void refuse_orphan(sp_stream_t h, std::uint64_t owner, const char* function, const char* what) {
  throw error{
      STREAMPOOL_STATUS_INVALID_ARGUMENT,
      format("streampool: %s: %s: stream handle %p wraps the queue of stream handle %p, which was "
             "destroyed (the queue is gone; only sp_stream_synchronize, sp_stream_destroy and "
             "sp_stream_release accept this handle now)",
             function, what, printf_arg(h), printf_arg(as_handle<const void*>(owner)))};
}

pool pool_behind(sp_pool_t h) { return pool_of(h, __func__)->p; }

sp_device_t add_device(std::unique_ptr<device_payload> payload) {
  return add<sp_device_t>(handle_kind::device, std::move(payload));
}

sp_stream_t add_stream(std::unique_ptr<stream_payload> payload) {
  return add<sp_stream_t>(handle_kind::stream, std::move(payload));
}

sp_pool_t add_pool(pool q) {
  auto counter = allocation_registry::instance().live_counter(q.id());
  return add<sp_pool_t>(handle_kind::pool,
                        std::make_unique<pool_payload>(std::move(q), std::move(counter)));
}

}  // namespace streampool::c_api
