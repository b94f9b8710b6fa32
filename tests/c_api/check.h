/* Shared by the pure-C11 tests in tests/c_api/: failure counting and the checks every one of them
 * uses. Header-only (static functions): each test is one translation unit. */
#ifndef STREAMPOOL_TESTS_C_API_CHECK_H
#define STREAMPOOL_TESTS_C_API_CHECK_H

#include <stdio.h>
#include <string.h>

#include "streampool.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Calls that must succeed: on failure print the status and message, and count it. */
#define OK(call)                                                          \
  do {                                                                    \
    sp_status_t ok_status_ = (call);                                      \
    if (ok_status_ != STREAMPOOL_STATUS_SUCCESS) {                        \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, \
              sp_status_string(ok_status_), sp_last_error_message());     \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

/* A call that must fail with INVALID_ARGUMENT and a message containing every non-NULL needle. */
#define REFUSED(call, n1, n2, n3)                                                                  \
  do {                                                                                             \
    sp_status_t st_ = (call);                                                                      \
    const char* m_ = sp_last_error_message();                                                      \
    if (st_ != STREAMPOOL_STATUS_INVALID_ARGUMENT || !contains(m_, (n1)) || !contains(m_, (n2)) || \
        !contains(m_, (n3))) {                                                                     \
      fprintf(stderr, "%s:%d: %s -> %s '%s', expected INVALID_ARGUMENT with '%s' '%s' '%s'\n",     \
              __FILE__, __LINE__, #call, sp_status_string(st_), m_, or_empty(n1), or_empty(n2),    \
              or_empty(n3));                                                                       \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

static inline int contains(const char* text, const char* needle) {
  return needle == NULL || strstr(text, needle) != NULL;
}

static inline const char* or_empty(const char* s) { return s != NULL ? s : ""; }

/* The pointer as the library prints it (%p). */
static inline const char* ptr_text(const void* p, char* buf, size_t n) {
  snprintf(buf, n, "%p", p);
  return buf;
}

/* A host device with the race detector on; `max_delay_us` > 0 makes unordered reuse overlap. */
static sp_device_t checking_device_with_delay(unsigned max_delay_us) {
  sp_host_options_t o;
  sp_device_t d = NULL;
  OK(sp_host_options_init(&o));
  o.checking = 1;
  o.max_delay_us = max_delay_us;
  OK(sp_device_create_host(&o, &d));
  return d;
}

/* The race detector saw nothing on d. */
static void expect_no_violations(sp_device_t d) {
  size_t n = 99;
  OK(sp_device_violation_count(d, &n));
  if (n != 0) {
    const char* text = NULL;
    OK(sp_device_violation_message(d, 0, &text));
    fprintf(stderr, "violation: %s\n", text != NULL ? text : "?");
  }
  CHECK(n == 0);
}

#endif
