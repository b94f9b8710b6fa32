// streampool: PyTorch's CUDA allocator interface on streampool's pools (docs/torch.md).
//
// Every method of c10::cuda::CUDACachingAllocator::CUDAAllocator that PyTorch calls: allocation,
// free, record_stream, empty_cache, the memory fraction, PyTorch's statistics, snapshots and
// history, private pools for CUDA graphs and MemPool (graph_pools.hpp, graph_arena.hpp), and
// sharing between processes (ipc.hpp). What it cannot do raises an error that names it, so that
// nothing silently does less than PyTorch's own allocator.
//
// Glossary
//   block       what allocate() or raw_alloc*() handed out: its pointer, the bytes asked for, its
//               usable size, the device and the stream it was allocated on (the plug-in frees on
//               that stream), and its private pool if any.
//   block map   pointer -> block, in shards by pointer (open addressing, block_map.hpp):
//               raw_delete() gets only the pointer, and PyTorch's statistics count the requested
//               size at the free.
//
// Invariants
//   - Every pointer in the block map is live memory of a plug-in pool (sp_torch_malloc_sized) or
//     of a private pool's arena, and is in exactly one shard; a free removes it before the memory
//     goes back.
//   - stats[d] changes only under state d's mutex.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

namespace streampool::torch_native {

/// Installs streampool as PyTorch's CUDA allocator (c10::SetAllocator at priority 1 and the
/// CUDACachingAllocator atomic). Refuses when the allocator in use has live allocations.
/// Never destroyed: PyTorch frees tensors from static destructors.
void install();

}  // namespace streampool::torch_native

extern "C" {
/// install() for C and ctypes (python/streampool/torch.py): 0 once installed (again: 0, nothing
/// changes); 1 when refused or failed, with the error's text in `message` (`capacity` bytes with
/// its NUL, truncated; may be NULL).
__attribute__((visibility("default"))) int sp_torch_native_install(char* message, size_t capacity);
}
