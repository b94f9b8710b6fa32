/* docs/c-api.md quotes this file verbatim; ctest builds and runs it. */
#include <stdio.h>
#include <string.h>

#include "streampool.h"

/* Prints the error and returns from main on failure. */
#define TRY(call)                                                                  \
  do {                                                                             \
    sp_status_t st_ = (call);                                                      \
    if (st_ != STREAMPOOL_STATUS_SUCCESS) {                                        \
      fprintf(stderr, "%s: %s\n", sp_status_string(st_), sp_last_error_message()); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

/* A reclaim hook: a language runtime would run its garbage collector here. */
static void on_pressure(void* user_data, size_t bytes_needed) {
  void** garbage = user_data;
  (void)bytes_needed;
  if (*garbage != NULL) {
    sp_pool_deallocate(NULL, *garbage, NULL); /* frees from inside the allocation */
    *garbage = NULL;
  }
}

int main(void) {
  sp_device_t device;
  sp_stream_t stream, worker;
  sp_pool_t pool;
  sp_pool_options_t options;
  sp_pool_statistics_t stats;
  void* data;
  void* garbage = NULL;
  float in[256], out[256];
  int i;

  /* A GPU if there is one, else the CPU as a device. */
  if (sp_device_create_cuda(0, &device) != STREAMPOOL_STATUS_SUCCESS) {
    TRY(sp_device_create_host(NULL, &device));
  }
  TRY(sp_stream_create(device, &stream));
  TRY(sp_stream_create(device, &worker));

  TRY(sp_pool_options_init(&options));
  options.memory_limit = (size_t)8 << 20;
  TRY(sp_pool_create(device, &options, &pool));
  TRY(sp_pool_add_reclaim_hook(pool, on_pressure, &garbage, NULL));

  /* Upload, then read back. */
  for (i = 0; i < 256; ++i) in[i] = (float)i;
  TRY(sp_pool_allocate(pool, sizeof in, stream, &data));
  TRY(sp_memcpy_to_device(stream, data, in, sizeof in));
  TRY(sp_memcpy_to_host(stream, out, data, sizeof out));
  printf("round trip: %s\n", memcmp(in, out, sizeof in) == 0 ? "exact" : "WRONG");

  /* Hand the memory to another stream: the helper orders `worker` after `stream`. */
  TRY(sp_fill(worker, data, 0, 4, 256));

  /* Destroy the worker stream first; the memory stays valid, and a free with no stream (as a
   * finaliser would do) waits for the worker's fill through a token, never through the stream. */
  TRY(sp_stream_destroy(worker));
  TRY(sp_pool_deallocate(NULL, data, NULL));

  /* Out of memory has its own status and a message with the numbers. */
  if (sp_pool_allocate(pool, (size_t)64 << 20, stream, &data) ==
      STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY) {
    printf("as expected: %s\n", sp_last_error_message());
  }

  /* Under pressure the hook frees garbage, and the allocation succeeds. */
  TRY(sp_pool_allocate(pool, (size_t)6 << 20, stream, &garbage));
  TRY(sp_pool_allocate(pool, (size_t)6 << 20, stream, &data));
  TRY(sp_pool_statistics_init(&stats));
  TRY(sp_pool_get_statistics(pool, &stats));
  printf("reclaim calls: %llu, live bytes: %zu\n", (unsigned long long)stats.reclaim_calls,
         stats.live_bytes);

  /* Any order: the pool handle before its last allocation, the device before everything. */
  TRY(sp_pool_destroy(pool));
  TRY(sp_device_destroy(device));
  TRY(sp_pool_deallocate(NULL, data, stream));
  TRY(sp_stream_destroy(stream));
  return 0;
}
