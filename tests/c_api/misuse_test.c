/* Pure C11 test: misuse of the copy and fill helpers is refused (issue 9, "No misuse gets
 * through"). A pointer the C layer does not know (freed memory not yet reused, an overrun, foreign
 * memory never registered) gets STREAMPOOL_STATUS_INVALID_ARGUMENT and a message naming it;
 * foreign memory registered with sp_memory_register works until it is unregistered;
 * sp_stream_wrap of a NULL native handle behaves as documented in include/streampool.h; and the
 * allocation log (sp_pool_record_*) refuses bad pools and paths, naming them.
 * Runs on the host backend with checking on. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "streampool.h"

static sp_device_t checking_device(void) { return checking_device_with_delay(0); }

/* Freed memory that the pool has not handed out again is still mapped, which is exactly why a
 * helper writing to it used to succeed silently. */
static void test_freed_pointer(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* live = NULL;
  void* freed = NULL;
  char host[256] = {0};
  char text[64];
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_pool_allocate(p, sizeof host, s, &live));
  OK(sp_pool_allocate(p, sizeof host, s, &freed));
  OK(sp_pool_deallocate(p, freed, s));
  ptr_text(freed, text, sizeof text);

  REFUSED(sp_memcpy_to_device(s, freed, host, sizeof host), text, "sp_memcpy_to_device", "256");
  REFUSED(sp_memcpy_to_host(s, host, freed, sizeof host), text, "sp_memcpy_to_host", "256");
  REFUSED(sp_memcpy_device(s, live, freed, sizeof host), text, "sp_memcpy_device", "256");
  REFUSED(sp_memcpy_device(s, freed, live, sizeof host), text, "sp_memcpy_device", "256");
  REFUSED(sp_fill(s, freed, 0, 4, 64), text, "sp_fill", "256");
  /* An interior pointer of freed memory too. */
  ptr_text((char*)freed + 16, text, sizeof text);
  REFUSED(sp_fill(s, (char*)freed + 16, 0, 1, 8), text, "sp_fill", NULL);

  /* Nothing was written: the live neighbour is intact and the pool saw no unordered reuse. */
  OK(sp_fill(s, live, 0x5a, 1, sizeof host));
  OK(sp_memcpy_to_host(s, host, live, sizeof host));
  CHECK(host[0] == 0x5a && host[sizeof host - 1] == 0x5a);
  OK(sp_pool_deallocate(p, live, s));
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

static void test_overrun(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* a = NULL;
  void* b = NULL;
  char host[1024] = {0};
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_pool_allocate(p, 1000, s, &a));
  OK(sp_pool_allocate(p, 1000, s, &b));
  /* Exactly to the end is fine; one byte more is not (names bytes, offset and size). */
  OK(sp_memcpy_to_device(s, (char*)a + 1000 - 10, host, 10));
  REFUSED(sp_memcpy_to_device(s, (char*)a + 1000 - 10, host, 11), "11 bytes at offset 990",
          "of 1000 bytes", "sp_memcpy_to_device");
  REFUSED(sp_memcpy_to_host(s, host, (char*)a + 500, 501), "501 bytes at offset 500",
          "sp_memcpy_to_host", NULL);
  REFUSED(sp_memcpy_device(s, b, (char*)a + 1, 1000), "1000 bytes at offset 1", "sp_memcpy_device",
          NULL);
  REFUSED(sp_memcpy_device(s, (char*)b + 1, a, 1000), "1000 bytes at offset 1", "sp_memcpy_device",
          NULL);
  REFUSED(sp_fill(s, (char*)a + 8, 0, 8, 125), "1000 bytes at offset 8", "sp_fill", NULL);
  /* Past the end (the padding of the block is not part of the allocation). */
  REFUSED(sp_fill(s, (char*)a + 1000, 0, 1, 1), "sp_fill", NULL, NULL);
  /* A huge length must not wrap around. */
  REFUSED(sp_memcpy_device(s, b, a, SIZE_MAX), "sp_memcpy_device", NULL, NULL);
  OK(sp_pool_deallocate(p, a, s));
  OK(sp_pool_deallocate(p, b, s));
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

/* Memory made elsewhere (here plain host memory, which is device memory for the host backend). */
static void test_registered_memory(void) {
  sp_device_t d = checking_device();
  sp_device_t other = checking_device();
  sp_stream_t s = NULL, s2 = NULL, s_other = NULL;
  sp_pool_t p = NULL;
  void* a = NULL;
  unsigned char* foreign = malloc(4096);
  unsigned char* foreign2 = malloc(512);
  unsigned char host[4096];
  char text[64];
  char text2[64];
  size_t i;
  int good = 1;
  if (foreign == NULL || foreign2 == NULL) {
    fprintf(stderr, "out of host memory\n");
    ++failures;
    free(foreign);
    free(foreign2);
    return;
  }
  OK(sp_stream_create(d, &s));
  OK(sp_stream_create(d, &s2));
  OK(sp_stream_create(other, &s_other));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_pool_allocate(p, 4096, s, &a));
  ptr_text(foreign, text, sizeof text);

  /* Unregistered foreign memory is refused, by every helper. */
  REFUSED(sp_memcpy_to_device(s, foreign, host, 16), text, "sp_memcpy_to_device", "16");
  REFUSED(sp_memcpy_to_host(s, host, foreign, 16), text, "sp_memcpy_to_host", "16");
  REFUSED(sp_memcpy_device(s, a, foreign, 16), text, "sp_memcpy_device", "16");
  REFUSED(sp_fill(s, foreign, 0, 1, 16), text, "sp_fill", "16");

  /* Registration checks its arguments. */
  REFUSED(sp_memory_register(NULL, foreign, 4096), "device", NULL, NULL);
  REFUSED(sp_memory_register(d, NULL, 4096), "ptr", NULL, NULL);
  REFUSED(sp_memory_register(d, foreign, 0), "0 bytes", text, NULL);
  REFUSED(sp_memory_register(d, (void*)(UINTPTR_MAX - 15), 32), "wraps", NULL, NULL);
  ptr_text(a, text2, sizeof text2);
  REFUSED(sp_memory_register(d, (char*)a + 100, 16), "sp_pool_allocate", text2, "4096 bytes");

  OK(sp_memory_register(d, foreign, 4096));
  /* Overlaps: names both ranges. */
  REFUSED(sp_memory_register(d, foreign + 4000, 200), text, "4096 bytes", "200 bytes");
  REFUSED(sp_memory_register(d, foreign, 4096), text, "already", NULL);

  /* Registered: every helper accepts it, and the data goes where it should. */
  for (i = 0; i < sizeof host; ++i) host[i] = (unsigned char)(i * 7);
  OK(sp_memcpy_to_device(s, foreign, host, sizeof host));
  OK(sp_memcpy_device(s2, a, foreign, 4096)); /* ordered after s's upload by the helper */
  OK(sp_fill(s2, foreign + 16, 0xee, 1, 16));
  memset(host, 0, sizeof host);
  OK(sp_memcpy_to_host(s, host, a, sizeof host));
  for (i = 0; i < sizeof host; ++i) good &= host[i] == (unsigned char)(i * 7);
  OK(sp_memcpy_to_host(s, host, foreign + 16, 17));
  for (i = 0; i < 16; ++i) good &= host[i] == 0xee;
  good &= host[16] == (unsigned char)(32 * 7);
  CHECK(good);
  /* But still not past its end, nor from a stream of another device. */
  REFUSED(sp_fill(s, foreign + 4000, 0, 1, 97), "97 bytes at offset 4000", "of 4096 bytes",
          "sp_fill");
  REFUSED(sp_fill(s_other, foreign, 0, 1, 16), "device", "sp_fill", NULL);

  /* Unregister: only the start of a registered range, only once. */
  ptr_text(foreign + 8, text2, sizeof text2);
  REFUSED(sp_memory_unregister(foreign + 8), text2, "inside", "4096 bytes");
  REFUSED(sp_memory_unregister(NULL), "ptr", NULL, NULL);
  ptr_text(foreign2, text2, sizeof text2);
  REFUSED(sp_memory_unregister(foreign2), text2, "sp_memory_unregister", NULL);
  OK(sp_stream_synchronize(s));
  OK(sp_stream_synchronize(s2));
  OK(sp_memory_unregister(foreign));
  REFUSED(sp_memory_unregister(foreign), text, "sp_memory_unregister", NULL);
  REFUSED(sp_fill(s, foreign, 0, 1, 16), text, "sp_fill", NULL);

  /* Two ranges side by side are fine, and a range may be registered again after it is gone. */
  OK(sp_memory_register(d, foreign, 2048));
  OK(sp_memory_register(d, foreign + 2048, 2048));
  OK(sp_memory_register(other, foreign2, 512));
  OK(sp_fill(s_other, foreign2, 1, 1, 512));
  OK(sp_memcpy_device(s, foreign + 2048, foreign, 2048));
  REFUSED(sp_fill(s, foreign + 2000, 0, 1, 100), "100 bytes at offset 2000", "of 2048 bytes", NULL);
  OK(sp_stream_synchronize(s));
  OK(sp_stream_synchronize(s_other));
  OK(sp_memory_unregister(foreign));
  OK(sp_memory_unregister(foreign + 2048));
  OK(sp_memory_unregister(foreign2));

  OK(sp_pool_deallocate(p, a, s));
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_stream_destroy(s2));
  OK(sp_stream_destroy(s_other));
  OK(sp_device_destroy(d));
  OK(sp_device_destroy(other));
  free(foreign);
  free(foreign2);
}

/* NULL native stream: the legacy default stream where the backend has one (CUDA), a clear refusal
 * on the host backend, which has none. */
static void test_wrap_null(void) {
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_device_t gpu = NULL;
  REFUSED(sp_stream_wrap(d, NULL, &s), "sp_stream_wrap", "legacy default stream", "host");
  CHECK(s == NULL);
  OK(sp_device_destroy(d));
  if (sp_device_create_cuda(0, &gpu) == STREAMPOOL_STATUS_SUCCESS) {
    void* native = NULL;
    sp_pool_t p = NULL;
    void* mem = NULL;
    char host[64] = {0};
    OK(sp_stream_wrap(gpu, NULL, &s));
    OK(sp_stream_native(s, &native));
    CHECK(native == (void*)1); /* CU_STREAM_LEGACY, the legacy stream's explicit name */
    OK(sp_device_default_pool(gpu, &p));
    OK(sp_pool_allocate(p, sizeof host, s, &mem));
    OK(sp_fill(s, mem, 3, 1, sizeof host));
    OK(sp_memcpy_to_host(s, host, mem, sizeof host));
    CHECK(host[0] == 3 && host[63] == 3);
    OK(sp_pool_deallocate(p, mem, s));
    OK(sp_stream_destroy(s)); /* waits; never destroys the legacy stream */
    OK(sp_pool_destroy(p));
    OK(sp_device_destroy(gpu));
  }
}

/* The allocation log refuses a NULL pool, a NULL or empty path and a path it cannot open, naming
 * them, and the pool goes on as before: a recording in progress keeps recording. */
static void test_recording(void) {
  const char* bad = "/nonexistent-streampool-dir/trace.txt";
  char path[64];
  sp_device_t d = checking_device();
  sp_stream_t s = NULL;
  sp_pool_t p = NULL;
  void* mem = NULL;
  uint64_t events = 99;
  FILE* f = NULL;
  OK(sp_stream_create(d, &s));
  OK(sp_pool_create(d, NULL, &p));

  REFUSED(sp_pool_record_start(NULL, "x.txt"), "sp_pool_record_start", "pool", NULL);
  REFUSED(sp_pool_record_start(p, NULL), "sp_pool_record_start", "path", NULL);
  REFUSED(sp_pool_record_start(p, ""), "sp_pool_record_start", "empty", NULL);
  REFUSED(sp_pool_record_start(p, bad), "sp_pool_record_start", bad, "No such file");
  REFUSED(sp_pool_record_stop(NULL, &events), "sp_pool_record_stop", "pool", NULL);
  REFUSED(sp_pool_record_phase(NULL, "x"), "sp_pool_record_phase", "pool", NULL);
  REFUSED(sp_pool_record_phase(p, NULL), "sp_pool_record_phase", "name", NULL);
  OK(sp_pool_record_phase(p, "step 0 begin")); /* nothing records: nothing happens */
  OK(sp_pool_record_stop(p, &events));
  CHECK(events == 0);

  /* A failed start leaves the recording in progress going. */
  snprintf(path, sizeof path, "misuse-recording-%p.txt", (void*)p);
  OK(sp_pool_record_start(p, path));
  OK(sp_pool_allocate(p, 100, s, &mem));
  REFUSED(sp_pool_record_start(p, bad), "sp_pool_record_start", bad, NULL);
  OK(sp_pool_deallocate(p, mem, s));
  OK(sp_pool_record_stop(p, NULL));
  OK(sp_pool_record_start(p, path));
  OK(sp_pool_allocate(p, 100, s, &mem));
  OK(sp_pool_deallocate(p, mem, s));
  OK(sp_pool_record_stop(p, &events));
  CHECK(events == 2);
  f = fopen(path, "r");
  CHECK(f != NULL);
  if (f != NULL) {
    char line[256];
    int events_read = 0;
    while (fgets(line, sizeof line, f) != NULL) events_read += line[0] != '#';
    CHECK(events_read == 2);
    fclose(f);
  }
  remove(path);
  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s));
  OK(sp_device_destroy(d));
}

int main(void) {
  test_freed_pointer();
  test_overrun();
  test_registered_memory();
  test_wrap_null();
  test_recording();
  if (failures != 0) {
    fprintf(stderr, "misuse_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("misuse_test: all passed\n");
  return 0;
}
