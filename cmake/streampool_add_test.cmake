# streampool_add_test(<name> SOURCES <src>... [GPUS <n>] [LABELS <label>...] [TIMEOUT <seconds>]
#                     [PAST_LSAN_CRASH])
#
# One GoogleTest executable <name>, linked to streampool and GTest::gtest_main, registered with
# CTest as a single test that runs the whole binary (one process per binary keeps ctest fast;
# set STREAMPOOL_DISCOVER_TESTS=ON to register each case instead).
#
#   GPUS     GPUs the test needs. > 0 adds the label `gpu` and one CTest resource group per GPU
#            ("<n>,gpus:1"), so `ctest --resource-spec-file` never runs two GPU tests on one
#            device; a binary whose output says [  SKIPPED ] (no GPU here) is reported as skipped.
#   LABELS   extra CTest labels; every test also gets `unit` or `gpu`.
#   TIMEOUT  seconds (default 300; tripled under sanitizers).
#   PAST_LSAN_CRASH  under ASan, run through cmake/run_past_lsan_crash.cmake: a crash of
#            LeakSanitizer itself at exit (not a report) runs the binary once more. For tests of
#            uninstrumented runtimes whose threads exit at process exit (PoCL).
#
# Under a sanitizer build the test binary gets STREAMPOOL_TEST_UNDER_SANITIZER=1 so stress tests
# can scale themselves down, and the environment from STREAMPOOL_SANITIZER_ENV.
include_guard(GLOBAL)

include(GoogleTest)
include(streampool_warnings)

function(streampool_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PAST_LSAN_CRASH" "GPUS;TIMEOUT" "SOURCES;LABELS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "streampool_add_test(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "streampool_add_test(${name}): SOURCES is required")
  endif()
  if(NOT DEFINED arg_GPUS)
    set(arg_GPUS 0)
  endif()
  if(NOT DEFINED arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  if(STREAMPOOL_SANITIZER_FLAGS)
    math(EXPR arg_TIMEOUT "${arg_TIMEOUT} * 3")
  endif()

  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE streampool::streampool GTest::gtest_main Threads::Threads)
  # White-box tests may include the library's private headers (header-only internals only: the
  # library hides every symbol not marked STREAMPOOL_EXPORT).
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  if(STREAMPOOL_SANITIZER_FLAGS)
    target_compile_definitions(${name} PRIVATE STREAMPOOL_TEST_UNDER_SANITIZER=1)
  endif()
  streampool_set_warnings(${name})

  set(labels ${arg_LABELS})
  if(arg_GPUS GREATER 0)
    list(APPEND labels gpu)
  else()
    list(APPEND labels unit)
  endif()

  if(STREAMPOOL_DISCOVER_TESTS)
    set(props LABELS "${labels}" TIMEOUT ${arg_TIMEOUT})
    if(STREAMPOOL_SANITIZER_ENV)
      list(APPEND props ENVIRONMENT "${STREAMPOOL_SANITIZER_ENV}")
    endif()
    gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
    return()
  endif()

  if(arg_PAST_LSAN_CRASH AND STREAMPOOL_USE_ASAN)
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -D "PROGRAM=$<TARGET_FILE:${name}>" -P
                                  "${PROJECT_SOURCE_DIR}/cmake/run_past_lsan_crash.cmake")
    math(EXPR arg_TIMEOUT "${arg_TIMEOUT} * 2")  # room for the one rerun
  else()
    add_test(NAME ${name} COMMAND ${name})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${arg_TIMEOUT})
  if(STREAMPOOL_SANITIZER_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${STREAMPOOL_SANITIZER_ENV}")
  endif()
  if(arg_GPUS GREATER 0)
    set_tests_properties(${name} PROPERTIES RESOURCE_GROUPS "${arg_GPUS},gpus:1"
                                            SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
endfunction()
