/* Uses an installed streampool through pkg-config, as a C program built without CMake would:
 *   cc pkg_config_main.c $(pkg-config --cflags --libs streampool)
 * (tests/consumer/run_pkg_config_test.cmake). Checks the header, the link line and the library's
 * version against the one pkg-config reports (EXPECTED_VERSION, passed as the first argument). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "streampool.h"

#define TRY(call)                                                                  \
  do {                                                                             \
    sp_status_t st_ = (call);                                                      \
    if (st_ != STREAMPOOL_STATUS_SUCCESS) {                                        \
      fprintf(stderr, "%s: %s\n", sp_status_string(st_), sp_last_error_message()); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  int major = 0, minor = 0, patch = 0;
  char version[64];
  sp_device_t device;
  sp_stream_t stream;
  sp_pool_t pool;
  void* data;
  uint32_t out[64];
  int i;

  TRY(sp_get_version(&major, &minor, &patch));
  snprintf(version, sizeof version, "%d.%d.%d", major, minor, patch);
  printf("streampool pkg-config consumer: library %s, pkg-config %s\n", version,
         argc > 1 ? argv[1] : "(not given)");
  if (argc > 1 && strcmp(version, argv[1]) != 0) {
    fprintf(stderr, "the library's version is not the one streampool.pc states\n");
    return 1;
  }

  TRY(sp_device_create_host(NULL, &device));
  TRY(sp_stream_create(device, &stream));
  TRY(sp_pool_create(device, NULL, &pool));
  TRY(sp_pool_allocate(pool, sizeof out, stream, &data));
  TRY(sp_fill(stream, data, 0x5eed, sizeof out[0], 64));
  TRY(sp_memcpy_to_host(stream, out, data, sizeof out));
  for (i = 0; i < 64; ++i) {
    if (out[i] != 0x5eed) {
      fprintf(stderr, "element %d is %u, not %u\n", i, (unsigned)out[i], 0x5eedu);
      return 1;
    }
  }
  TRY(sp_pool_deallocate(pool, data, stream));
  TRY(sp_stream_destroy(stream));
  TRY(sp_pool_destroy(pool));
  TRY(sp_device_destroy(device));
  printf("streampool pkg-config consumer: 64 elements filled and read back\n");
  return 0;
}
