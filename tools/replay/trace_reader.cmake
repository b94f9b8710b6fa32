# The trace reader (trace.cpp, format: bench/traces/README.md) as a static library of its own,
# streampool_replay_trace: replay links it, and so do its test (tests/report/trace_reader_test.cpp)
# and fuzz/trace_fuzzer.cpp, which the fuzz preset builds without the benchmarks and so without
# replay. It needs nothing of the library but one header-only function of src/snapshot/json.hpp
# (utf8_length).
#
# gzip traces are read through zlib when it is found (zlib1g-dev), else through `gzip -dc`.
include_guard(GLOBAL)
include(streampool_warnings)

add_library(streampool_replay_trace STATIC "${CMAKE_CURRENT_LIST_DIR}/trace.cpp")
target_include_directories(streampool_replay_trace PUBLIC "${CMAKE_CURRENT_LIST_DIR}"
                                                  PRIVATE "${PROJECT_SOURCE_DIR}/src")
target_compile_features(streampool_replay_trace PUBLIC cxx_std_20)
streampool_set_warnings(streampool_replay_trace STRICT)

find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  target_link_libraries(streampool_replay_trace PRIVATE ZLIB::ZLIB)
  target_compile_definitions(streampool_replay_trace PUBLIC STREAMPOOL_REPLAY_ZLIB=1)
endif()
