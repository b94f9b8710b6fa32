# Run by CTest (test consumer_pkg_config): installs the streampool build in STREAMPOOL_BUILD_DIR
# into WORK_DIR/prefix, then compiles SOURCE (a C program) with the flags of
#   pkg-config --cflags --libs streampool     (PKG_CONFIG_PATH: the prefix's pkgconfig folder)
# and runs it; then moves the whole prefix elsewhere and does it again, which only works when
# streampool.pc's paths are relative to its own folder. Any failing step fails the test.
foreach(var STREAMPOOL_BUILD_DIR SOURCE WORK_DIR C_COMPILER PKG_CONFIG)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_pkg_config_test.cmake: -D ${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs a command; fails the test when it fails; its output (stripped) goes to out_var if given.
function(step out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${out}" out)
  message("$ ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config consumer test: step failed (exit ${rc})")
  endif()
  if(out_var)
    set(${out_var} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(real_path out path)
  get_filename_component(real "${path}" REALPATH)
  set(${out} "${real}" PARENT_SCOPE)
endfunction()

# Builds and runs the program against the prefix `prefix`, through pkg-config alone.
function(build_and_run prefix tag)
  file(GLOB_RECURSE pc_files "${prefix}/*/streampool.pc")
  list(LENGTH pc_files count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "pkg-config consumer test: expected one streampool.pc under ${prefix}, "
                        "found '${pc_files}'")
  endif()
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")

  step(version "${PKG_CONFIG}" --modversion streampool)
  step(flags "${PKG_CONFIG}" --cflags --libs streampool)
  step(pc_prefix "${PKG_CONFIG}" --variable=prefix streampool)
  step(libdir "${PKG_CONFIG}" --variable=libdir streampool)
  step(includedir "${PKG_CONFIG}" --variable=includedir streampool)

  # Every path pkg-config gives must lie in this prefix, wherever the prefix is now.
  real_path(want "${prefix}")
  real_path(got "${pc_prefix}")
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "pkg-config consumer test: prefix is ${pc_prefix} (${got}), not ${want}")
  endif()
  if(NOT EXISTS "${includedir}/streampool.h")
    message(FATAL_ERROR "pkg-config consumer test: no streampool.h in includedir ${includedir}")
  endif()
  if(NOT EXISTS "${libdir}/libstreampool.so")
    message(FATAL_ERROR "pkg-config consumer test: no libstreampool.so in libdir ${libdir}")
  endif()

  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(program "${WORK_DIR}/streampool_pkg_config_${tag}")
  step("" "${C_COMPILER}" -std=c11 -Wall -Wextra -Werror "${SOURCE}" ${flags} -o "${program}")
  step("" "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${libdir}" "${program}" "${version}")
endfunction()

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
step("" "${CMAKE_COMMAND}" --install "${STREAMPOOL_BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
     ${config_args})
build_and_run("${WORK_DIR}/prefix" installed)
file(MAKE_DIRECTORY "${WORK_DIR}/moved")
file(RENAME "${WORK_DIR}/prefix" "${WORK_DIR}/moved/elsewhere")
build_and_run("${WORK_DIR}/moved/elsewhere" moved)
