// streampool: the allocation log of a pool (pool::start_recording, whose handle methods are in
// pool.cpp; trace_recorder.hpp writes the file). The hooks that feed it sit in
// pool_state::allocate and the two deallocate()s (pool_small.cpp), which every allocation path
// passes, arrays' included.
#include <optional>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {

void pool_state::start_recording(const std::string& path, const timeline* zero) {
  STREAMPOOL_EXPECTS(!path.empty(), format("start_recording: pool %llu: the path is empty",
                                           static_cast<unsigned long long>(id_)));
  // The header says what wrote the file; its lines are sentences, which tools/replay reads as
  // comments, not as phases.
  std::string header = format(
      "# streampool allocation trace: pool %llu on device %llu (%s backend), written by "
      "pool::start_recording\n",
      static_cast<unsigned long long>(id_), static_cast<unsigned long long>(device_id_),
      std::string(backend_->name()).c_str());
  header +=
      "# format: <action> <id> <size-bytes> <stream> (bench/traces/README.md); sizes as "
      "requested; a free is stream-ordered, so it is written once, as free_completed\n";
  header += zero != nullptr
                ? format(
                      "# streams: 0 is the default stream named at the start (timeline %llu), "
                      "the others numbered from 1 in order of first appearance\n",
                      static_cast<unsigned long long>(zero->id()))
                : std::string("# streams: numbered from 0 in order of first appearance\n");
  std::optional<std::uint64_t> zero_id;
  if (zero != nullptr) zero_id = zero->id();
  recorder_.start(path, header, zero_id);
}

}  // namespace streampool::detail
