/* Pure C11 test of include/streampool.h: every destruction order, errors and their messages, the
 * origin report's reproducer, and a reclaim hook that frees memory from inside an allocation.
 * Runs on the host backend with checking on (its race detector sees any unordered reuse). */
#include <pthread.h> /* not C11 <threads.h>: ThreadSanitizer does not intercept thrd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "streampool.h"

/* A call that must fail with `status` and a last-error message containing `needle`. */
#define FAILS(call, status, needle)                                                               \
  do {                                                                                            \
    sp_status_t fails_status_ = (call);                                                           \
    if (fails_status_ != (status) || strstr(sp_last_error_message(), (needle)) == NULL) {         \
      fprintf(stderr, "%s:%d: %s -> %s '%s', expected %s with '%s'\n", __FILE__, __LINE__, #call, \
              sp_status_string(fails_status_), sp_last_error_message(), sp_status_string(status), \
              (needle));                                                                          \
      ++failures;                                                                                 \
    }                                                                                             \
  } while (0)

static sp_device_t checking_device(void) { return checking_device_with_delay(20); }

static sp_pool_t limited_pool(sp_device_t d, size_t limit) {
  sp_pool_options_t po;
  sp_pool_t p = NULL;
  OK(sp_pool_options_init(&po));
  po.memory_limit = limit;
  OK(sp_pool_create(d, &po, &p));
  return p;
}

/* ---- basics and errors ----------------------------------------------------------------------- */

static void test_version_and_status(void) {
  int major = -1, minor = -1, patch = -1;
  OK(sp_get_version(&major, &minor, &patch));
  CHECK(major == STREAMPOOL_VERSION_MAJOR && minor == STREAMPOOL_VERSION_MINOR &&
        patch == STREAMPOOL_VERSION_PATCH);
  CHECK(strcmp(sp_status_string(STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY),
               "STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY") == 0);
  CHECK(sp_last_error_message() != NULL);
}

static void test_errors(void) {
  sp_device_t d = checking_device();
  sp_device_t other = checking_device();
  sp_stream_t s = NULL, foreign = NULL;
  sp_pool_t p = limited_pool(d, (size_t)4 << 20);
  void* ptr = NULL;
  size_t size = 0;
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(other, &foreign));

  FAILS(sp_stream_create(NULL, &s), STREAMPOOL_STATUS_INVALID_ARGUMENT, "device is NULL");
  FAILS(sp_pool_allocate(p, 64, NULL, &ptr), STREAMPOOL_STATUS_INVALID_ARGUMENT, "stream is NULL");
  /* Size 0 is valid, like malloc(0): a unique pointer, freed like any other. */
  {
    void* z1 = NULL;
    void* z2 = NULL;
    OK(sp_pool_allocate(p, 0, s, &z1));
    OK(sp_pool_allocate(p, 0, s, &z2));
    CHECK(z1 != NULL && z2 != NULL && z1 != z2);
    OK(sp_pool_deallocate(p, z1, s));
    OK(sp_pool_deallocate(p, z2, s));
  }
  FAILS(sp_pool_allocate(p, SIZE_MAX, s, &ptr), STREAMPOOL_STATUS_INVALID_ARGUMENT, "overflowed");
  /* A stream of another device. */
  FAILS(sp_pool_allocate(p, 64, foreign, &ptr), STREAMPOOL_STATUS_INVALID_ARGUMENT, "device");

  /* Out of memory has its own code, and the message carries the numbers. */
  ptr = NULL;
  FAILS(sp_pool_allocate(p, (size_t)8 << 20, s, &ptr), STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY,
        "requested 8388608 bytes");
  CHECK(strstr(sp_last_error_message(), "limit 4194304 bytes") != NULL);
  CHECK(strstr(sp_last_error_message(), "live 0 bytes") != NULL);
  CHECK(ptr == NULL); /* outputs are written only on success */

  OK(sp_pool_allocate(p, 1000, s, &ptr));
  OK(sp_pool_block_size(p, ptr, &size));
  CHECK(size >= 1000);
  OK(sp_pool_block_size(NULL, ptr, &size));
  /* Out-of-bounds helper: names the sizes. */
  {
    char host[2048] = {0};
    FAILS(sp_memcpy_to_device(s, ptr, host, 2000), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "2000 bytes at offset 0 overrun the allocation");
    CHECK(strstr(sp_last_error_message(), "of 1000 bytes") != NULL);
    FAILS(sp_fill(s, ptr, 0, 3, 10), STREAMPOOL_STATUS_INVALID_ARGUMENT, "element_size 3");
  }
  /* Freeing on a stream of another device, or through another pool's handle. */
  FAILS(sp_pool_deallocate(p, ptr, foreign), STREAMPOOL_STATUS_INVALID_ARGUMENT, "device");
  {
    sp_pool_t q = limited_pool(d, 0);
    FAILS(sp_pool_deallocate(q, ptr, s), STREAMPOOL_STATUS_INVALID_ARGUMENT, "another pool");
    OK(sp_pool_destroy(q));
  }
  OK(sp_pool_deallocate(p, ptr, s));
  /* Double free: through the pool (its message), and with no pool (the C layer's). */
  FAILS(sp_pool_deallocate(p, ptr, s), STREAMPOOL_STATUS_INVALID_ARGUMENT, "double free");
  FAILS(sp_pool_deallocate(NULL, ptr, NULL), STREAMPOOL_STATUS_INVALID_ARGUMENT,
        "not a live allocation");
  {
    int local = 0;
    FAILS(sp_pool_deallocate(p, &local, NULL), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "was not allocated by pool");
  }
  OK(sp_pool_deallocate(p, NULL, NULL)); /* like free(NULL) */
  FAILS(sp_pool_remove_reclaim_hook(p, 12345), STREAMPOOL_STATUS_INVALID_ARGUMENT, "12345");

  /* The message is per thread and survives successful calls. */
  FAILS(sp_pool_allocate(p, SIZE_MAX, s, &ptr), STREAMPOOL_STATUS_INVALID_ARGUMENT, "overflowed");
  OK(sp_stream_synchronize(s));
  CHECK(strstr(sp_last_error_message(), "overflowed") != NULL);

  /* Every GPU runtime: a device where the runtime and one device are here (OpenCL on PoCL in CI),
   * else NOT_AVAILABLE naming why; an ordinal past the last is NOT_AVAILABLE either way. */
  {
    typedef sp_status_t (*create_fn)(int, sp_device_t*);
    typedef sp_status_t (*count_fn)(int*);
    const struct {
      const char* name;
      create_fn create;
      count_fn count;
      sp_backend_kind_t kind;
    } runtimes[] = {{"cuda", sp_device_create_cuda, sp_cuda_device_count, SP_BACKEND_CUDA},
                    {"opencl", sp_device_create_opencl, sp_opencl_device_count, SP_BACKEND_OPENCL},
                    {"level_zero", sp_device_create_level_zero, sp_level_zero_device_count,
                     SP_BACKEND_LEVEL_ZERO}};
    for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; ++i) {
      sp_device_t gpu = NULL;
      int n = -1;
      sp_status_t st = runtimes[i].create(0, &gpu);
      OK(runtimes[i].count(&n));
      CHECK(st == STREAMPOOL_STATUS_SUCCESS || st == STREAMPOOL_STATUS_NOT_AVAILABLE);
      if (st == STREAMPOOL_STATUS_SUCCESS) {
        const char* name = NULL;
        CHECK(n >= 1);
        sp_backend_kind_t kind = SP_BACKEND_OTHER;
        OK(sp_device_backend_name(gpu, &name));
        CHECK(strcmp(name, runtimes[i].name) == 0);
        OK(sp_device_backend_kind(gpu, &kind));
        CHECK(kind == runtimes[i].kind);
        OK(sp_device_destroy(gpu));
      } else {
        CHECK(n == 0);
        CHECK(strstr(sp_last_error_message(), runtimes[i].name) != NULL);
        CHECK(strstr(sp_last_error_message(), "not available") != NULL ||
              strstr(sp_last_error_message(), "no device") != NULL);
      }
      FAILS(runtimes[i].create(1000, &gpu), STREAMPOOL_STATUS_NOT_AVAILABLE, runtimes[i].name);
    }
  }

  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_stream_destroy(foreign));
  OK(sp_device_destroy(d));
  OK(sp_device_destroy(other));
}

/* ---- statistics, limits, trim ---------------------------------------------------------------- */

/* What walk_counter saw of a snapshot walk. */
typedef struct walk_tally_s {
  size_t blocks, live_bytes, live_chunks_4k, ranges, stop_after;
  uintptr_t next; /* where the next block must start: blocks tile their range */
  int tiled;
} walk_tally_t;

static int walk_counter(const sp_snapshot_range_t* range, size_t index,
                        const sp_snapshot_block_t* block, void* user) {
  walk_tally_t* t = (walk_tally_t*)user;
  if (index == 0) {
    ++t->ranges;
    t->next = range->base;
  }
  if (block->address != t->next || block->struct_size != sizeof *block ||
      range->struct_size != sizeof *range || index >= range->block_count)
    t->tiled = 0;
  t->next = block->address + block->size;
  if (index + 1 == range->block_count && t->next != range->base + range->bytes) t->tiled = 0;
  ++t->blocks;
  if (block->state == SP_BLOCK_LIVE) {
    t->live_bytes += block->size;
    if (range->kind == SP_RANGE_SLAB && range->chunk_bytes == 4096)
      t->live_chunks_4k += block->chunks;
  }
  return t->stop_after != 0 && t->blocks == t->stop_after;
}

static void test_statistics(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = limited_pool(d, 0);
  sp_pool_statistics_t st;
  void* ptrs[16];
  size_t limit = 1, released = 0, upstream = 1;
  int i;
  OK(sp_pool_statistics_init(&st));
  OK(sp_stream_create(d, &s));
  for (i = 0; i < 16; ++i) OK(sp_pool_allocate(p, 4096, s, &ptrs[i]));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(st.live_bytes == 16 * 4096);
  CHECK(st.allocations == 16);
  CHECK(st.reserved_bytes >= st.live_bytes);
  {
    /* The snapshot's JSON: versioned, and its summary agrees with the statistics. */
    const char* json = NULL;
    size_t length = 0;
    char live[64];
    OK(sp_pool_snapshot_json(p, &json, &length));
    CHECK(json != NULL && length == strlen(json));
    CHECK(strstr(json, "\"schema_version\":1") != NULL);
    snprintf(live, sizeof live, "\"summary\":{\"live_bytes\":%zu,", st.live_bytes);
    CHECK(strstr(json, live) != NULL);
    FAILS(sp_pool_snapshot_json(NULL, &json, &length), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "pool is NULL");
    FAILS(sp_pool_snapshot_json(p, NULL, &length), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "json is NULL");
  }
  {
    /* The same snapshot block by block: the blocks tile their ranges, the live ones add up to
     * the live bytes (16 chunks of the 4 KiB class), and a nonzero return stops the walk. */
    walk_tally_t all = {0, 0, 0, 0, 0, 0, 1};
    walk_tally_t first = {0, 0, 0, 0, 1, 0, 1};
    OK(sp_pool_snapshot_walk(p, walk_counter, &all));
    CHECK(all.tiled);
    CHECK(all.ranges >= 1 && all.blocks >= 1);
    CHECK(all.live_bytes == st.live_bytes);
    CHECK(all.live_chunks_4k == 16);
    OK(sp_pool_snapshot_walk(p, walk_counter, &first));
    CHECK(first.blocks == 1);
    FAILS(sp_pool_snapshot_walk(NULL, walk_counter, &all), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "pool is NULL");
    FAILS(sp_pool_snapshot_walk(p, NULL, &all), STREAMPOOL_STATUS_INVALID_ARGUMENT,
          "visit is NULL");
  }
  for (i = 0; i < 16; ++i) OK(sp_pool_deallocate(p, ptrs[i], s));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(st.live_bytes == 0);
  CHECK(st.deallocations == 16);
  CHECK(st.stream_caches == 1);
  /* The peaks start again from now: nothing is live, the reserved slab stays. */
  CHECK(st.peak_live_bytes == 16 * 4096);
  OK(sp_pool_reset_peak_statistics(p));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(st.peak_live_bytes == 0);
  CHECK(st.peak_reserved_bytes == st.reserved_bytes);
  FAILS(sp_pool_reset_peak_statistics(NULL), STREAMPOOL_STATUS_INVALID_ARGUMENT, "pool is NULL");

  OK(sp_pool_get_memory_limit(p, &limit));
  CHECK(limit == 0);
  OK(sp_pool_set_memory_limit(p, (size_t)64 << 20));
  OK(sp_pool_get_memory_limit(p, &limit));
  CHECK(limit == (size_t)64 << 20);

  OK(sp_stream_synchronize(s));
  OK(sp_pool_trim(p, &released));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(released > 0);
  CHECK(st.reserved_bytes == 0);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_upstream_bytes(d, &upstream));
  CHECK(upstream == 0);
  OK(sp_device_destroy(d));
}

/* ---- destruction orders ---------------------------------------------------------------------- */

static int check_pattern(sp_stream_t s, const void* dev, size_t n, uint32_t value) {
  uint32_t* host = malloc(n * sizeof(uint32_t));
  size_t i;
  int good = 1;
  if (host == NULL) return 0;
  OK(sp_memcpy_to_host(s, host, dev, n * sizeof(uint32_t)));
  for (i = 0; i < n; ++i) good &= host[i] == value;
  free(host);
  return good;
}

/* Orders: free after the stream is gone; pool handle destroyed with live memory (which stays
 * valid, then goes back); device handle destroyed first of all. */
static void test_destruction_orders(void) {
  int order;
  for (order = 0; order < 6; ++order) {
    sp_device_t d = checking_device();
    sp_stream_t s1 = NULL, s2 = NULL;
    sp_pool_t p = limited_pool(d, 0);
    void* a = NULL;
    void* b = NULL;
    size_t upstream = 1;
    OK(sp_stream_create(d, &s1));
    OK(sp_stream_create(d, &s2));
    OK(sp_pool_allocate(p, 4096, s1, &a));
    OK(sp_pool_allocate(p, (size_t)3 << 20, s1, &b)); /* a large block too */
    OK(sp_fill(s1, a, 7, 4, 1024));
    OK(sp_fill(s1, b, 9, 4, ((size_t)3 << 20) / 4));
    switch (order) {
      case 0: /* stream, then free with no stream, then pool */
        OK(sp_stream_destroy(s1));
        OK(sp_pool_deallocate(p, a, NULL));
        OK(sp_pool_deallocate(NULL, b, NULL));
        OK(sp_pool_destroy(p));
        break;
      case 1: /* pool handle first: memory stays valid and usable on another stream */
        OK(sp_pool_destroy(p));
        CHECK(check_pattern(s2, a, 1024, 7));
        CHECK(check_pattern(s2, b, 4, 9));
        OK(sp_fill(s2, a, 11, 4, 1024));
        OK(sp_stream_destroy(s1));
        CHECK(check_pattern(s2, a, 1024, 11));
        OK(sp_pool_deallocate(NULL, a, s2));
        OK(sp_pool_deallocate(NULL, b, NULL));
        break;
      case 2: /* pool handle, stream, then the frees */
        OK(sp_pool_destroy(p));
        OK(sp_stream_destroy(s1));
        OK(sp_pool_deallocate(NULL, a, NULL));
        OK(sp_pool_deallocate(NULL, b, NULL));
        break;
      case 3: /* frees on live streams after the pool handle went */
        OK(sp_pool_destroy(p));
        OK(sp_pool_deallocate(NULL, a, s1)); /* free on a live stream: its cache */
        OK(sp_pool_deallocate(NULL, b, s2)); /* s1's work on b: waits through its token */
        OK(sp_stream_destroy(s1));
        break;
      case 4: /* free on the other stream while the first still runs the fill */
        OK(sp_pool_deallocate(p, a, s2));
        OK(sp_pool_deallocate(p, b, s2));
        OK(sp_stream_destroy(s1));
        OK(sp_pool_destroy(p));
        break;
      default: /* streams both gone before the pool handle and the frees */
        OK(sp_stream_destroy(s1));
        OK(sp_stream_destroy(s2));
        s2 = NULL;
        OK(sp_pool_destroy(p));
        OK(sp_pool_deallocate(NULL, b, NULL));
        OK(sp_pool_deallocate(NULL, a, NULL));
        break;
    }
    if (s2 != NULL) OK(sp_stream_destroy(s2));
    expect_no_violations(d);
    /* Every handle and every pointer is gone: the pool went back to the upstream. */
    OK(sp_device_upstream_bytes(d, &upstream));
    if (upstream != 0) fprintf(stderr, "order %d: %zu upstream bytes left\n", order, upstream);
    CHECK(upstream == 0);
    OK(sp_device_destroy(d));
  }
}

/* The device handle goes first; streams, pools and memory keep working. */
static void test_device_first(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* a = NULL;
  OK(sp_stream_create(d, &s));
  OK(sp_device_default_pool(d, &p));
  OK(sp_device_destroy(d));
  OK(sp_pool_allocate(p, 256, s, &a));
  OK(sp_fill(s, a, 3, 4, 64));
  CHECK(check_pattern(s, a, 64, 3));
  OK(sp_stream_destroy(s));
  OK(sp_pool_deallocate(p, a, NULL));
  OK(sp_pool_destroy(p));
}

/* A pool's device through the pool alone (sp_torch_pool's pools come with no device handle): the
 * same device, with a handle of its own that makes streams for the pool. */
static void test_pool_get_device(void) {
  sp_device_t d = checking_device();
  sp_device_t got = NULL;
  sp_stream_t s = NULL;
  sp_pool_t p = limited_pool(d, 0);
  uint64_t want = 0, id = 1;
  const char* name = NULL;
  void* a = NULL;
  OK(sp_pool_get_device(p, &got));
  CHECK(got != NULL && got != d);
  OK(sp_device_id(d, &want));
  OK(sp_device_id(got, &id));
  CHECK(id == want);
  OK(sp_device_backend_name(got, &name));
  CHECK(name != NULL && strcmp(name, "host") == 0);
  {
    sp_backend_kind_t kind = SP_BACKEND_OTHER;
    OK(sp_device_backend_kind(got, &kind));
    CHECK(kind == SP_BACKEND_HOST);
    REFUSED(sp_device_backend_kind(got, NULL), "sp_device_backend_kind",
            "kind (the output) is NULL", NULL);
  }
  /* The first handle dropped, the new one still works: a stream of it allocates from p. */
  OK(sp_device_destroy(d));
  OK(sp_stream_create(got, &s));
  OK(sp_pool_allocate(p, 256, s, &a));
  OK(sp_pool_deallocate(p, a, s));
  OK(sp_stream_destroy(s));
  REFUSED(sp_pool_get_device(p, NULL), "sp_pool_get_device", "device (the output) is NULL", NULL);
  REFUSED(sp_pool_get_device(NULL, &got), "sp_pool_get_device", "pool", NULL);
  expect_no_violations(got);
  OK(sp_device_destroy(got));
  OK(sp_pool_destroy(p));
}

/* ---- threads: the origin report's reproducer ------------------------------------------------- */

enum { per_thread = 200, elements = 256, threads = 4 };

typedef struct {
  sp_device_t device;
  sp_pool_t pool;
  void* out[per_thread];
  int free_inside; /* 1: free in the thread before its stream goes; 0: leave it to others */
} worker_args;

/* A task with its own stream: allocates, fills, synchronises and exits with its stream. */
static void* worker(void* arg) {
  worker_args* w = arg;
  sp_stream_t s = NULL;
  int i;
  OK(sp_stream_create(w->device, &s));
  for (i = 0; i < per_thread; ++i) {
    OK(sp_pool_allocate(w->pool, elements * sizeof(float), s, &w->out[i]));
    OK(sp_fill(s, w->out[i], 0x3f800000u /* 1.0f */, 4, elements));
  }
  OK(sp_stream_synchronize(s));
  if (w->free_inside) {
    for (i = 0; i < per_thread; ++i) OK(sp_pool_deallocate(w->pool, w->out[i], s));
  }
  OK(sp_stream_destroy(s)); /* the stream dies with its task */
  return NULL;
}

typedef struct {
  worker_args* w;
} freer_args;

static void* freer(void* arg) {
  worker_args* w = ((freer_args*)arg)->w;
  int i;
  /* Foreign thread, no stream, no pool handle: the finaliser form. */
  for (i = per_thread - 1; i >= 0; --i) OK(sp_pool_deallocate(NULL, w->out[i], NULL));
  return NULL;
}

static void test_origin_reproducer(void) {
  sp_device_t d = checking_device();
  sp_pool_t p = NULL;
  sp_stream_t main_stream = NULL;
  int round;
  OK(sp_device_default_pool(d, &p));
  OK(sp_pool_set_memory_limit(p, (size_t)16 << 20)); /* forces reuse soon */
  OK(sp_stream_create(d, &main_stream));
  for (round = 0; round < 6; ++round) {
    worker_args w[threads];
    pthread_t t[threads];
    freer_args fa[threads];
    void* mine[per_thread];
    float host[elements];
    float back[elements];
    int i, k;
    for (i = 0; i < threads; ++i) {
      w[i].device = d;
      w[i].pool = p;
      w[i].free_inside = (round + i) % 3 == 0;
      CHECK(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
    }
    for (i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    /* (b) after the threads and their streams are gone, (c) concurrently on other threads. */
    for (i = 0; i < threads; ++i) {
      if (w[i].free_inside) continue;
      fa[i].w = &w[i];
      if (i % 2 == 0) {
        freer(&fa[i]);
      } else {
        CHECK(pthread_create(&t[i], NULL, freer, &fa[i]) == 0);
      }
    }
    for (i = 0; i < threads; ++i)
      if (!w[i].free_inside && i % 2 == 1) pthread_join(t[i], NULL);
    /* Reuse those blocks on another stream; upload random data and read it back exactly. */
    for (k = 0; k < per_thread; ++k) {
      for (i = 0; i < elements; ++i) host[i] = (float)rand() / (float)RAND_MAX;
      OK(sp_pool_allocate(p, elements * sizeof(float), main_stream, &mine[k]));
      OK(sp_memcpy_to_device(main_stream, mine[k], host, sizeof host));
      memset(back, 0, sizeof back);
      OK(sp_memcpy_to_host(main_stream, back, mine[k], sizeof back));
      CHECK(memcmp(host, back, sizeof host) == 0);
    }
    for (k = 0; k < per_thread; ++k) OK(sp_pool_deallocate(p, mine[k], main_stream));
  }
  {
    sp_pool_statistics_t st;
    OK(sp_pool_statistics_init(&st));
    OK(sp_pool_get_statistics(p, &st));
    CHECK(st.live_bytes == 0);
    CHECK(st.ready_reuses + st.waited_reuses + st.same_stream_reuses > 0);
  }
  expect_no_violations(d);
  OK(sp_stream_destroy(main_stream));
  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* Memory handed between streams through the helpers, and record_use for outside work. */
static void test_cross_stream(void) {
  sp_device_t d = checking_device();
  sp_pool_t p = limited_pool(d, 0);
  sp_stream_t s1 = NULL, s2 = NULL;
  void* a = NULL;
  void* b = NULL;
  int i;
  OK(sp_stream_create(d, &s1));
  OK(sp_stream_create(d, &s2));
  for (i = 0; i < 50; ++i) {
    OK(sp_pool_allocate(p, 64 * 1024, s1, &a));
    OK(sp_fill(s1, a, 1, 4, 16 * 1024));
    OK(sp_fill(s2, a, 2, 4, 16 * 1024)); /* ordered after s1's fill by the helper */
    OK(sp_pool_record_use(p, a, s2));
    OK(sp_pool_deallocate(p, a, s1));           /* waits for s2's fill through its token */
    OK(sp_pool_allocate(p, 64 * 1024, s2, &b)); /* may reuse a at once on s2 */
    OK(sp_fill(s2, b, 3, 4, 16 * 1024));
    CHECK(check_pattern(s2, b, 16 * 1024, 3));
    OK(sp_pool_deallocate(p, b, NULL));
  }
  OK(sp_stream_wait_stream(s1, s2));
  expect_no_violations(d);
  OK(sp_stream_destroy(s1));
  OK(sp_stream_destroy(s2));
  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* ---- reclaim hooks: GC inside allocate ---------------------------------------------------------
 */

typedef struct {
  sp_pool_t pool;
  void* garbage[64];
  int count;
  int calls;
  size_t needed;
} gc_state;

/* The "garbage collector": frees every unreachable block, from inside the failing allocation,
 * on the allocating thread, through the same pool. Must not deadlock. */
static void collect(void* user, size_t bytes_needed) {
  gc_state* g = user;
  int i;
  ++g->calls;
  g->needed = bytes_needed;
  for (i = 0; i < g->count; ++i) OK(sp_pool_deallocate(NULL, g->garbage[i], NULL));
  g->count = 0;
}

static void test_reclaim_hook(void) {
  sp_device_t d = checking_device();
  sp_pool_t p = limited_pool(d, (size_t)8 << 20);
  sp_stream_t s = NULL, gone = NULL;
  gc_state g;
  uint64_t id = 0;
  void* ptr = NULL;
  int i;
  sp_pool_statistics_t st;
  OK(sp_pool_statistics_init(&st));
  memset(&g, 0, sizeof g);
  g.pool = p;
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(d, &gone));
  OK(sp_pool_add_reclaim_hook(p, collect, &g, &id));
  /* Fill the pool with "garbage" in large blocks, used on a stream that then dies. */
  for (i = 0; i < 4; ++i) {
    OK(sp_pool_allocate(p, (size_t)2 << 20, gone, &g.garbage[g.count]));
    OK(sp_fill(gone, g.garbage[g.count], 5, 1, (size_t)2 << 20));
    ++g.count;
  }
  OK(sp_stream_destroy(gone));
  /* Full: the next allocation must ask the hook, which frees, and then succeed. */
  OK(sp_pool_allocate(p, (size_t)4 << 20, s, &ptr));
  CHECK(g.calls == 1);
  CHECK(g.needed >= ((size_t)4 << 20));
  OK(sp_fill(s, ptr, 6, 1, (size_t)4 << 20));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(st.reclaim_calls == 1);
  CHECK(st.alloc_retries >= 1); /* the allocation that asked the hook was retried */
  /* Nothing left to collect: out of memory, after the hook ran again. */
  {
    void* more = NULL;
    void* big = NULL;
    const uint64_t retries = st.alloc_retries;
    OK(sp_pool_allocate(p, (size_t)4 << 20, s, &more));
    FAILS(sp_pool_allocate(p, (size_t)4 << 20, s, &big), STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY,
          "1 reclaim hook");
    CHECK(g.calls == 2);
    OK(sp_pool_get_statistics(p, &st));
    CHECK(st.alloc_retries > retries); /* a retry that failed counts too */
    OK(sp_pool_deallocate(p, more, s));
  }
  OK(sp_pool_remove_reclaim_hook(p, id));
  OK(sp_pool_deallocate(p, ptr, s));
  expect_no_violations(d);
  OK(sp_stream_destroy(s));
  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* A hook whose pool handle was destroyed is not called any more (its user data may be gone), while
 * the pool lives on through another handle. */
static void test_hook_removed_with_handle(void) {
  sp_device_t d = checking_device();
  sp_pool_t p = NULL, q = NULL;
  sp_stream_t s = NULL;
  gc_state g;
  void* a = NULL;
  void* b = NULL;
  memset(&g, 0, sizeof g);
  OK(sp_stream_create(d, &s));
  OK(sp_device_default_pool(d, &p));
  OK(sp_pool_set_memory_limit(p, (size_t)4 << 20));
  OK(sp_pool_add_reclaim_hook(p, collect, &g, NULL));
  OK(sp_pool_allocate(p, (size_t)3 << 20, s, &a));
  OK(sp_pool_destroy(p));
  OK(sp_device_default_pool(d, &q)); /* the same pool, a new handle */
  FAILS(sp_pool_allocate(q, (size_t)3 << 20, s, &b), STREAMPOOL_STATUS_OUT_OF_DEVICE_MEMORY,
        "0 reclaim hook");
  CHECK(g.calls == 0);
  OK(sp_pool_deallocate(q, a, s));
  OK(sp_pool_destroy(q));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

int main(void) {
  srand(42);
  test_version_and_status();
  test_errors();
  test_statistics();
  test_destruction_orders();
  test_device_first();
  test_pool_get_device();
  test_cross_stream();
  test_origin_reproducer();
  test_reclaim_hook();
  test_hook_removed_with_handle();
  if (failures != 0) {
    fprintf(stderr, "c_api_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("c_api_test: all passed\n");
  return 0;
}
