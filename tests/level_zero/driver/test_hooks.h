/* streampool's Level Zero test driver: the hooks a test reaches with dlsym.
 *
 * The driver is loaded by the Level Zero loader (ZE_ENABLE_ALT_DRIVERS=<path to the .so>), never
 * linked, so a test finds these with dlopen(<same path>, RTLD_NOW | RTLD_NOLOAD) and dlsym
 * (test_hooks.hpp does it). They are plain C so that any test language can call them.
 *
 * Environment read by the driver (once, at load):
 *   SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION=1  abort() at the first event-reuse violation (each one
 *                                           is always printed to stderr as well)
 *   SP_ZE_TEST_DRIVER_DELAY_US=N            sleep 0..N microseconds before each command (seeded)
 *   SP_ZE_TEST_DRIVER_SEED=S                seed of those delays (default 1)
 *   SP_ZE_TEST_DRIVER_CAPACITY=BYTES        device capacity: allocations and physical memory
 *                                           beyond it fail with ..._OUT_OF_DEVICE_MEMORY
 *                                           (default 0 = unlimited)
 *   SP_ZE_TEST_DRIVER_REORDER=1             reorder mode: the worker of a command list runs each
 *                                           run of consecutive commands that nothing orders (no
 *                                           barrier, wait, signal or reset between or on them)
 *                                           in reverse append order (driver/README.md)
 *   SP_ZE_TEST_DRIVER_SHARED_SYSTEM=1       report shared system allocation support
 *                                           (default: none, so downloads are staged)
 */
#ifndef STREAMPOOL_TESTS_LEVEL_ZERO_DRIVER_TEST_HOOKS_H
#define STREAMPOOL_TESTS_LEVEL_ZERO_DRIVER_TEST_HOOKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Event-reuse violations recorded since load (or the last reset): returns their number and writes
 * their messages, one per line, NUL-terminated and truncated to len bytes, into buf (buf may be
 * NULL when len is 0). */
typedef size_t (*sp_ze_test_driver_violations_fn)(char* buf, size_t len);
/* Forgets the recorded violations. */
typedef void (*sp_ze_test_driver_reset_violations_fn)(void);
/* Bytes held: memory allocations (device, host, shared) plus physical memory objects. */
typedef size_t (*sp_ze_test_driver_bytes_held_fn)(void);
/* Sets the capacity (0 = unlimited); overrides SP_ZE_TEST_DRIVER_CAPACITY. */
typedef void (*sp_ze_test_driver_set_capacity_fn)(size_t bytes);
/* Sets the maximum delay before each command in microseconds (0 = none); overrides
 * SP_ZE_TEST_DRIVER_DELAY_US for commands executed from now on. */
typedef void (*sp_ze_test_driver_set_delay_us_fn)(unsigned delay_us);
/* Whether a violation aborts the process (nonzero: abort); overrides
 * SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION. */
typedef void (*sp_ze_test_driver_set_abort_on_violation_fn)(int abort_on_violation);
/* Turns reorder mode on (nonzero) or off for commands taken from now on; overrides
 * SP_ZE_TEST_DRIVER_REORDER. */
typedef void (*sp_ze_test_driver_set_reorder_fn)(int reorder);

#ifdef __cplusplus
}
#endif

#endif
