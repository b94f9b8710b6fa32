// streampool: what a stream owns (stream.hpp is the handle). Internal.
//
// Lives in a header, not in stream.cpp, only so that stream_ref's accessors inline into the
// pool's fast path; no program should name it.
#pragma once

#include <memory>

#include "streampool/device.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

struct stream_state {
  device dev;
  std::shared_ptr<timeline> line;  // never null; outlives the stream through tokens
  bool owns_queue;                 // false for stream::wrap: the queue's owner destroys it
};

}  // namespace streampool::detail
