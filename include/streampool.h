/* streampool: the C ABI (C11), for language runtimes and programs that are not C++.
 *
 * Glossary
 *   device   sp_device_t: one backend (the CPU as a device, or a CUDA GPU) and its default pool.
 *   stream   sp_stream_t: an in-order queue of device work on one device, created here or wrapped
 *            around a native stream made elsewhere (a CUstream).
 *   pool     sp_pool_t: a handle to a stream-ordered sub-allocating pool. Several handles may
 *            refer to one pool (each sp_device_default_pool call returns a new handle).
 *   token    what freed memory waits for before it is reused: never a stream. This is why every
 *            destruction order below is safe.
 *
 * Conventions
 *   - Every entry point returns an sp_status_t; outputs come last and are written only on success.
 *   - On failure, sp_last_error_message() returns a message for the calling thread that names the
 *     values involved (sizes, limit, live and cached bytes, pointers, ids). It stays valid until
 *     the next failing call on that thread.
 *   - No C++ exception ever crosses this boundary.
 *   - Every handle is created by one *_create call (or sp_device_default_pool / sp_stream_wrap)
 *     and released by exactly one *_destroy call. Handles are thread-safe: any thread may use
 *     them, but destroying a handle while another thread still uses it is the caller's bug.
 *
 * Lifetimes: everything may be destroyed in any order, from any thread.
 *   - Destroying a device handle leaves its streams, pools and memory working.
 *   - Destroying a stream waits for the work submitted to it, then destroys its queue. Memory it
 *     used stays valid; free it later with stream NULL (or another live stream).
 *   - Destroying a pool handle that still has live memory is allowed: the pool stays alive until
 *     its last allocation is freed (pass pool NULL to sp_pool_deallocate), then goes back.
 *
 * The stream-ordering contract (see include/streampool/pool.hpp for the full form):
 *   - sp_pool_allocate(pool, n, s): work submitted to s after the call may use the memory at once.
 *     Memory is aligned to at least 256 bytes. Size 0 gives a unique pointer (like malloc(0)),
 *     freed like any other.
 *   - sp_pool_deallocate(pool, p, s): p is reused only after all work submitted so far to s, to
 *     the stream it was allocated on, and to every stream named by sp_pool_record_use or used by
 *     the copy/fill helpers below has finished. It never blocks and never calls user code.
 *   - The copy/fill helpers order themselves after earlier helper work on other streams that
 *     touched the same allocation (a device-side wait), so memory may be handed between streams
 *     freely through them.
 */
#ifndef STREAMPOOL_H
#define STREAMPOOL_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SP_API __declspec(dllimport)
#else
#define SP_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define STREAMPOOL_VERSION_MAJOR 0
#define STREAMPOOL_VERSION_MINOR 1
#define STREAMPOOL_VERSION_PATCH 0

/* ---- status ---------------------------------------------------------------------------------- */

typedef enum sp_status_e {
  STREAMPOOL_STATUS_SUCCESS = 0,
  /** A precondition was broken (NULL handle, size overflow, double free, foreign pointer, wrong
   *  device, out of bounds). Nothing changed. */
  STREAMPOOL_STATUS_INVALID_ARGUMENT = 1,
  /** The device (or the pool's memory limit) refused, even after trimming the cache and running
   *  every reclaim hook. The message names the request, the limit, live and cached bytes. */
  STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY = 2,
  /** The requested backend is not present (no CUDA driver, no such device). */
  STREAMPOOL_STATUS_NOT_AVAILABLE = 3,
  /** A GPU runtime reported an error; the message names the backend and its native code. */
  STREAMPOOL_STATUS_BACKEND_ERROR = 4,
  /** Host memory ran out, or an unexpected internal failure. */
  STREAMPOOL_STATUS_INTERNAL = 5
} sp_status_t;

/** The calling thread's message for its last failing call ("" if none). Never NULL. */
SP_API const char* sp_last_error_message(void);
/** A constant name for a status ("STREAMPOOL_STATUS_SUCCESS", ...). Never NULL. */
SP_API const char* sp_status_string(sp_status_t status);

/** The library's version (compare with the STREAMPOOL_VERSION_* macros of this header). */
SP_API sp_status_t sp_get_version(int* major, int* minor, int* patch);

/* ---- handles --------------------------------------------------------------------------------- */

typedef struct sp_device_s* sp_device_t;
typedef struct sp_stream_s* sp_stream_t;
typedef struct sp_pool_s* sp_pool_t;

/* ---- devices --------------------------------------------------------------------------------- */

/** Options of the host backend (the CPU as a device). Initialise with sp_host_options_init. */
typedef struct sp_host_options_s {
  int checking;          /**< 1: race detector + poisoning (use in tests) */
  unsigned max_delay_us; /**< random delay before each command; 0 = none */
  uint64_t seed;         /**< delay injection seed */
  size_t total_memory;   /**< reported device size; 0 = the machine's RAM */
  size_t granularity;    /**< upstream allocation granularity (power of two >= 64 KiB) */
  int device_wait;       /**< 0: behave like a backend without device-side waits */
  int virtual_memory;    /**< 0: behave like a backend without virtual memory */
} sp_host_options_t;

SP_API sp_status_t sp_host_options_init(sp_host_options_t* options);

/** A new host device. options may be NULL (defaults: checking off). */
SP_API sp_status_t sp_device_create_host(const sp_host_options_t* options, sp_device_t* device);
/** A new device for CUDA GPU `ordinal`. STREAMPOOL_STATUS_NOT_AVAILABLE without a driver, without
 *  that GPU, or in a build without the CUDA backend. */
SP_API sp_status_t sp_device_create_cuda(int ordinal, sp_device_t* device);
/** Number of CUDA GPUs (0 without a driver or CUDA backend). */
SP_API sp_status_t sp_cuda_device_count(int* count);
SP_API sp_status_t sp_device_destroy(sp_device_t device);
/** A process-unique id, as used in error messages. */
SP_API sp_status_t sp_device_id(sp_device_t device, uint64_t* id);
/** The backend's name ("host", "cuda"); valid while the device's state lives. */
SP_API sp_status_t sp_device_backend_name(sp_device_t device, const char** name);
/** Host backend in checking mode: how many ordering violations were seen (0 for other backends),
 *  and the text of one (the string stays valid until the next call on this thread). */
SP_API sp_status_t sp_device_violation_count(sp_device_t device, size_t* count);
SP_API sp_status_t sp_device_violation_message(sp_device_t device, size_t index, const char** text);
/** Host backend: bytes currently allocated from the upstream (for leak checks). */
SP_API sp_status_t sp_device_upstream_bytes(sp_device_t device, size_t* bytes);

/* ---- streams --------------------------------------------------------------------------------- */

SP_API sp_status_t sp_stream_create(sp_device_t device, sp_stream_t* stream);
/** Wraps a native stream made elsewhere (a CUstream / cudaStream_t on the same device).
 *  streampool never destroys it; sp_stream_destroy only waits for work submitted so far.
 *  native_stream NULL is the legacy default stream (CUDA's stream 0), wrapped by its other name
 *  CU_STREAM_LEGACY (so sp_stream_native returns (void*)1). The host backend has no legacy
 *  default stream: NULL there gives STREAMPOOL_STATUS_INVALID_ARGUMENT (use sp_stream_create). */
SP_API sp_status_t sp_stream_wrap(sp_device_t device, void* native_stream, sp_stream_t* stream);
/** Waits for the stream's work, retires it and (unless wrapped) destroys its queue. */
SP_API sp_status_t sp_stream_destroy(sp_stream_t stream);
/** Blocks until all work submitted so far has completed. */
SP_API sp_status_t sp_stream_synchronize(sp_stream_t stream);
/** Makes `waiter` wait, on the device, for all work submitted so far to `other`. */
SP_API sp_status_t sp_stream_wait_stream(sp_stream_t waiter, sp_stream_t other);
/** The native queue (a CUstream for CUDA). */
SP_API sp_status_t sp_stream_native(sp_stream_t stream, void** native_stream);

/* ---- pools ----------------------------------------------------------------------------------- */

/** Options of a new pool. Initialise with sp_pool_options_init. */
typedef struct sp_pool_options_s {
  size_t memory_limit; /**< bytes; 0 = STREAMPOOL_MEMORY_LIMIT from the environment, else none */
  size_t small_max;    /**< requests up to this size come from slabs by size class */
  size_t stream_cache_bytes; /**< per stream and size class, before spilling to shared lists */
  int poison_on_free;        /**< 1: fill freed memory with 0xDB, stream-ordered */
  int virtual_memory;        /**< 1: large blocks on virtual memory where the device has it */
  size_t release_threshold;  /**< virtual memory: keep at most this much (SIZE_MAX: keep all) */
} sp_pool_options_t;

SP_API sp_status_t sp_pool_options_init(sp_pool_options_t* options);

/** A new handle to the device's default pool (one pool per device, created on first use). */
SP_API sp_status_t sp_device_default_pool(sp_device_t device, sp_pool_t* pool);
/** A new pool on `device`. options may be NULL. */
SP_API sp_status_t sp_pool_create(sp_device_t device, const sp_pool_options_t* options,
                                  sp_pool_t* pool);
/** Releases this handle, and removes the reclaim hooks added through it. Live memory stays valid;
 *  the pool goes back once every handle is gone and its last allocation is freed. */
SP_API sp_status_t sp_pool_destroy(sp_pool_t pool);

/** Stream-ordered allocation of `size` bytes (0 allowed) for first use on `stream` (of the pool's
 *  device), aligned to at least 256 bytes. STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY after trimming
 *  and reclaim hooks. */
SP_API sp_status_t sp_pool_allocate(sp_pool_t pool, size_t size, sp_stream_t stream, void** ptr);
/** Frees ptr (see the contract at the top). pool may be NULL: the pool that allocated ptr, even
 *  after every handle to it was destroyed. stream may be NULL: free after the work of the streams
 *  that used ptr, needing no live stream (for finalisers). Never blocks on the device. */
SP_API sp_status_t sp_pool_deallocate(sp_pool_t pool, void* ptr, sp_stream_t stream);
/** Declares that work on `stream` uses ptr: a later free (and the helpers) also wait for all work
 *  submitted to `stream` up to that free, also work submitted after this call. pool may be NULL. */
SP_API sp_status_t sp_pool_record_use(sp_pool_t pool, void* ptr, sp_stream_t stream);
/** Usable size of the live block at ptr (>= the requested size). */
SP_API sp_status_t sp_pool_block_size(sp_pool_t pool, const void* ptr, size_t* size);

typedef struct sp_pool_statistics_s {
  size_t live_bytes;     /**< handed out now (block sizes) */
  size_t cached_bytes;   /**< free in the pool */
  size_t reserved_bytes; /**< held from the upstream */
  size_t peak_live_bytes;
  size_t peak_reserved_bytes;
  size_t memory_limit; /**< 0 = none */
  uint64_t allocations;
  uint64_t deallocations;
  uint64_t fresh_allocations;
  uint64_t same_stream_reuses;
  uint64_t ready_reuses;
  uint64_t waited_reuses;
  uint64_t device_waits;
  uint64_t host_waits;
  uint64_t upstream_allocations;
  uint64_t upstream_deallocations;
  uint64_t reclaim_calls;
  size_t stream_caches;       /**< streams with a cache in this pool */
  uint64_t upstream_reserves; /**< virtual address ranges reserved */
  uint64_t upstream_creates;  /**< physical granules created */
  uint64_t upstream_releases; /**< physical granules given back */
  uint64_t upstream_maps;     /**< granules mapped */
  uint64_t upstream_unmaps;   /**< granules unmapped */
  uint64_t upstream_calls;    /**< all upstream calls above and the allocations/deallocations */
} sp_pool_statistics_t;

SP_API sp_status_t sp_pool_get_statistics(sp_pool_t pool, sp_pool_statistics_t* statistics);
/** 0 = no limit. Takes effect for later growth; never frees live memory. */
SP_API sp_status_t sp_pool_set_memory_limit(sp_pool_t pool, size_t bytes);
SP_API sp_status_t sp_pool_get_memory_limit(sp_pool_t pool, size_t* bytes);
/** Returns cached memory whose work is complete to the upstream. Never blocks on the device. */
SP_API sp_status_t sp_pool_trim(sp_pool_t pool, size_t* released_bytes);

/** Called when an allocation would fail, with no pool lock held, on the allocating thread. It may
 *  free memory (run a garbage collector that calls sp_pool_deallocate). An allocation made inside
 *  a hook that fails again does not run the hooks recursively. */
typedef void (*sp_reclaim_fn)(void* user_data, size_t bytes_needed);
/** `id` (may be NULL) is for sp_pool_remove_reclaim_hook. The hook stays registered until removed
 *  or until this pool handle is destroyed. */
SP_API sp_status_t sp_pool_add_reclaim_hook(sp_pool_t pool, sp_reclaim_fn fn, void* user_data,
                                            uint64_t* id);
/** Removal does not wait for a call already running on another thread. */
SP_API sp_status_t sp_pool_remove_reclaim_hook(sp_pool_t pool, uint64_t id);

/* ---- native stream handles ----------------------------------------------------------------- */

/* For frameworks that hand over their own stream on every call (a CUstream; on CUDA also 0, the
 * legacy default stream, and CU_STREAM_PER_THREAD). Each native stream is wrapped once, on first
 * use, and the wrapper found again through a per-thread cache: no handle to create and no lock
 * per call. These calls bypass the C layer's allocation records: the pool checks the pointers
 * itself, and the caller keeps `pool` alive while its memory is live. The copy and fill helpers
 * do not know this memory either: register it with sp_memory_register to use them on it. A native
 * stream must not be destroyed while memory it used may still be reused behind it, unless its
 * handle is never used again (streampool records markers on it when another stream must wait for
 * it). */

SP_API sp_status_t sp_pool_allocate_native(sp_pool_t pool, size_t size, void* native_stream,
                                           void** ptr);
/** Frees ptr after the work submitted so far to native_stream (and recorded uses). */
SP_API sp_status_t sp_pool_deallocate_native(sp_pool_t pool, void* ptr, void* native_stream);
/** Like sp_pool_record_use, for a native stream. */
SP_API sp_status_t sp_pool_record_use_native(sp_pool_t pool, void* ptr, void* native_stream);

/* ---- the PyTorch plug-in (docs/torch.md; Python: streampool.torch.enable()) ------------------ */

/** torch.cuda.memory.CUDAPluggableAllocator's alloc: one pool per CUDA device (its default pool).
 *  Throws a C++ exception naming the numbers when out of memory (PyTorch turns it into a Python
 *  exception); never returns NULL. */
SP_API void* sp_torch_malloc(size_t size, int device, void* stream);
/** CUDAPluggableAllocator's free. Never throws; a bad pointer is reported on stderr. */
SP_API void sp_torch_free(void* ptr, size_t size, int device, void* stream);
/** tensor.record_stream(stream) for memory of the plug-in: reuse waits for the stream's work. */
SP_API void sp_torch_record_stream(void* ptr, void* stream);
/** torch.cuda.empty_cache(): waits for the plug-in's streams, then gives every plug-in pool's
 *  free memory back (trim). */
SP_API void sp_torch_empty_cache(void);
/** Sets PyTorch's record-stream and empty_cache hooks on its current CUDAPluggableAllocator.
 *  `installed`: 1 = record_stream, 2 = empty_cache, or both. NOT_AVAILABLE when this PyTorch does
 *  not export what is needed (then call sp_torch_set_conservative(1)). */
SP_API sp_status_t sp_torch_install_hooks(const char* torch_lib_dir, int* installed);
/** With STREAMPOOL_TORCH_TRACE=FILE set, the plug-in writes every allocation and free to FILE in
 *  tools/replay's trace format; this writes a phase line "# name" there (no-op otherwise). */
SP_API void sp_torch_trace_phase(const char* name);
/** 1: every free waits for the work of every stream the plug-in knows (safe without the
 *  record-stream hook, at the price of waits for streams that never used the memory). */
SP_API sp_status_t sp_torch_set_conservative(int on);
/** A new handle to the plug-in's pool on CUDA device `device` (for statistics and trim). */
SP_API sp_status_t sp_torch_pool(int device, sp_pool_t* pool);

/* ---- copy and fill helpers ------------------------------------------------------------------- */

/* Every device range a helper is given must lie inside memory the C layer knows: a live
 * allocation of sp_pool_allocate, or a range registered with sp_memory_register. Anything else (a
 * freed pointer, even one whose memory is still mapped; a range that runs past the end; memory of
 * sp_pool_allocate_native or the PyTorch plug-in; a foreign pointer) gives
 * STREAMPOOL_STATUS_INVALID_ARGUMENT, with the function, the pointer and the byte count in the
 * message, and nothing is submitted. A device copy between overlapping ranges is refused too.
 * 0 bytes is a no-op and checks no pointer. Host pointers (src of sp_memcpy_to_device, dst of
 * sp_memcpy_to_host) are not checked: they must be valid for `bytes`.
 * Cost: one lookup in an ordered map under one mutex per device pointer, on these helpers only
 * (sp_pool_allocate and sp_pool_deallocate already keep the map; the *_native calls bypass it). */

/** Makes [ptr, ptr + bytes), memory of `device` made elsewhere (cuMemAlloc, a framework's tensor,
 *  memory of sp_pool_allocate_native), usable by the helpers below, which then order it across
 *  streams as they do pool allocations, from registration on (earlier work on it is the caller's
 *  to order). streampool takes no ownership. STREAMPOOL_STATUS_INVALID_ARGUMENT for a NULL
 *  device or ptr, 0 bytes, a range that wraps around, or a range that overlaps a registered range
 *  or a live allocation of sp_pool_allocate (the message names both ranges). */
SP_API sp_status_t sp_memory_register(sp_device_t device, void* ptr, size_t bytes);
/** Forgets the range registered at `ptr` (its start), after waiting (on the host) for the helper
 *  work queued on it, so the caller may free the memory when this returns. The caller must not
 *  use the range in helpers meanwhile. STREAMPOOL_STATUS_INVALID_ARGUMENT when no registered
 *  range starts at ptr. */
SP_API sp_status_t sp_memory_unregister(void* ptr);

/** Host -> device: returns once `src` has been staged (it may be reused at once). */
SP_API sp_status_t sp_memcpy_to_device(sp_stream_t stream, void* dst, const void* src,
                                       size_t bytes);
/** Device -> host: returns once the data is in `dst` (synchronous). */
SP_API sp_status_t sp_memcpy_to_host(sp_stream_t stream, void* dst, const void* src, size_t bytes);
/** Device -> device, asynchronous. */
SP_API sp_status_t sp_memcpy_device(sp_stream_t stream, void* dst, const void* src, size_t bytes);
/** Fills `count` elements of `element_size` (1, 2, 4 or 8) bytes with the low bytes of `pattern`,
 *  asynchronously. */
SP_API sp_status_t sp_fill(sp_stream_t stream, void* dst, uint64_t pattern, size_t element_size,
                           size_t count);

#ifdef __cplusplus
}
#endif

#endif /* STREAMPOOL_H */
