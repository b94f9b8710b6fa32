# The Level Zero backend's tests, on the project's test driver. Included at the end of
# tests/level_zero/CMakeLists.txt, which defines the driver (streampool_ze_test_driver) and
# streampool_add_level_zero_test() (each test runs twice: plain and under the loader's
# validation layer, label level_zero, ZE_ENABLE_ALT_DRIVERS naming the driver).
#
#   level_zero_smoke_test        end to end: device, memory, every command, markers, virtual
#                                memory, a pool and arrays, clean shutdown; and (in a child process
#                                whose ZE_ENABLE_ALT_DRIVERS names a missing file) what a program
#                                sees without any driver
#   level_zero_conformance_test  PoolConformance and ArrayConformance, with and without the
#                                driver's delay injection; ScenarioConformance (the origin
#                                scenarios and the ordering test, which fails in a
#                                STREAMPOOL_FAULT_SKIP_DEVICE_WAIT build)
#   level_zero_scenarios_test    the event-reuse stress
#   level_zero_model_test        the model test, with the driver's checks at each teardown
#   *_reorder                    the smoke and conformance tests once more in the driver's reorder
#                                mode (SP_ZE_TEST_DRIVER_REORDER=1: commands of a list that nothing
#                                orders run in reverse; driver/README.md); they pass because the
#                                backend puts a barrier between commands
#   level_zero_smoke_test_shared_system  the smoke test with the driver reporting shared system
#                                allocation support: downloads go straight to pageable memory
#
# With the driver present none of them skips: a missing device is a failure.
if(NOT streampool_have_level_zero_backend)
  message(STATUS "streampool: no Level Zero backend in this build; its tests are not built")
  return()
endif()

foreach(name level_zero_smoke_test level_zero_conformance_test level_zero_scenarios_test
             level_zero_model_test)
  streampool_add_level_zero_test(${name} SOURCES "${CMAKE_CURRENT_LIST_DIR}/${name}.cpp" TIMEOUT
                                 180)
endforeach()
target_link_libraries(level_zero_model_test PRIVATE streampool_test_model)
# Reorder mode, with the conformance test's own delay-injection instantiations letting runs of
# unordered commands accumulate.
foreach(name level_zero_smoke_test level_zero_conformance_test)
  add_test(NAME ${name}_reorder COMMAND ${name})
  set_tests_properties(
    ${name}_reorder
    PROPERTIES LABELS "level_zero" TIMEOUT 180
               ENVIRONMENT
               "${streampool_ze_test_env};SP_ZE_TEST_DRIVER_REORDER=1;${STREAMPOOL_SANITIZER_ENV}")
endforeach()
# The direct download path (the device may write pageable memory).
add_test(NAME level_zero_smoke_test_shared_system COMMAND level_zero_smoke_test)
set_tests_properties(
  level_zero_smoke_test_shared_system
  PROPERTIES LABELS "level_zero" TIMEOUT 180
             ENVIRONMENT
             "${streampool_ze_test_env};SP_ZE_TEST_DRIVER_SHARED_SYSTEM=1;${STREAMPOOL_SANITIZER_ENV}")
# The fault preset: without device-side waits the ordering test must fail on the test driver too.
streampool_add_fault_check(
  level_zero_conformance_test "LevelZero/ScenarioConformance/*.CrossStreamReuseWaits*"
  ENVIRONMENT "${streampool_ze_test_env}")
