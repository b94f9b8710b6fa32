/* Pure C11: a live program records its allocations (sp_pool_record_start), and the recording is a
 * trace tools/replay plays. Three steps on a host device with two streams: small and large
 * blocks, freed on the allocating stream, on the other stream and with no stream, a block
 * allocated before the start and freed during the recording (never written), a phase line per
 * step. Blocks are allocated on both streams: the replay's check of the pool's peak_live_bytes
 * allows what each other stream has not yet added to the shared count (up to 16 MiB each;
 * include/streampool/pool.hpp, pool_statistics).
 *
 *   recording_test [TRACE]   records to TRACE and keeps it (default: a file in the current
 *                            directory, removed at the end) and prints
 *                            "recorded: E events, peak live B bytes (M MiB)"
 *
 * The program counts its own requested bytes to know the peak live the recording implies; ctest's
 * recorded_trace_replays (tests/CMakeLists.txt) runs this, then `replay --backend host --backend
 * exact TRACE`, and checks that the replay takes every event and reaches that peak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "streampool.h"

enum { steps = 3, per_step = 12 };

static size_t live_bytes = 0, peak_bytes = 0;

static void* allocate(sp_pool_t p, size_t n, sp_stream_t s) {
  void* mem = NULL;
  OK(sp_pool_allocate(p, n, s, &mem));
  live_bytes += n;
  if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  return mem;
}

static void deallocate(sp_pool_t p, void* mem, size_t n, sp_stream_t s) {
  OK(sp_pool_deallocate(p, mem, s));
  live_bytes -= n;
}

/* The events in the file: its lines that are not comments. */
static uint64_t events_in(const char* path) {
  char line[512];
  uint64_t n = 0;
  FILE* f = fopen(path, "r");
  CHECK(f != NULL);
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f) != NULL) n += line[0] != '#' && line[0] != '\n';
  fclose(f);
  return n;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "recording_test-trace.txt";
  sp_device_t d = NULL;
  sp_stream_t s[2] = {NULL, NULL};
  sp_pool_t p = NULL;
  void* before = NULL;
  void* kept = NULL;
  uint64_t events = 0;
  int step, i;

  d = checking_device_with_delay(0);
  OK(sp_stream_create(d, &s[0]));
  OK(sp_stream_create(d, &s[1]));
  OK(sp_pool_create(d, NULL, &p));
  OK(sp_pool_allocate(p, 4096, s[0], &before)); /* before the start: in no line of the file */

  OK(sp_pool_record_start(p, path));
  for (step = 0; step < steps; ++step) {
    void* mem[per_step];
    size_t size[per_step];
    char phase[32];
    snprintf(phase, sizeof phase, "step %d begin", step);
    OK(sp_pool_record_phase(p, phase));
    for (i = 0; i < per_step; ++i) {
      /* 100 B .. 4.4 MiB (small and large blocks), mostly odd sizes */
      size[i] = (size_t)(100 + 997 * i) << (i % 10);
      mem[i] = allocate(p, size[i], s[i % 2]);
    }
    for (i = 0; i < per_step; ++i) {
      switch (i % 3) {
        case 0: /* on its own stream */
          deallocate(p, mem[i], size[i], s[i % 2]);
          break;
        case 1: /* on the other stream */
          deallocate(p, mem[i], size[i], s[(i + 1) % 2]);
          break;
        default: /* with no stream: after every stream that used it */
          deallocate(p, mem[i], size[i], NULL);
          break;
      }
    }
    if (step == 0) kept = allocate(p, (size_t)3 << 20, s[0]); /* live across steps */
  }
  deallocate(p, kept, (size_t)3 << 20, s[1]);
  OK(sp_pool_deallocate(p, before, s[0])); /* allocated before the start: skipped */
  OK(sp_pool_record_stop(p, &events));

  CHECK(live_bytes == 0);
  CHECK(events == 2 * (steps * per_step + 1));
  CHECK(events_in(path) == events);
  printf("recorded: %llu events, peak live %zu bytes (%.1f MiB)\n", (unsigned long long)events,
         peak_bytes, (double)peak_bytes / (1 << 20));

  expect_no_violations(d);
  OK(sp_pool_destroy(p));
  OK(sp_stream_destroy(s[0]));
  OK(sp_stream_destroy(s[1]));
  OK(sp_device_destroy(d));
  if (argc <= 1) remove(path);
  if (failures != 0) {
    fprintf(stderr, "recording_test: %d failure(s)\n", failures);
    return 1;
  }
  return 0;
}
