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
// Off (the variable unset): one relaxed load per call. On: one mutex per call, for study only.
#pragma once

#include <cstddef>

namespace streampool::c_api {

/// Called after the plug-in allocated p (size bytes, on the native stream handle).
void trace_alloc(const void* p, std::size_t size, const void* stream);
/// Called before the plug-in frees p.
void trace_free(const void* p);
/// Writes a phase line: `# <name>`.
void trace_phase(const char* name);

}  // namespace streampool::c_api
