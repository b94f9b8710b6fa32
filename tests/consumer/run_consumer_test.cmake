# Run by CTest (test consumer_find_package): installs the streampool build in
# STREAMPOOL_BUILD_DIR into WORK_DIR/prefix, then configures, builds and runs tests/consumer
# against it. Any failing step fails the test with that step's output.
foreach(var STREAMPOOL_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer_test.cmake: -D ${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("$ ${ARGN}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: step failed (exit ${rc})")
  endif()
endfunction()

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()

step("${CMAKE_COMMAND}" --install "${STREAMPOOL_BUILD_DIR}" --prefix "${prefix}" ${config_args})
step("${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${build}" -G "${GENERATOR}"
     "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
     "-DCMAKE_BUILD_TYPE=${CONFIG}")
step("${CMAKE_COMMAND}" --build "${build}" ${config_args})

find_program(consumer streampool_consumer PATHS "${build}" "${build}/${CONFIG}" NO_DEFAULT_PATH)
if(NOT consumer)
  message(FATAL_ERROR "consumer test: streampool_consumer was not built in ${build}")
endif()
step("${consumer}")
