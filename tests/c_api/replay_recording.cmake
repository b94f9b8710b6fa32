# Run by CTest (recorded_trace_replays, tests/CMakeLists.txt): a live program records its
# allocations with the pool's allocation log, and tools/replay plays the recording. Passes when the
# recorder succeeds, the replay exits 0 (every event played, the pool balanced) on the host and
# exact backends, takes every event the recorder counted, and both report the peak live the
# recorder computed from its own requests.
#
#   cmake -D RECORDER=<recording_test> -D REPLAY=<replay> -D TRACE=<file> -P replay_recording.cmake
foreach(var RECORDER REPLAY TRACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "replay_recording: ${var} is not set")
  endif()
endforeach()
file(REMOVE "${TRACE}")
execute_process(
  COMMAND "${RECORDER}" "${TRACE}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
string(REGEX MATCH "recorded: ([0-9]+) events, peak live ([0-9]+) bytes \\(([0-9.]+) MiB\\)" line
             "${out}")
if(NOT rc EQUAL 0 OR NOT line)
  message("${out}")
  message(FATAL_ERROR "replay_recording: ${RECORDER} ${TRACE} exited with ${rc}")
endif()
set(events "${CMAKE_MATCH_1}")
set(mib "${CMAKE_MATCH_3}")
message(STATUS "${line}")

execute_process(
  COMMAND "${REPLAY}" --backend host --backend exact "${TRACE}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
set(problems "")
if(NOT rc EQUAL 0)
  string(APPEND problems " it exited with ${rc};")
endif()
if(NOT out MATCHES ", ${events} events replayed \\(alloc, free_completed\\), 0 ignored")
  string(APPEND problems " it did not replay the ${events} recorded events and nothing else;")
endif()
foreach(allocator "exact fit \\(reference\\)" "streampool \\(host backend\\)")
  if(NOT out MATCHES "\\| ${allocator} \\| ${mib} \\|")
    string(APPEND problems " '${allocator}' does not report peak live ${mib} MiB;")
  endif()
endforeach()
if(problems)
  message("${out}")
  message(FATAL_ERROR "replay_recording: ${REPLAY} --backend host --backend exact ${TRACE}:"
                      "${problems}")
endif()
file(REMOVE "${TRACE}")
message(STATUS "replayed: ${events} events, peak live ${mib} MiB on both backends")
