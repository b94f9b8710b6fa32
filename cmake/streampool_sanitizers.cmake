# Sanitizer flags for the whole build (STREAMPOOL_USE_ASAN / STREAMPOOL_USE_TSAN).
#
# They are added with add_compile_options/add_link_options so that every target in this
# directory tree is instrumented alike: a sanitizer that sees only half the program reports
# false positives (TSan) or misses the bugs (ASan). Only C and C++ are instrumented; nvcc does
# not understand -fsanitize.
#
# Sets STREAMPOOL_SANITIZER_FLAGS (a list, empty when off) and STREAMPOOL_SANITIZER_ENV (runtime
# options for tests: stop at the first report, print stacks).
include_guard(GLOBAL)

set(STREAMPOOL_SANITIZER_FLAGS "")
set(STREAMPOOL_SANITIZER_ENV "")

if(STREAMPOOL_USE_ASAN AND STREAMPOOL_USE_TSAN)
  message(FATAL_ERROR "STREAMPOOL_USE_ASAN and STREAMPOOL_USE_TSAN cannot be combined")
endif()

if(STREAMPOOL_USE_ASAN)
  # UBSan rides along with ASan; -fno-sanitize-recover makes every UB report fail the test.
  set(STREAMPOOL_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
                                 -fno-omit-frame-pointer)
  # protect_shadow_gap=0: the CUDA driver maps memory in ASan's shadow gap and fails without it.
  set(STREAMPOOL_SANITIZER_ENV
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_init_order=1:detect_stack_use_after_return=1:protect_shadow_gap=0"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
elseif(STREAMPOOL_USE_TSAN)
  set(STREAMPOOL_SANITIZER_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
  set(STREAMPOOL_SANITIZER_ENV
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/cmake/tsan.supp")
endif()

if(STREAMPOOL_SANITIZER_FLAGS)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${STREAMPOOL_SANITIZER_FLAGS}>")
  add_link_options(${STREAMPOOL_SANITIZER_FLAGS})
endif()
