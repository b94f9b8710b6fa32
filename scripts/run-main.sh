#!/usr/bin/env bash
# The main job: build the release preset, run the demo and the benchmarks.
#
#   bash scripts/run-main.sh
#
# Environment:
#   STREAMPOOL_BENCH_FILTER    regex passed as --benchmark_filter to Google Benchmark programs
#                              (default: all); other programs in build/release/bench run with
#                              --quick when their name matches it. A filter that matches nothing
#                              in some program is not an error.
#   STREAMPOOL_BENCH_MIN_TIME  seconds per benchmark (default 0.05: a smoke run, not a measurement;
#                              use 0.5 or more for numbers you report).
# A build failure, a failing demo or a crashing benchmark fails the script.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "${SP_ROOT}"

section "packages"
ensure_packages "${SP_BASE_PACKAGES[@]}" "${SP_BACKEND_PACKAGES[@]}"

section "configure (release preset)"
cmake --preset release
section "build (release preset, -j${SP_JOBS})"
cmake --build --preset release -j "${SP_JOBS}"

demo=build/release/examples/streampool_demo
if [[ -x ${demo} ]]; then
  section "demo: ${demo}"
  "${demo}"
else
  section "demo: ${demo} not built yet (examples/streampool_demo.cpp missing), skipped"
fi

filter=${STREAMPOOL_BENCH_FILTER:-.}
min_time=${STREAMPOOL_BENCH_MIN_TIME:-0.05}
# Programs only: shared objects built beside them (bench/torch's floor plug-in) are executable
# files too.
mapfile -t benches < <(find build/release/bench -maxdepth 1 -type f -executable \
  ! -name '*.so' ! -name '*.so.*' 2>/dev/null | sort)
if ((${#benches[@]} == 0)); then
  section "benchmarks: none built yet (bench/*.cpp missing), skipped"
fi
for bench in "${benches[@]}"; do
  name=$(basename "${bench}")
  log=$(mktemp)
  if grep -qa '_ZN9benchmark' "${bench}"; then
    # A Google Benchmark program: the filter selects benchmarks inside it.
    section "benchmark: ${bench} (filter '${filter}', min time ${min_time}s)"
    set +e
    "${bench}" --benchmark_filter="${filter}" --benchmark_min_time="${min_time}" 2>&1 | tee "${log}"
    rc=${PIPESTATUS[0]}
    set -e
    if ((rc != 0)) && grep -q 'Failed to match any benchmarks' "${log}"; then
      echo "(no benchmark in ${bench} matches '${filter}')"
      rc=0
    fi
  else
    # A stand-alone program (e.g. gpu_pool_bench): run in its quick mode; the filter selects
    # programs by name; exit status 77 means "skipped" (no GPU here).
    if ! [[ ${name} =~ ${filter} ]]; then
      rm -f "${log}"
      continue
    fi
    section "benchmark: ${bench} --quick"
    set +e
    "${bench}" --quick 2>&1 | tee "${log}"
    rc=${PIPESTATUS[0]}
    set -e
    if ((rc == 77)); then
      echo "(${name} skipped itself)"
      rc=0
    fi
  fi
  rm -f "${log}"
  if ((rc != 0)); then
    echo "error: ${bench} failed with exit status ${rc}" >&2
    exit "${rc}"
  fi
done

section "done"
