/* Pure C11 test of the versioned structs (include/streampool.h, "versioned structs"): a caller
 * built against an older, smaller layout is served without a byte written past its struct_size
 * (guard bytes behind the struct), a newer, larger one is accepted with its tail left alone (and
 * refused when that tail sets something), and struct_size 0 or below the first version is
 * refused with a message naming the function, the struct and the sizes. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "streampool.h"

/* What a caller built against the first versions compiled: the layouts before the virtual-memory
 * fields were appended. */
#define POOL_OPTIONS_V1_FIELDS \
  size_t struct_size;          \
  size_t memory_limit;         \
  size_t small_max;            \
  size_t stream_cache_bytes;   \
  int poison_on_free;

typedef struct {
  POOL_OPTIONS_V1_FIELDS
} pool_options_v1;

/* Version 2 of the pool options: before share_between_streams. Its fields follow version 1's in
 * the same struct, not a nested one: a nested version 1 would end in its tail padding. */
typedef struct {
  POOL_OPTIONS_V1_FIELDS
  int virtual_memory;
  size_t release_threshold;
} pool_options_v2;

/* Version 3: before large_cache_bytes (the shelf). */
typedef struct {
  POOL_OPTIONS_V1_FIELDS
  int virtual_memory;
  size_t release_threshold;
  int share_between_streams;
} pool_options_v3;

/* Version 4: before keep_memory (graph pools). */
typedef struct {
  POOL_OPTIONS_V1_FIELDS
  int virtual_memory;
  size_t release_threshold;
  int share_between_streams;
  size_t large_cache_bytes;
} pool_options_v4;

typedef struct {
  size_t struct_size;
  size_t live_bytes, cached_bytes, reserved_bytes, peak_live_bytes, peak_reserved_bytes;
  size_t memory_limit;
  uint64_t allocations, deallocations, fresh_allocations, same_stream_reuses, ready_reuses;
  uint64_t waited_reuses, device_waits, host_waits, upstream_allocations, upstream_deallocations;
  uint64_t reclaim_calls;
  size_t stream_caches;
} pool_statistics_v1;

/* Version 2: before alloc_retries. */
typedef struct {
  pool_statistics_v1 v1;
  uint64_t upstream_reserves, upstream_creates, upstream_releases, upstream_maps, upstream_unmaps;
  uint64_t upstream_calls;
} pool_statistics_v2;

enum { guard = 0xA5, tail_bytes = 64 };

/* A struct with room behind it; its bytes start as guard bytes. */
typedef union {
  sp_pool_options_t options;
  sp_host_options_t host;
  sp_pool_statistics_t statistics;
  unsigned char bytes[sizeof(sp_pool_statistics_t) + tail_bytes];
} guarded_buffer;

static void fill_guard(guarded_buffer* b) { memset(b, guard, sizeof *b); }

/* The first byte at or after `from` that is not a guard byte, or -1. */
static long first_written(const guarded_buffer* b, size_t from) {
  size_t i;
  for (i = from; i < sizeof b->bytes; ++i) {
    if (b->bytes[i] != guard) return (long)i;
  }
  return -1;
}

#define UNTOUCHED_FROM(buffer, from)                                                         \
  do {                                                                                       \
    long written_ = first_written((buffer), (from));                                         \
    if (written_ >= 0) {                                                                     \
      fprintf(stderr, "%s:%d: byte %ld written, past struct_size %zu\n", __FILE__, __LINE__, \
              written_, (size_t)(from));                                                     \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)

/* `status` must be INVALID_ARGUMENT, and the message must contain every needle (NULL ends them). */
static void expect_refused(const char* call, int line, sp_status_t status,
                           const char* const* needles) {
  const char* message = sp_last_error_message();
  int ok = status == STREAMPOOL_STATUS_INVALID_ARGUMENT;
  for (; *needles != NULL; ++needles) {
    if (strstr(message, *needles) == NULL) {
      fprintf(stderr, "%s:%d: message lacks '%s'\n", __FILE__, line, *needles);
      ok = 0;
    }
  }
  if (!ok) {
    fprintf(stderr, "%s:%d: %s -> %s '%s', expected STREAMPOOL_STATUS_INVALID_ARGUMENT\n", __FILE__,
            line, call, sp_status_string(status), message);
    ++failures;
  }
}
#undef REFUSED /* check.h's takes three needles; this one any number */
#define REFUSED(call, ...) \
  expect_refused(#call, __LINE__, (call), (const char* const[]){__VA_ARGS__, NULL})

/* "40 (version 1), 48 (version 2)": how the messages list the sizes a struct accepts (two versions;
 * three_sizes_text and five_sizes_text below for three and five). */
static const char* sizes_text(char* buf, size_t n, size_t v1, size_t v2) {
  if (v1 == v2) {
    snprintf(buf, n, "%zu (version 1)", v1);
  } else {
    snprintf(buf, n, "%zu (version 1), %zu (version 2)", v1, v2);
  }
  return buf;
}

static const char* three_sizes_text(char* buf, size_t n, size_t v1, size_t v2, size_t v3) {
  snprintf(buf, n, "%zu (version 1), %zu (version 2), %zu (version 3)", v1, v2, v3);
  return buf;
}

static const char* five_sizes_text(char* buf, size_t n, size_t v1, size_t v2, size_t v3, size_t v4,
                                   size_t v5) {
  snprintf(buf, n,
           "%zu (version 1), %zu (version 2), %zu (version 3), %zu (version 4), %zu (version 5)",
           v1, v2, v3, v4, v5);
  return buf;
}

static void test_sizes_reported(void) {
  size_t n = 0;
  OK(sp_struct_size("sp_pool_options_t", &n));
  CHECK(n == sizeof(sp_pool_options_t));
  OK(sp_struct_size("sp_host_options_t", &n));
  CHECK(n == sizeof(sp_host_options_t));
  OK(sp_struct_size("sp_pool_statistics_t", &n));
  CHECK(n == sizeof(sp_pool_statistics_t));
  REFUSED(sp_struct_size("sp_pool_options_s", &n), "sp_struct_size", "'sp_pool_options_s'",
          "sp_pool_statistics_t");
  REFUSED(sp_struct_size(NULL, &n), "sp_struct_size", "name is NULL");

  /* The *_init functions set struct_size to this header's size. */
  {
    sp_pool_options_t po;
    sp_host_options_t ho;
    sp_pool_statistics_t st;
    OK(sp_pool_options_init(&po));
    OK(sp_host_options_init(&ho));
    OK(sp_pool_statistics_init(&st));
    CHECK(po.struct_size == sizeof po && ho.struct_size == sizeof ho &&
          st.struct_size == sizeof st);
    CHECK(po.small_max > 0 && po.release_threshold > 0 && ho.granularity > 0);
  }
}

/* struct_size 0 (an uninitialised or zeroed struct) and sizes below the first version. */
static void test_too_small_refused(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_device_t none = NULL;
  sp_pool_t p = NULL, q = NULL;
  guarded_buffer b;
  char po_sizes[160], ho_sizes[96], st_sizes[128];
  five_sizes_text(po_sizes, sizeof po_sizes, sizeof(pool_options_v1), sizeof(pool_options_v2),
                  sizeof(pool_options_v3), sizeof(pool_options_v4), sizeof(sp_pool_options_t));
  sizes_text(ho_sizes, sizeof ho_sizes, sizeof(sp_host_options_t), sizeof(sp_host_options_t));
  three_sizes_text(st_sizes, sizeof st_sizes, sizeof(pool_statistics_v1),
                   sizeof(pool_statistics_v2), sizeof(sp_pool_statistics_t));
  OK(sp_device_default_pool(d, &p));

  fill_guard(&b);
  b.options.struct_size = 0;
  REFUSED(sp_pool_create(d, &b.options, &q), "sp_pool_create", "sp_pool_options_t",
          "struct_size is 0", po_sizes, "sp_pool_options_init");
  CHECK(q == NULL);
  REFUSED(sp_pool_options_set_defaults(&b.options), "sp_pool_options_set_defaults",
          "sp_pool_options_t", "struct_size is 0", po_sizes);
  UNTOUCHED_FROM(&b, sizeof b.options.struct_size);

  b.options.struct_size = sizeof(pool_options_v1) - 1;
  REFUSED(sp_pool_create(d, &b.options, &q), "sp_pool_create", "sp_pool_options_t", po_sizes);
  CHECK(q == NULL);

  fill_guard(&b);
  b.host.struct_size = 0;
  REFUSED(sp_device_create_host(&b.host, &none), "sp_device_create_host", "sp_host_options_t",
          "struct_size is 0", ho_sizes, "sp_host_options_init");
  CHECK(none == NULL);
  REFUSED(sp_host_options_set_defaults(&b.host), "sp_host_options_set_defaults",
          "sp_host_options_t", "struct_size is 0");
  /* sp_host_options_t has one version: one byte short of it is below it. */
  b.host.struct_size = sizeof(sp_host_options_t) - 1;
  REFUSED(sp_device_create_host(&b.host, &none), "sp_device_create_host", "sp_host_options_t",
          ho_sizes);
  UNTOUCHED_FROM(&b, sizeof b.host.struct_size);

  fill_guard(&b);
  b.statistics.struct_size = 0;
  REFUSED(sp_pool_get_statistics(p, &b.statistics), "sp_pool_get_statistics",
          "sp_pool_statistics_t", "struct_size is 0", st_sizes, "sp_pool_statistics_init");
  REFUSED(sp_pool_statistics_set_defaults(&b.statistics), "sp_pool_statistics_set_defaults",
          "sp_pool_statistics_t", "struct_size is 0");
  b.statistics.struct_size = sizeof(size_t);
  REFUSED(sp_pool_get_statistics(p, &b.statistics), "sp_pool_get_statistics",
          "sp_pool_statistics_t", st_sizes);
  UNTOUCHED_FROM(&b, sizeof b.statistics.struct_size);

  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* Callers built against the first and the second version of the statistics, and one whose struct
 * ends before version 2's last field: the library writes the fields of the version the caller's
 * struct covers whole, and nothing past them. */
static void test_older_statistics(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* ptr = NULL;
  guarded_buffer b;
  pool_statistics_v1 old;
  const size_t truncated = offsetof(sp_pool_statistics_t, upstream_calls);
  OK(sp_stream_create(d, &s));
  OK(sp_device_default_pool(d, &p));
  OK(sp_pool_allocate(p, 4096, s, &ptr));

  fill_guard(&b);
  b.statistics.struct_size = sizeof(pool_statistics_v1);
  OK(sp_pool_get_statistics(p, &b.statistics));
  UNTOUCHED_FROM(&b, sizeof(pool_statistics_v1));
  memcpy(&old, b.bytes, sizeof old);
  CHECK(old.struct_size == sizeof old);
  CHECK(old.live_bytes >= 4096 && old.allocations == 1 && old.stream_caches >= 1);

  /* Truncated before its last field, it holds version 2 only in part: it is served as version 1,
   * so nothing past version 1 is written, let alone past struct_size. */
  fill_guard(&b);
  b.statistics.struct_size = truncated;
  OK(sp_pool_get_statistics(p, &b.statistics));
  UNTOUCHED_FROM(&b, sizeof(pool_statistics_v1));
  CHECK(b.statistics.live_bytes >= 4096 && b.statistics.allocations == 1);

  fill_guard(&b);
  b.statistics.struct_size = sizeof(pool_statistics_v2);
  OK(sp_pool_get_statistics(p, &b.statistics));
  UNTOUCHED_FROM(&b, sizeof(pool_statistics_v2));
  CHECK(b.statistics.upstream_calls >= 1);

  /* sp_pool_statistics_set_defaults zeroes the first version's fields only. */
  fill_guard(&b);
  b.statistics.struct_size = sizeof(pool_statistics_v1);
  OK(sp_pool_statistics_set_defaults(&b.statistics));
  UNTOUCHED_FROM(&b, sizeof(pool_statistics_v1));
  CHECK(b.statistics.live_bytes == 0 && b.statistics.stream_caches == 0);

  OK(sp_pool_deallocate(p, ptr, s));
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  expect_no_violations(d);
  OK(sp_device_destroy(d));
}

/* A caller built against the first version of the pool options: its fields are read, the later
 * ones keep their defaults, whatever lies behind its struct. */
static void test_older_pool_options(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* ptr = NULL;
  guarded_buffer b;
  sp_pool_statistics_t st;
  pool_options_v1 old;
  OK(sp_stream_create(d, &s));

  fill_guard(&b);
  b.options.struct_size = sizeof(pool_options_v1);
  OK(sp_pool_options_set_defaults(&b.options));
  UNTOUCHED_FROM(&b, sizeof(pool_options_v1));
  memcpy(&old, b.bytes, sizeof old);
  CHECK(old.small_max > 0 && old.stream_cache_bytes > 0 && old.poison_on_free == 0);

  /* The old struct's fields, then zeros: in its tail padding and behind it, where the library
   * would find virtual_memory off and a release threshold of 0 if it read them. It must keep the
   * defaults (virtual memory on). */
  memset(&b, 0, sizeof b);
  old.memory_limit = (size_t)8 << 20;
  memcpy(b.bytes, &old, offsetof(pool_options_v1, poison_on_free) + sizeof old.poison_on_free);
  OK(sp_pool_create(d, &b.options, &p));
  OK(sp_pool_allocate(p, (size_t)2 << 20, s, &ptr));
  OK(sp_pool_statistics_init(&st));
  OK(sp_pool_get_statistics(p, &st));
  CHECK(st.memory_limit == (size_t)8 << 20); /* the first version's fields are read */
  CHECK(st.upstream_reserves > 0);           /* virtual memory stayed on: the default */
  OK(sp_pool_deallocate(p, ptr, s));
  OK(sp_pool_destroy(p));

  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* Whether a 4 MiB block freed on stream a (its work complete) comes back on stream b while a
 * lives: only when the pool shares memory between streams. */
static int reused_on_another_stream(sp_device_t d, const sp_pool_options_t* options) {
  sp_stream_t a = NULL, b = NULL;
  sp_pool_t p = NULL;
  void *x = NULL, *y = NULL;
  const size_t n = (size_t)4 << 20;
  OK(sp_stream_create(d, &a));
  OK(sp_stream_create(d, &b));
  OK(sp_pool_create(d, options, &p));
  OK(sp_pool_allocate(p, n, a, &x));
  OK(sp_pool_deallocate(p, x, a));
  OK(sp_stream_synchronize(a));
  OK(sp_pool_allocate(p, n, b, &y));
  OK(sp_pool_deallocate(p, y, b));
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(b));
  OK(sp_stream_destroy(a));
  return x == y;
}

/* share_between_streams (version 3): 0, the default, keeps each live stream's memory its own; 1
 * shares it. A version-2 caller's pool keeps the default whatever lies behind its struct. */
static void test_share_between_streams(void) {
  sp_device_t d = checking_device_with_delay(0);
  guarded_buffer b;
  sp_pool_options_t o;
  OK(sp_pool_options_init(&o));
  CHECK(o.share_between_streams == 0);
  CHECK(!reused_on_another_stream(d, &o));
  o.share_between_streams = 1;
  CHECK(reused_on_another_stream(d, &o));

  fill_guard(&b);
  b.options.struct_size = sizeof(pool_options_v2);
  OK(sp_pool_options_set_defaults(&b.options));
  UNTOUCHED_FROM(&b, sizeof(pool_options_v2));
  memset(b.bytes + sizeof(pool_options_v2), 1, sizeof b.bytes - sizeof(pool_options_v2));
  CHECK(!reused_on_another_stream(d, &b.options));
  expect_no_violations(d);
  OK(sp_device_destroy(d));
}

/* The size a pool with `options` gives a request of 3 MiB + 1 byte, on a host device with virtual
 * memory: rounded up to its class (3.25 MiB) where the shelf is on, to 256 bytes where it is off.
 */
static size_t large_block_size(const sp_pool_options_t* options) {
  sp_host_options_t ho;
  sp_device_t d = NULL;
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* ptr = NULL;
  size_t n = 0;
  OK(sp_host_options_init(&ho));
  ho.virtual_memory = 1;
  OK(sp_device_create_host(&ho, &d));
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, options, &p));
  OK(sp_pool_allocate(p, ((size_t)3 << 20) + 1, s, &ptr));
  OK(sp_pool_block_size(p, ptr, &n));
  OK(sp_pool_deallocate(p, ptr, s));
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
  return n;
}

/* large_cache_bytes (version 4): 96 MiB by default, 0 turns the shelf off. A version-3 caller's
 * pool keeps the default whatever lies behind its struct. */
static void test_large_cache_bytes(void) {
  const size_t shelf_class = ((size_t)13 << 20) / 4, exact = ((size_t)3 << 20) + 256;
  guarded_buffer b;
  sp_pool_options_t o;
  OK(sp_pool_options_init(&o));
  CHECK(o.large_cache_bytes == (size_t)96 << 20);
  CHECK(large_block_size(&o) == shelf_class);
  o.large_cache_bytes = 0;
  CHECK(large_block_size(&o) == exact);

  fill_guard(&b);
  b.options.struct_size = sizeof(pool_options_v3);
  OK(sp_pool_options_set_defaults(&b.options));
  UNTOUCHED_FROM(&b, sizeof(pool_options_v3));
  memset(b.bytes + sizeof(pool_options_v3), 0, sizeof b.bytes - sizeof(pool_options_v3));
  CHECK(large_block_size(&b.options) == shelf_class);
}

/* keep_memory (version 5): 0 by default; a version-4 caller's struct is written only as far
 * as it reaches, and its pool keeps the default. */
static void test_keep_memory(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_pool_t p = NULL;
  guarded_buffer b;
  sp_pool_options_t o;
  OK(sp_pool_options_init(&o));
  CHECK(o.keep_memory == 0);
  o.keep_memory = 1;
  OK(sp_pool_create(d, &o, &p));
  OK(sp_pool_destroy(p));
  fill_guard(&b);
  b.options.struct_size = sizeof(pool_options_v4);
  OK(sp_pool_options_set_defaults(&b.options));
  UNTOUCHED_FROM(&b, sizeof(pool_options_v4));
  memset(b.bytes + sizeof(pool_options_v4), 0, sizeof b.bytes - sizeof(pool_options_v4));
  OK(sp_pool_create(d, &b.options, &p));
  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* A caller built against a newer header: larger structs. Known fields are written, the tail is
 * left alone; a tail that sets something is refused, naming the byte. */
static void test_newer_structs(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_device_t h = NULL;
  sp_pool_t p = NULL, q = NULL;
  guarded_buffer b;
  char byte_text[64];
  const size_t newer_options = sizeof(sp_pool_options_t) + 16;
  OK(sp_device_default_pool(d, &p));

  fill_guard(&b);
  b.statistics.struct_size = sizeof(sp_pool_statistics_t) + tail_bytes;
  OK(sp_pool_get_statistics(p, &b.statistics));
  UNTOUCHED_FROM(&b, sizeof(sp_pool_statistics_t));

  fill_guard(&b);
  b.options.struct_size = newer_options;
  OK(sp_pool_options_set_defaults(&b.options));
  UNTOUCHED_FROM(&b, sizeof(sp_pool_options_t));
  /* The newer fields as the newer header's *_init leaves them (zero): accepted. */
  memset(b.bytes + sizeof(sp_pool_options_t), 0, newer_options - sizeof(sp_pool_options_t));
  OK(sp_pool_create(d, &b.options, &q));
  OK(sp_pool_destroy(q));
  /* A newer field set: refused. The bytes past struct_size are not looked at. */
  b.bytes[sizeof(sp_pool_options_t) + 3] = 1;
  b.bytes[newer_options] = 7;
  q = NULL;
  snprintf(byte_text, sizeof byte_text, "byte %zu", sizeof(sp_pool_options_t) + 3);
  REFUSED(sp_pool_create(d, &b.options, &q), "sp_pool_create", "sp_pool_options_t", byte_text,
          "cannot honour");
  CHECK(q == NULL);
  b.bytes[sizeof(sp_pool_options_t) + 3] = 0;
  OK(sp_pool_create(d, &b.options, &q));
  OK(sp_pool_destroy(q));

  memset(&b, 0, sizeof b);
  b.host.struct_size = sizeof(sp_host_options_t) + 8;
  OK(sp_host_options_set_defaults(&b.host));
  OK(sp_device_create_host(&b.host, &h));
  OK(sp_device_destroy(h));
  h = NULL;
  b.bytes[sizeof(sp_host_options_t)] = 1;
  REFUSED(sp_device_create_host(&b.host, &h), "sp_device_create_host", "sp_host_options_t",
          "cannot honour");
  CHECK(h == NULL);

  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

/* A struct_size far beyond any newer header (8 times this library's size) is a struct never
 * initialised: refused before anything past the struct is read or written. */
static void test_garbage_size_refused(void) {
  sp_device_t d = checking_device_with_delay(0);
  sp_pool_t p = NULL, q = NULL;
  guarded_buffer b;
  OK(sp_device_default_pool(d, &p));

  fill_guard(&b);
  b.statistics.struct_size = (size_t)1 << 40;
  REFUSED(sp_pool_get_statistics(p, &b.statistics), "sp_pool_get_statistics",
          "sp_pool_statistics_t", "it was never set", "sp_pool_statistics_init");
  UNTOUCHED_FROM(&b, sizeof b.statistics.struct_size);

  fill_guard(&b);
  b.options.struct_size = 8 * sizeof(sp_pool_options_t) + 1;
  REFUSED(sp_pool_create(d, &b.options, &q), "sp_pool_create", "sp_pool_options_t",
          "it was never set", "sp_pool_options_init");
  CHECK(q == NULL);

  OK(sp_pool_destroy(p));
  OK(sp_device_destroy(d));
}

int main(void) {
  test_sizes_reported();
  test_garbage_size_refused();
  test_too_small_refused();
  test_older_statistics();
  test_older_pool_options();
  test_share_between_streams();
  test_large_cache_bytes();
  test_keep_memory();
  test_newer_structs();
  if (failures != 0) {
    fprintf(stderr, "struct_size_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("struct_size_test: passed\n");
  return 0;
}
