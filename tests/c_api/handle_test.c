/* Pure C11 test: C handles cannot crash (issue 45, finding 5). A double destroy, any call through
 * a destroyed device, stream or pool handle, a handle of another kind and a value that was never a
 * handle give STREAMPOOL_STATUS_INVALID_ARGUMENT with a message naming the handle and its kind,
 * never a crash and never a read of freed memory. On the host backend a native queue that is not
 * one of the device's own (garbage, another device's, a destroyed one) is refused by
 * sp_stream_wrap and the *_native calls, and a wrapper whose queue was destroyed with its stream
 * does not hang in sp_stream_synchronize. Runs on the host backend with checking on. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* "<kind> handle <value as %p>", as the library names a handle. */
static const char* handle_text(const char* kind, const void* h, char* buf, size_t n) {
  snprintf(buf, n, "%s handle %p", kind, h);
  return buf;
}

static sp_device_t checking_device(void) { return checking_device_with_delay(0); }

/* Destroying twice: the second is refused, naming the handle; nothing crashes. */
static void test_double_destroy(void) {
  sp_device_t d = checking_device();
  sp_device_t d2 = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  char text[96];
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));

  OK(sp_stream_destroy(s));
  REFUSED(sp_stream_destroy(s), handle_text("stream", s, text, sizeof text), "was destroyed",
          "sp_stream_destroy");
  REFUSED(sp_stream_release(s), handle_text("stream", s, text, sizeof text), "was destroyed",
          "sp_stream_release");
  OK(sp_pool_destroy(p));
  REFUSED(sp_pool_destroy(p), handle_text("pool", p, text, sizeof text), "was destroyed",
          "sp_pool_destroy");
  OK(sp_device_destroy(d2));
  REFUSED(sp_device_destroy(d2), handle_text("device", d2, text, sizeof text), "was destroyed",
          "sp_device_destroy");
  OK(sp_device_destroy(d));
}

/* Every kind of call through a destroyed handle is refused; the objects behind live handles are
 * untouched. */
static void test_use_after_destroy(void) {
  sp_device_t d = checking_device();
  sp_device_t gone_device = checking_device();
  sp_stream_t s = NULL, gone_stream = NULL;
  sp_pool_t p = NULL, gone_pool = NULL;
  sp_stream_t out_stream = NULL;
  sp_pool_t out_pool = NULL;
  sp_pool_statistics_t st;
  void* ptr = NULL;
  void* native = NULL;
  uint64_t id = 0;
  size_t n = 0;
  char text[96];
  char host[64] = {0};
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(d, &gone_stream));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_pool_create(d, NULL, &gone_pool));
  OK(sp_pool_allocate(p, 64, s, &ptr));
  OK(sp_stream_destroy(gone_stream));
  OK(sp_pool_destroy(gone_pool));
  OK(sp_device_destroy(gone_device));

  /* A destroyed device: no stream, pool, id or anything else through it (sp_stream_create used to
   * read freed memory here). */
  handle_text("device", gone_device, text, sizeof text);
  REFUSED(sp_stream_create(gone_device, &out_stream), text, "was destroyed", "sp_stream_create");
  CHECK(out_stream == NULL);
  REFUSED(sp_pool_create(gone_device, NULL, &out_pool), text, "was destroyed", "sp_pool_create");
  REFUSED(sp_device_default_pool(gone_device, &out_pool), text, "was destroyed", NULL);
  CHECK(out_pool == NULL);
  REFUSED(sp_device_id(gone_device, &id), text, "was destroyed", "sp_device_id");
  REFUSED(sp_device_violation_count(gone_device, &n), text, "was destroyed", NULL);
  REFUSED(sp_memory_register(gone_device, host, sizeof host), text, "was destroyed", NULL);

  /* A destroyed stream, in every position a stream takes. */
  handle_text("stream", gone_stream, text, sizeof text);
  REFUSED(sp_stream_synchronize(gone_stream), text, "was destroyed", "sp_stream_synchronize");
  REFUSED(sp_stream_native(gone_stream, &native), text, "was destroyed", NULL);
  REFUSED(sp_stream_wait_stream(s, gone_stream), text, "was destroyed", NULL);
  REFUSED(sp_stream_wait_stream(gone_stream, s), text, "was destroyed", NULL);
  REFUSED(sp_pool_allocate(p, 64, gone_stream, &native), text, "was destroyed", "sp_pool_allocate");
  REFUSED(sp_pool_deallocate(p, ptr, gone_stream), text, "was destroyed", NULL);
  REFUSED(sp_pool_record_use(p, ptr, gone_stream), text, "was destroyed", NULL);
  REFUSED(sp_fill(gone_stream, ptr, 0, 1, 64), text, "was destroyed", "sp_fill");
  REFUSED(sp_memcpy_to_host(gone_stream, host, ptr, 64), text, "was destroyed", NULL);
  REFUSED(sp_memory_acquire(gone_stream, ptr), text, "was destroyed", NULL);

  /* A destroyed pool handle. */
  handle_text("pool", gone_pool, text, sizeof text);
  REFUSED(sp_pool_allocate(gone_pool, 64, s, &native), text, "was destroyed", "sp_pool_allocate");
  REFUSED(sp_pool_deallocate(gone_pool, ptr, s), text, "was destroyed", NULL);
  REFUSED(sp_pool_allocate_native(gone_pool, 64, NULL, &native), text, "was destroyed", NULL);
  REFUSED(sp_pool_trim(gone_pool, &n), text, "was destroyed", "sp_pool_trim");
  OK(sp_pool_statistics_init(&st));
  REFUSED(sp_pool_get_statistics(gone_pool, &st), text, "was destroyed", NULL);
  REFUSED(sp_pool_set_memory_limit(gone_pool, 1 << 20), text, "was destroyed", NULL);
  REFUSED(sp_pool_record_start(gone_pool, "never-written.trace"), text, "was destroyed", NULL);

  /* The live memory was not touched by any of it. */
  OK(sp_fill(s, ptr, 0x3c, 1, 64));
  OK(sp_memcpy_to_host(s, host, ptr, 64));
  CHECK(host[0] == 0x3c && host[63] == 0x3c);
  OK(sp_pool_deallocate(p, ptr, s));
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* A handle made after a destroy never revives the destroyed one, even where the library reuses
 * the slot behind it. */
static void test_no_revival(void) {
  sp_device_t d = checking_device();
  sp_stream_t old = NULL, fresh = NULL;
  int i;
  char text[96];
  OK(sp_stream_create(d, &old));
  OK(sp_stream_destroy(old));
  for (i = 0; i < 64; ++i) {
    OK(sp_stream_create(d, &fresh));
    CHECK(fresh != old);
    REFUSED(sp_stream_synchronize(old), handle_text("stream", old, text, sizeof text),
            "was destroyed", NULL);
    OK(sp_stream_synchronize(fresh));
    OK(sp_stream_destroy(fresh));
  }
  OK(sp_device_destroy(d));
}

/* A handle of another kind, and values that were never handles. */
static void test_not_a_handle(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* ptr = NULL;
  uint64_t id = 0;
  char text[96];
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));

  /* A stream handle where a pool handle belongs, and the other way round (a binding that mixes
   * up its void pointers). */
  REFUSED(sp_pool_allocate((sp_pool_t)(void*)s, 64, s, &ptr), "stream handle", "not a pool handle",
          NULL);
  REFUSED(sp_stream_synchronize((sp_stream_t)(void*)p), "pool handle", "not a stream handle", NULL);
  REFUSED(sp_device_id((sp_device_t)(void*)s, &id), "stream handle", "not a device handle", NULL);
  /* Garbage. */
  snprintf(text, sizeof text, "%p", (void*)0x1234);
  REFUSED(sp_stream_synchronize((sp_stream_t)(void*)0x1234), text, "not a stream handle", NULL);
  REFUSED(sp_pool_destroy((sp_pool_t)(void*)0x1234), text, "not a pool handle", NULL);
  REFUSED(sp_device_destroy((sp_device_t)(void*)&id), "not a device handle", NULL, NULL);
  CHECK(ptr == NULL);

  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* The host backend knows its queues: a value that is not one of them is refused where a native
 * stream is taken, naming it (it used to be dereferenced). */
static void test_host_native_queues(void) {
  sp_device_t d = checking_device();
  sp_device_t other = checking_device();
  sp_stream_t s = NULL, s_other = NULL, wrapper = NULL;
  sp_pool_t p = NULL;
  void* q_other = NULL;
  void* q_gone = NULL;
  void* ptr = NULL;
  uint64_t id = 0, other_id = 0;
  char text[96];
  char dev_text[64], other_text[64];
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(other, &s_other));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_stream_native(s_other, &q_other));
  OK(sp_device_id(d, &id));
  OK(sp_device_id(other, &other_id));
  snprintf(dev_text, sizeof dev_text, "device %llu", (unsigned long long)id);
  snprintf(other_text, sizeof other_text, "device %llu", (unsigned long long)other_id);

  snprintf(text, sizeof text, "%p", (void*)0x1234);
  REFUSED(sp_stream_wrap(d, (void*)0x1234, &wrapper), text, "sp_stream_wrap", dev_text);
  CHECK(wrapper == NULL);
  REFUSED(sp_pool_allocate_native(p, 64, (void*)0x1234, &ptr), text, "sp_pool_allocate_native",
          NULL);
  CHECK(ptr == NULL);
  REFUSED(sp_pool_deallocate_native(p, (void*)0x1000, (void*)0x1234), text, NULL, NULL);
  REFUSED(sp_memory_acquire_native(d, (void*)0x1000, (void*)0x1234), NULL, NULL, NULL);

  /* Another device's queue: refused naming both devices (item 2 of the issue). */
  snprintf(text, sizeof text, "%p", q_other);
  REFUSED(sp_stream_wrap(d, q_other, &wrapper), text, dev_text, other_text);
  REFUSED(sp_pool_allocate_native(p, 64, q_other, &ptr), text, dev_text, other_text);
  CHECK(wrapper == NULL && ptr == NULL);

  /* A queue destroyed with its stream. */
  {
    sp_stream_t gone = NULL;
    OK(sp_stream_create(d, &gone));
    OK(sp_stream_native(gone, &q_gone));
    OK(sp_stream_destroy(gone));
    snprintf(text, sizeof text, "%p", q_gone);
    REFUSED(sp_stream_wrap(d, q_gone, &wrapper), text, "sp_stream_wrap", NULL);
    CHECK(wrapper == NULL);
  }

  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s_other));
  OK(sp_stream_destroy(s));
  expect_no_violations(d);
  OK(sp_device_destroy(other));
  OK(sp_device_destroy(d));
}

/* A wrapper of a queue whose stream is destroyed first: its work is done (the destroy waited for
 * it), so sp_stream_synchronize returns at once instead of hanging on a queue that is gone; calls
 * that would submit to the queue are refused, naming both handles; the wrapper is destroyed as
 * usual. */
static void test_wrapper_of_destroyed_stream(void) {
  sp_device_t d = checking_device();
  sp_stream_t owner = NULL, wrapper = NULL, s = NULL;
  sp_pool_t p = NULL;
  void* q = NULL;
  void* ptr = NULL;
  void* out = NULL;
  char wrapper_text[96], owner_text[96];
  OK(sp_stream_create(d, &owner));
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_stream_native(owner, &q));
  OK(sp_stream_wrap(d, q, &wrapper));
  OK(sp_pool_allocate(p, 4096, s, &ptr));
  OK(sp_fill(wrapper, ptr, 7, 1, 4096)); /* work through the wrapper, then its queue goes */
  handle_text("stream", wrapper, wrapper_text, sizeof wrapper_text);
  handle_text("stream", owner, owner_text, sizeof owner_text);
  OK(sp_stream_destroy(owner));

  OK(sp_stream_synchronize(wrapper));
  REFUSED(sp_fill(wrapper, ptr, 0, 1, 16), wrapper_text, owner_text, "sp_fill");
  REFUSED(sp_pool_allocate(p, 64, wrapper, &out), wrapper_text, owner_text, NULL);
  REFUSED(sp_stream_wait_stream(wrapper, s), wrapper_text, owner_text, NULL);
  CHECK(out == NULL);
  OK(sp_stream_destroy(wrapper));
  REFUSED(sp_stream_synchronize(wrapper), wrapper_text, "was destroyed", NULL);

  /* The fill through the wrapper landed, and the memory is still the pool's to reuse. */
  {
    unsigned char host[16] = {0};
    OK(sp_memcpy_to_host(s, host, ptr, sizeof host));
    CHECK(host[0] == 7 && host[15] == 7);
  }
  OK(sp_pool_deallocate(p, ptr, NULL));
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* A reclaim hook that destroys the very handles the allocation running it uses (a garbage
 * collector finalising the pool and stream objects): the handles are refused from then on, and
 * the allocation still finishes on them; their teardown waits until it returns. */
struct destroyer {
  sp_pool_t pool;
  sp_stream_t stream;
  void* garbage;
  sp_status_t pool_status, stream_status;
};

static void destroy_in_hook(void* user_data, size_t bytes_needed) {
  struct destroyer* h = user_data;
  (void)bytes_needed;
  if (h->garbage != NULL) {
    OK(sp_pool_deallocate(NULL, h->garbage, NULL));
    h->garbage = NULL;
  }
  h->pool_status = sp_pool_destroy(h->pool);
  h->stream_status = sp_stream_destroy(h->stream);
}

static void test_destroy_inside_a_call(void) {
  sp_device_t d = checking_device();
  sp_pool_options_t o;
  struct destroyer h;
  void* x = NULL;
  char text[96];
  memset(&h, 0, sizeof h);
  OK(sp_pool_options_init(&o));
  o.memory_limit = (size_t)4 << 20;
  OK(sp_pool_create(d, &o, &h.pool));
  OK(sp_stream_create(d, &h.stream));
  OK(sp_pool_add_reclaim_hook(h.pool, destroy_in_hook, &h, NULL));
  OK(sp_pool_allocate(h.pool, (size_t)3 << 20, h.stream, &h.garbage));
  /* Over the limit: the hook frees the garbage and destroys both handles, inside this call. */
  OK(sp_pool_allocate(h.pool, (size_t)3 << 20, h.stream, &x));
  CHECK(h.pool_status == STREAMPOOL_STATUS_SUCCESS && h.stream_status == STREAMPOOL_STATUS_SUCCESS);
  CHECK(x != NULL);
  REFUSED(sp_stream_synchronize(h.stream), handle_text("stream", h.stream, text, sizeof text),
          "was destroyed", NULL);
  REFUSED(sp_pool_trim(h.pool, NULL), handle_text("pool", h.pool, text, sizeof text),
          "was destroyed", NULL);
  OK(sp_pool_deallocate(NULL, x, NULL)); /* the memory outlives both handles */
  expect_no_violations(d);
  OK(sp_device_destroy(d));
}

int main(void) {
  test_double_destroy();
  test_use_after_destroy();
  test_no_revival();
  test_not_a_handle();
  test_host_native_queues();
  test_wrapper_of_destroyed_stream();
  test_destroy_inside_a_call();
  if (failures != 0) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("c_api handle_test: all passed\n");
  return 0;
}
