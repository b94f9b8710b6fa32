// streampool: the PyTorch plug-in's allocation recorder. With STREAMPOOL_TORCH_TRACE=FILE in the
// environment, every allocation and free the plug-in serves is written to FILE in the trace format
// that tools/replay reads (bench/traces/README.md), so that a real program's requests, with its
// own sizes and streams, can be replayed on the host to study the pool's policy.
//
// Recorded: `alloc <id> <size> <stream>` and `free_completed <id> <size> <stream>` (the pool's
// free is stream-ordered, so the request is the completion as the replay sees it); phase lines
// (`# step 3 begin`) from sp_torch_trace_phase. Ids are the smallest free integer, recycled on
// free, like the traces taken from PyTorch's own allocator; stream 0 is the legacy default stream
// (handle 0), other handles are numbered from 1 in order of first appearance.
//
// Off (the variable unset): one load and a branch per call, inlined. On: one mutex per call, for
// study only.
#pragma once

#include <atomic>
#include <cstddef>

namespace streampool::c_api {

/// trace_unknown until the first call reads the environment (so that a program may set the
/// variable after loading the library, before its first allocation), then trace_off or trace_on.
extern std::atomic<int> trace_state;
constexpr int trace_unknown = 0, trace_off = 1, trace_on = 2;
void record_alloc(const void* p, std::size_t size, const void* stream);
void record_free(const void* p);
void record_phase(const char* name);

/// Called after the plug-in allocated p (size bytes, on the native stream handle).
inline void trace_alloc(const void* p, std::size_t size, const void* stream) {
  if (trace_state.load(std::memory_order_acquire) != trace_off) record_alloc(p, size, stream);
}
/// Called before the plug-in frees p.
inline void trace_free(const void* p) {
  if (trace_state.load(std::memory_order_acquire) != trace_off) record_free(p);
}
/// Writes a phase line: `# <name>`.
inline void trace_phase(const char* name) {
  if (trace_state.load(std::memory_order_acquire) != trace_off) record_phase(name);
}

}  // namespace streampool::c_api
