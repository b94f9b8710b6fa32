/* Pure C11 test: the two free paths of the C ABI do not mix (issue 45, finding 3), a stream of
 * another device is refused with memory outside the C layer's records (finding 2, its C half),
 * and the copy and fill helpers of 0 bytes check no pointer (finding 9, its C half).
 *
 * Memory of sp_pool_allocate has a record in the C layer (its streams, its pool); memory of
 * sp_pool_allocate_native and the PyTorch plug-in has none. Freeing the one through the other's
 * free used to succeed: a record outlived its block, and a helper or sp_pool_deallocate through
 * the stale record wrote into, or freed, whichever block the pool handed out next at that
 * address. Each free now refuses the other's memory, naming the pointer and the free to use, and
 * changes nothing. Runs on the host backend with checking on. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static sp_pool_statistics_t statistics(sp_pool_t p) {
  sp_pool_statistics_t st;
  OK(sp_pool_statistics_init(&st));
  OK(sp_pool_get_statistics(p, &st));
  return st;
}

/* Memory of sp_pool_allocate freed with sp_pool_deallocate_native: refused, and the allocation
 * stays whole (the finding: a fill through the stale pointer landed in the next block). */
static void test_registered_memory_native_free(size_t bytes) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* q = NULL;
  void* a = NULL;
  void* next = NULL;
  unsigned char host[64];
  char text[64];
  sp_pool_statistics_t before, after;
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_stream_native(s, &q));
  OK(sp_pool_allocate(p, bytes, s, &a));
  OK(sp_fill(s, a, 0x11, 1, bytes));
  before = statistics(p);

  ptr_text(a, text, sizeof text);
  REFUSED(sp_pool_deallocate_native(p, a, q), text, "sp_pool_deallocate_native",
          "free it with sp_pool_deallocate");
  after = statistics(p);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.deallocations == before.deallocations);

  /* Still a live allocation: nothing else is handed out at its address, the helpers still write
   * it, and the free that matches it works, once. */
  OK(sp_pool_allocate_native(p, bytes, q, &next));
  CHECK(next != a);
  OK(sp_fill(s, a, 0x22, 1, bytes));
  OK(sp_memcpy_to_host(s, host, a, sizeof host));
  CHECK(host[0] == 0x22 && host[63] == 0x22);
  OK(sp_pool_deallocate(p, a, s));
  REFUSED(sp_pool_deallocate(p, a, s), text, NULL, NULL);
  OK(sp_pool_deallocate_native(p, next, q));
  CHECK(statistics(p).live_bytes == 0);

  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* The reverse: memory of sp_pool_allocate_native freed with sp_pool_deallocate (with and without
 * a pool or a stream) is refused, naming the native free; the native free still works. */
static void test_native_memory_registry_free(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* q = NULL;
  void* a = NULL;
  char text[64];
  sp_pool_statistics_t before;
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_stream_native(s, &q));
  OK(sp_pool_allocate_native(p, 1000, q, &a));
  before = statistics(p);

  ptr_text(a, text, sizeof text);
  REFUSED(sp_pool_deallocate(p, a, s), text, "sp_pool_deallocate_native", NULL);
  REFUSED(sp_pool_deallocate(p, a, NULL), text, "sp_pool_deallocate_native", NULL);
  REFUSED(sp_pool_deallocate(NULL, a, NULL), text, NULL, NULL);
  CHECK(statistics(p).live_bytes == before.live_bytes);
  CHECK(statistics(p).deallocations == before.deallocations);

  OK(sp_pool_deallocate_native(p, a, q));
  REFUSED(sp_pool_deallocate_native(p, a, q), text, NULL, NULL); /* the pool sees the double free */
  CHECK(statistics(p).live_bytes == 0);
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* A stream of another device with memory the C layer has no record of: refused naming both
 * devices, and the memory is untouched. */
static void test_other_device_stream(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_device_t other = checking_device_with_delay(0);
  sp_stream_t s = NULL, s_other = NULL;
  sp_pool_t p = NULL;
  void* q = NULL;
  void* a = NULL;
  uint64_t id = 0, other_id = 0;
  char dev_text[64], other_text[64];
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(other, &s_other));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_stream_native(s, &q));
  OK(sp_device_id(d, &id));
  OK(sp_device_id(other, &other_id));
  snprintf(dev_text, sizeof dev_text, "device %llu", (unsigned long long)id);
  snprintf(other_text, sizeof other_text, "device %llu", (unsigned long long)other_id);
  OK(sp_pool_allocate_native(p, 4096, q, &a));

  REFUSED(sp_pool_record_use(p, a, s_other), dev_text, other_text, "sp_pool_record_use");
  REFUSED(sp_pool_deallocate(p, a, s_other), NULL, NULL, NULL);
  CHECK(statistics(p).live_bytes > 0);
  OK(sp_pool_record_use(p, a, s));
  OK(sp_pool_deallocate_native(p, a, q));
  CHECK(statistics(p).live_bytes == 0);

  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s_other));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(other));
  OK(sp_device_destroy(d));
}

/* docs/c-api.md: "A call of 0 bytes is a no-op and checks no pointer." */
static void test_zero_bytes_check_no_pointer(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t s = NULL;
  OK(sp_stream_create(d, &s));
  OK(sp_memcpy_to_device(s, NULL, NULL, 0));
  OK(sp_memcpy_to_host(s, NULL, NULL, 0));
  OK(sp_memcpy_device(s, NULL, NULL, 0));
  OK(sp_fill(s, NULL, 0, 4, 0));
  /* A stream is a handle, not a pointer the call would use: it is still checked. */
  REFUSED(sp_fill(NULL, NULL, 0, 4, 0), "stream", "sp_fill", NULL);
  /* So is the element size, which is not a pointer either. */
  REFUSED(sp_fill(s, NULL, 0, 3, 0), "element_size 3", NULL, NULL);
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

int main(void) {
  test_registered_memory_native_free(256);       /* a small chunk */
  test_registered_memory_native_free(512 << 10); /* a large block */
  test_native_memory_registry_free();
  test_other_device_stream();
  test_zero_bytes_check_no_pointer();
  if (failures != 0) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("c_api free_paths_test: all passed\n");
  return 0;
}
