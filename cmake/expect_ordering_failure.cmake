# Run by CTest in the fault preset (STREAMPOOL_FAULT_SKIP_DEVICE_WAIT=ON: the pool "forgets" its
# device-side waits). Runs one test program's ordering tests and passes only when they FAIL for
# the right reason: the program exits non-zero, every test matching FILTER fails, and
# nothing was skipped (a skip would mean the backend was not even there). A plain WILL_FAIL would
# also pass on a crash at start-up or a missing runtime, which proves nothing.
#
#   cmake -D PROGRAM=<path> -D FILTER=<gtest filter> -P expect_ordering_failure.cmake
foreach(var PROGRAM FILTER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_ordering_failure: ${var} is not set")
  endif()
endforeach()
execute_process(
  COMMAND "${PROGRAM}" "--gtest_filter=${FILTER}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
string(REGEX MATCHALL "\\[  FAILED  \\] [A-Za-z0-9_/]+\\.[A-Za-z0-9_/.]+" failed "${out}")
string(REGEX MATCH "\\[  SKIPPED \\]" skipped "${out}")
string(REGEX MATCH "\\[  PASSED  \\] [0-9]+" passed "${out}")
# Every test the filter selects must fail, not just one of them: "[  PASSED  ] 0 tests".
if(rc EQUAL 0 OR NOT failed OR skipped OR NOT passed STREQUAL "[  PASSED  ] 0")
  message("${out}")
  message(FATAL_ERROR "expect_ordering_failure: ${PROGRAM} --gtest_filter=${FILTER} exited with "
                      "${rc}, failed: '${failed}', skipped: '${skipped}', '${passed}'. With "
                      "device-side waits skipped, every ordering test selected must fail (not "
                      "pass, not skip, not crash at start-up)")
endif()
list(REMOVE_DUPLICATES failed)
message(STATUS "as expected without device-side waits: ${failed}")
