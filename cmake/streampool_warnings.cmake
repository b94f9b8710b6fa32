# streampool_set_warnings(<target> [STRICT])
#
# Warnings for streampool's own C and C++ code (never for nvcc's device code, never exported to
# users). STRICT adds -Wsign-conversion, which the library sources are written for; tests and
# examples get the rest, because GoogleTest's macros trip -Wsign-conversion in user code.
# STREAMPOOL_WARNINGS_AS_ERRORS=OFF drops -Werror (for a compiler newer than the ones we test).
include_guard(GLOBAL)

function(streampool_set_warnings target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "STRICT" "" "")
  set(flags -Wall -Wextra)
  if(arg_STRICT)
    list(APPEND flags -Wsign-conversion)
  endif()
  if(STREAMPOOL_WARNINGS_AS_ERRORS)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:${flags}>")
endfunction()
