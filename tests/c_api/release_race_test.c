/* Pure C11 test: sp_native_stream_release racing with calls in flight on the same native handle
 * (issue 45, finding 4; CuPy's pattern: a stream's finalizer runs on one thread while other
 * threads free on the stream). Worker threads allocate, record uses and free on one native handle
 * while another thread releases the handle over and over. Every call must succeed, on the old
 * wrapper or a new one, and every block must go back: a call used to read the released wrapper
 * after it was freed (a heap use-after-free under AddressSanitizer and ThreadSanitizer, which the
 * asan and tsan presets run this test under, with the library itself instrumented), and a free
 * failing that way left its block allocated. The same for pool and stream handles destroyed under
 * calls in flight (finding 5). Also: a release from inside a call in flight on the same handle on
 * the same thread (a reclaim hook) is refused, not deadlocked. */
#include <pthread.h> /* not C11 <threads.h>: ThreadSanitizer does not intercept thrd_create */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { workers = 4, releases = 400, block_bytes = 4096 };

struct shared {
  sp_pool_t pool;
  void* native;
  atomic_int stop;
  atomic_int errors;
  atomic_long calls;
};

static void count_error(struct shared* sh, const char* call, sp_status_t st) {
  /* Only the first few are printed: one failure is enough to fail the test. */
  if (atomic_fetch_add(&sh->errors, 1) < 5)
    fprintf(stderr, "%s -> %s: %s\n", call, sp_status_string(st), sp_last_error_message());
}

static void* worker(void* arg) {
  struct shared* sh = arg;
  void* held[4] = {NULL, NULL, NULL, NULL};
  unsigned i = 0;
  while (!atomic_load(&sh->stop)) {
    void** slot = &held[i++ % 4];
    sp_status_t st;
    if (*slot != NULL) {
      st = sp_pool_deallocate_native(sh->pool, *slot, sh->native);
      if (st != STREAMPOOL_STATUS_SUCCESS) count_error(sh, "sp_pool_deallocate_native", st);
      *slot = NULL;
    }
    st = sp_pool_allocate_native(sh->pool, block_bytes, sh->native, slot);
    if (st != STREAMPOOL_STATUS_SUCCESS) {
      count_error(sh, "sp_pool_allocate_native", st);
      *slot = NULL;
      continue;
    }
    st = sp_pool_record_use_native(sh->pool, *slot, sh->native);
    if (st != STREAMPOOL_STATUS_SUCCESS) count_error(sh, "sp_pool_record_use_native", st);
    atomic_fetch_add(&sh->calls, 3);
  }
  for (i = 0; i < 4; ++i) {
    if (held[i] == NULL) continue;
    sp_status_t st = sp_pool_deallocate_native(sh->pool, held[i], sh->native);
    if (st != STREAMPOOL_STATUS_SUCCESS) count_error(sh, "sp_pool_deallocate_native (end)", st);
  }
  return NULL;
}

static void test_release_against_calls_in_flight(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t owner = NULL;
  struct shared sh;
  pthread_t t[workers];
  sp_pool_statistics_t st;
  int i, released_some = 0;
  OK(sp_stream_create(d, &owner)); /* stands in for the framework's stream */
  OK(sp_device_default_pool(d, &sh.pool));
  OK(sp_stream_native(owner, &sh.native));
  atomic_init(&sh.stop, 0);
  atomic_init(&sh.errors, 0);
  atomic_init(&sh.calls, 0);
  for (i = 0; i < workers; ++i) CHECK(pthread_create(&t[i], NULL, worker, &sh) == 0);
  for (i = 0; i < releases; ++i) {
    size_t n = 99;
    OK(sp_native_stream_release(sh.native, &n));
    CHECK(n <= 1);
    released_some |= n == 1;
    /* Let the workers make a new wrapper before the next release. */
    while (atomic_load(&sh.calls) < (long)(i + 1) * 8 && atomic_load(&sh.errors) == 0) {
    }
  }
  atomic_store(&sh.stop, 1);
  for (i = 0; i < workers; ++i) pthread_join(t[i], NULL);
  CHECK(atomic_load(&sh.errors) == 0);
  CHECK(released_some);

  /* No block was left allocated by a free that failed. */
  OK(sp_pool_statistics_init(&st));
  OK(sp_pool_get_statistics(sh.pool, &st));
  CHECK(st.live_bytes == 0);
  OK(sp_stream_destroy(owner));
  expect_no_violations(d);
  OK(sp_pool_destroy(sh.pool));
  OK(sp_device_destroy(d));
}

/* The same for a pool handle and a stream handle destroyed while other threads are inside calls
 * on them (a finalizer on one thread, work on others): each call either finishes or is refused as
 * made through a destroyed handle; none reads freed memory (the asan and tsan presets check). */
struct handle_race {
  sp_pool_t pool;
  sp_stream_t stream;
  atomic_int started;
  atomic_int errors;
  atomic_int refused;
};

static void* handle_worker(void* arg) {
  struct handle_race* r = arg;
  atomic_fetch_add(&r->started, 1);
  for (;;) {
    void* x = NULL;
    sp_status_t st = sp_pool_allocate(r->pool, 4096, r->stream, &x);
    if (st == STREAMPOOL_STATUS_INVALID_ARGUMENT &&
        strstr(sp_last_error_message(), "was destroyed") != NULL) {
      atomic_fetch_add(&r->refused, 1);
      return NULL; /* the handles are gone: the call was refused, nothing was allocated */
    }
    if (st != STREAMPOOL_STATUS_SUCCESS) {
      if (atomic_fetch_add(&r->errors, 1) < 5)
        fprintf(stderr, "sp_pool_allocate -> %s: %s\n", sp_status_string(st),
                sp_last_error_message());
      return NULL;
    }
    /* The memory outlives its pool and stream handles: a free with neither always works. */
    st = sp_pool_deallocate(NULL, x, NULL);
    if (st != STREAMPOOL_STATUS_SUCCESS && atomic_fetch_add(&r->errors, 1) < 5)
      fprintf(stderr, "sp_pool_deallocate -> %s: %s\n", sp_status_string(st),
              sp_last_error_message());
  }
}

static void test_destroy_against_calls_in_flight(void) {
  int round;
  for (round = 0; round < 20; ++round) {
    sp_device_t d = checking_device_with_delay(0);
    struct handle_race r;
    pthread_t t[workers];
    int i;
    size_t upstream = 1;
    OK(sp_pool_create(d, NULL, &r.pool));
    OK(sp_stream_create(d, &r.stream));
    atomic_init(&r.started, 0);
    atomic_init(&r.errors, 0);
    atomic_init(&r.refused, 0);
    for (i = 0; i < workers; ++i) CHECK(pthread_create(&t[i], NULL, handle_worker, &r) == 0);
    while (atomic_load(&r.started) < workers) {
    }
    OK(round % 2 == 0 ? sp_pool_destroy(r.pool) : sp_stream_destroy(r.stream));
    OK(round % 2 == 0 ? sp_stream_destroy(r.stream) : sp_pool_destroy(r.pool));
    for (i = 0; i < workers; ++i) pthread_join(t[i], NULL);
    CHECK(atomic_load(&r.errors) == 0);
    CHECK(atomic_load(&r.refused) == workers);
    expect_no_violations(d);
    OK(sp_device_upstream_bytes(d, &upstream));
    CHECK(upstream == 0); /* every block went back, and the pool with them */
    OK(sp_device_destroy(d));
  }
}

/* A reclaim hook that releases the native stream the allocation running it is on: the release
 * would have to wait for that very call, so it is refused and changes nothing; the call finishes
 * on the stream. */
struct hook_state {
  void* native;
  sp_status_t status;
  char message[256];
  void* garbage;
  sp_pool_t pool;
};

static void release_in_hook(void* user_data, size_t bytes_needed) {
  struct hook_state* h = user_data;
  (void)bytes_needed;
  h->status = sp_native_stream_release(h->native, NULL);
  snprintf(h->message, sizeof h->message, "%s", sp_last_error_message());
  if (h->garbage != NULL) {
    sp_pool_deallocate_native(h->pool, h->garbage, h->native);
    h->garbage = NULL;
  }
}

static void test_release_inside_a_call_on_the_stream(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t owner = NULL;
  sp_pool_t p = NULL;
  sp_pool_options_t o;
  struct hook_state h;
  void* x = NULL;
  char text[64];
  memset(&h, 0, sizeof h);
  OK(sp_stream_create(d, &owner));
  OK(sp_pool_options_init(&o));
  o.memory_limit = (size_t)4 << 20;
  OK(sp_pool_create(d, &o, &p));
  OK(sp_stream_native(owner, &h.native));
  h.pool = p;
  h.status = STREAMPOOL_STATUS_SUCCESS;
  OK(sp_pool_add_reclaim_hook(p, release_in_hook, &h, NULL));
  OK(sp_pool_allocate_native(p, (size_t)3 << 20, h.native, &h.garbage));
  /* Over the limit: the hook runs inside this call, on this handle. */
  OK(sp_pool_allocate_native(p, (size_t)3 << 20, h.native, &x));
  snprintf(text, sizeof text, "%p", h.native);
  CHECK(h.status == STREAMPOOL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(h.message, text) != NULL && strstr(h.message, "in flight") != NULL);
  CHECK(h.garbage == NULL);
  OK(sp_pool_deallocate_native(p, x, h.native));
  {
    size_t n = 0;
    OK(sp_native_stream_release(h.native, &n)); /* outside the call: fine */
    CHECK(n == 1);
  }
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(owner));
  expect_no_violations(d);
  OK(sp_device_destroy(d));
}

int main(void) {
  test_release_against_calls_in_flight();
  test_destroy_against_calls_in_flight();
  test_release_inside_a_call_on_the_stream();
  if (failures != 0) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("c_api release_race_test: all passed\n");
  return 0;
}
