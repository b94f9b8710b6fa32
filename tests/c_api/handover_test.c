/* Handing memory and streams over to other runtimes (include/streampool.h, "native stream handles"
 * and "handing memory to other runtimes"): a native stream released before its owner destroys it,
 * its handle's value coming back for a new stream, a wrapper released without waiting, and memory
 * handed to a native stream and back. Pure C11 over the host backend with its race detector: an
 * unordered reuse is a violation. */
#include <stdint.h>
#include <string.h>

#include "check.h"

enum { block_bytes = 1 << 20 };

static sp_pool_statistics_t statistics(sp_pool_t p) {
  sp_pool_statistics_t st;
  OK(sp_pool_statistics_init(&st));
  OK(sp_pool_get_statistics(p, &st));
  return st;
}

/* The device's default pool. */
static sp_pool_t default_pool(sp_device_t d) {
  sp_pool_t p = NULL;
  OK(sp_device_default_pool(d, &p));
  return p;
}

/* The end of every test: the pool handle goes, the race detector saw nothing, the device goes. */
static void finish(sp_device_t d, sp_pool_t p) {
  OK(sp_pool_destroy(p));
  expect_no_violations(d);
  OK(sp_device_destroy(d));
}

/* Every byte of [dev, dev + n) reads `value`. */
static int all_bytes(sp_stream_t s, const void* dev, unsigned char value) {
  static unsigned char host[block_bytes];
  OK(sp_memcpy_to_host(s, host, dev, block_bytes));
  for (size_t i = 0; i < block_bytes; ++i)
    if (host[i] != value) return 0;
  return 1;
}

/* A framework's stream (here one streampool made, standing in for a CuPy stream) used through
 * the *_native calls, then released just before its owner destroys it, with its memory freed on
 * it and still busy: another stream reuses that memory behind the release's marker, and the
 * handle's value, used again afterwards, gets a fresh wrapper. */
static void test_native_release(void) {
  sp_device_t d = checking_device_with_delay(200);
  sp_pool_t p = default_pool(d);
  sp_stream_t owner = NULL, other = NULL;
  OK(sp_stream_create(d, &owner));
  OK(sp_stream_create(d, &other));
  void* native = NULL;
  void* other_native = NULL;
  OK(sp_stream_native(owner, &native));
  OK(sp_stream_native(other, &other_native));

  void* x = NULL;
  OK(sp_pool_allocate_native(p, block_bytes, native, &x));
  OK(sp_memory_register(d, x, block_bytes));  // so that the helpers may write it
  OK(sp_fill(owner, x, 0xAA, 1, block_bytes));
  OK(sp_memory_unregister(x));  // waits for the fill
  /* Busy work the pool does not know of, on the native stream: only a marker on the queue, after
   * it, can tell when x is free. */
  void* busy = NULL;
  OK(sp_pool_allocate(p, block_bytes, owner, &busy));
  for (int i = 0; i < 4; ++i) OK(sp_fill(owner, busy, (uint64_t)i, 1, block_bytes));
  OK(sp_pool_deallocate_native(p, x, native));

  size_t released = 99;
  OK(sp_native_stream_release(native, &released));
  CHECK(released == 1);
  OK(sp_native_stream_release(native, &released));  // nothing left to release
  CHECK(released == 0);

  const sp_pool_statistics_t before = statistics(p);
  void* y = NULL;
  OK(sp_pool_allocate_native(p, block_bytes, other_native, &y));
  CHECK(y == x);
  /* A reuse behind a device-side wait while the busy work runs; a ready one if it has finished by
   * now (a loaded machine can stall this thread for longer than the device's delays). Either way
   * the race detector, checked at the end, sees the fill below ordered after the busy work. */
  const sp_pool_statistics_t after = statistics(p);
  CHECK(after.waited_reuses + after.ready_reuses == before.waited_reuses + before.ready_reuses + 1);
  OK(sp_memory_register(d, y, block_bytes));
  OK(sp_memory_acquire_native(d, y, other_native));
  OK(sp_fill(other, y, 0x55, 1, block_bytes));
  CHECK(all_bytes(other, y, 0x55));
  OK(sp_memory_unregister(y));
  OK(sp_pool_deallocate_native(p, y, other_native));

  /* The handle again (in a real program: a new stream that got the old one's value). */
  void* z = NULL;
  OK(sp_pool_allocate_native(p, 4096, native, &z));
  OK(sp_pool_deallocate_native(p, z, native));
  OK(sp_native_stream_release(native, &released));
  CHECK(released == 1);

  OK(sp_pool_deallocate(p, busy, NULL));
  OK(sp_stream_destroy(owner));
  OK(sp_native_stream_release(other_native, NULL));
  OK(sp_stream_destroy(other));
  finish(d, p);
}

/* sp_stream_release: a wrapper of a queue its owner destroys next, ended without waiting. */
static void test_stream_release(void) {
  sp_device_t d = checking_device_with_delay(200);
  sp_pool_t p = default_pool(d);
  sp_stream_t owner = NULL, other = NULL, wrapper = NULL;
  OK(sp_stream_create(d, &owner));
  OK(sp_stream_create(d, &other));
  void* native = NULL;
  OK(sp_stream_native(owner, &native));
  OK(sp_stream_wrap(d, native, &wrapper));
  void* x = NULL;
  OK(sp_pool_allocate(p, block_bytes, wrapper, &x));
  for (int i = 0; i < 4; ++i) OK(sp_fill(wrapper, x, (uint64_t)i, 1, block_bytes));
  OK(sp_fill(wrapper, x, 0xAA, 1, block_bytes));
  OK(sp_pool_deallocate(p, x, wrapper));
  OK(sp_stream_release(wrapper));

  void* y = NULL;
  OK(sp_pool_allocate(p, block_bytes, other, &y));
  CHECK(y == x);
  OK(sp_fill(other, y, 0x55, 1, block_bytes));
  CHECK(all_bytes(other, y, 0x55));
  OK(sp_pool_deallocate(p, y, other));
  OK(sp_stream_destroy(owner));
  OK(sp_stream_destroy(other));

  /* A stream streampool made: released is destroyed (and waits). */
  sp_stream_t own = NULL;
  OK(sp_stream_create(d, &own));
  OK(sp_stream_release(own));
  finish(d, p);
}

/* sp_memory_acquire and sp_memory_synchronize, and their refusals. */
static void test_memory_handover(void) {
  sp_device_t d = checking_device_with_delay(100);
  sp_pool_t p = default_pool(d);
  sp_stream_t a = NULL, b = NULL;
  OK(sp_stream_create(d, &a));
  OK(sp_stream_create(d, &b));
  void* x = NULL;
  OK(sp_pool_allocate(p, block_bytes, a, &x));
  OK(sp_fill(a, x, 0x11, 1, block_bytes));
  OK(sp_memory_acquire(b, (char*)x + 100));  // an interior pointer names the allocation
  OK(sp_memory_synchronize(x));
  static unsigned char host[block_bytes];
  OK(sp_memcpy_to_host(b, host, x, block_bytes));
  CHECK(host[0] == 0x11 && host[block_bytes - 1] == 0x11);

  unsigned char local[16];
  CHECK(sp_memory_acquire(b, local) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(sp_last_error_message(), "sp_memory_acquire") != NULL);
  CHECK(sp_memory_synchronize(local) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(sp_memory_synchronize(NULL) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(sp_memory_acquire(NULL, x) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(sp_native_stream_release(NULL, NULL) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(sp_native_stream_release((void*)2, NULL) == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(sp_last_error_message(), "per-thread") != NULL);
  CHECK(sp_stream_release(NULL) == STREAMPOOL_STATUS_INVALID_ARGUMENT);

  OK(sp_pool_deallocate(p, x, NULL));
  OK(sp_stream_destroy(a));
  OK(sp_stream_destroy(b));
  finish(d, p);
}

int main(void) {
  test_native_release();
  test_stream_release();
  test_memory_handover();
  if (failures != 0) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
