// streampool C ABI: streams.
#include <string>

#include "handles.hpp"
#include "native_streams.hpp"
#include "streampool/timeline.hpp"

using streampool::c_api::error;
using streampool::c_api::guarded;
using streampool::c_api::require;

extern "C" {

sp_status_t sp_stream_create(sp_device_t device, sp_stream_t* stream) {
  return guarded([&] {
    require(device, "sp_stream_create", "device");
    require(stream, "sp_stream_create", "stream (the output)");
    *stream = new sp_stream_s{streampool::stream(device->dev)};
  });
}

sp_status_t sp_stream_wrap(sp_device_t device, void* native_stream, sp_stream_t* stream) {
  return guarded([&] {
    require(device, "sp_stream_wrap", "device");
    require(stream, "sp_stream_wrap", "stream (the output)");
    // A framework's "current stream" is often 0, CUDA's legacy default stream, wrapped by its
    // other name as the native-handle path does. Other backends have no such stream: refuse
    // rather than guess one, which could order work differently from what the caller means.
    void* queue = streampool::c_api::wrappable_queue(device->dev, native_stream);
    if (queue == nullptr) {
      const std::string& backend = device->dev.get_backend().name();
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  "streampool: sp_stream_wrap: native_stream NULL means the legacy default "
                  "stream, which the " +
                      backend + " backend (device " + std::to_string(device->dev.id()) +
                      ") does not have; use sp_stream_create"};
    }
    *stream = new sp_stream_s{streampool::stream::wrap(device->dev, queue)};
  });
}

sp_status_t sp_stream_destroy(sp_stream_t stream) {
  return guarded([&] {
    require(stream, "sp_stream_destroy", "stream");
    // The registry's wrappers of this queue first (a DLPack export may have made one): they
    // record their last marker while the queue lives.
    (void)streampool::c_api::release_wrappers_of(stream->s.ref().native());
    // Waits for the stream's work and retires its timeline: memory it used carries tokens, never
    // the stream, so it may be freed (with stream NULL) and reused later in any order.
    delete stream;
  });
}

sp_status_t sp_stream_release(sp_stream_t stream) {
  return guarded([&] {
    require(stream, "sp_stream_release", "stream");
    (void)streampool::c_api::release_wrappers_of(stream->s.ref().native());
    // A wrapper records a last marker and lets go of the queue without waiting (its owner
    // destroys it next); memory it used waits for that marker. An owned stream waits.
    stream->s.release();
    delete stream;
  });
}

sp_status_t sp_stream_synchronize(sp_stream_t stream) {
  return guarded([&] {
    require(stream, "sp_stream_synchronize", "stream");
    stream->s.synchronize();
  });
}

sp_status_t sp_stream_wait_stream(sp_stream_t waiter, sp_stream_t other) {
  return guarded([&] {
    require(waiter, "sp_stream_wait_stream", "waiter");
    require(other, "sp_stream_wait_stream", "other");
    if (!(waiter->s.get_device() == other->s.get_device())) {
      throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                  "streampool: sp_stream_wait_stream: the streams belong to different devices (" +
                      std::to_string(waiter->s.get_device().id()) + " and " +
                      std::to_string(other->s.get_device().id()) + ")"};
    }
    waiter->s.ref().wait(other->s.ref().now());
  });
}

sp_status_t sp_stream_native(sp_stream_t stream, void** native_stream) {
  return guarded([&] {
    require(stream, "sp_stream_native", "stream");
    require(native_stream, "sp_stream_native", "native_stream");
    *native_stream = stream->s.ref().native();
  });
}

}  // extern "C"
