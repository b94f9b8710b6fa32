#!/usr/bin/env bash
# Builds and tests streampool: the release preset, then lint (scripts/lint.sh: clang-format and
# clang-tidy over the tree, either finding fails the run), then debug (STREAMPOOL_DEBUG_LEVEL=3:
# every assertion, and pool_state::validate() after every trim and, paced, large frees), then
# fault (device-side waits skipped on purpose: every backend's ordering tests must fail), then
# ASan+UBSan, then TSan, then (in CI, or when clang is installed) the fuzz preset: the model
# fuzzer briefly, the C ABI fuzzer for 60 s.
#
#   bash scripts/run-tests.sh
#
# Environment:
#   STREAMPOOL_QUICK=1        release preset only (skip the sanitizer builds), for local use.
#   STREAMPOOL_PRESETS="a b"  run exactly these presets instead (release lint debug fault asan tsan
#                             fuzz).
# Every preset runs even when an earlier one failed; the exit status is non-zero when any
# configure, build or test step failed. CTest's summary of every preset is repeated at the end.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "${SP_ROOT}"

if [[ -n ${STREAMPOOL_PRESETS:-} ]]; then
  read -r -a presets <<<"${STREAMPOOL_PRESETS}"
elif [[ ${STREAMPOOL_QUICK:-0} == 1 ]]; then
  presets=(release)
else
  presets=(release lint debug fault asan tsan)
  # clang + libFuzzer: a short run of the model fuzzer and 60 s of the C ABI fuzzer (fuzz/,
  # docs/testing.md). Always in CI (clang is installed below); locally when clang++ is there.
  if [[ ${CI:-} == true ]] || command -v clang++ >/dev/null 2>&1; then presets+=(fuzz); fi
fi

section "packages"
packages=("${SP_BASE_PACKAGES[@]}" "${SP_BACKEND_PACKAGES[@]}")
sanitizers=0
for p in "${presets[@]}"; do
  if [[ ${p} == fuzz ]]; then
    packages+=(clang)
  fi
  if [[ ${p} == asan || ${p} == tsan ]] && ((sanitizers == 0)); then
    packages+=("${SP_SANITIZER_PACKAGES[@]}")
    sanitizers=1
  fi
done
ensure_packages "${packages[@]}"
echo "CI=${CI:-} presets: ${presets[*]} jobs: ${SP_JOBS}"
c++ --version | head -n1
cmake --version | head -n1

failed=()
summaries=()

run_lint() {
  section "lint: clang-format and clang-tidy (-j${SP_JOBS})"
  if bash scripts/lint.sh all build/release; then
    summaries+=("---- lint" "format and clang-tidy clean")
    return 0
  fi
  summaries+=("---- lint" "FAILED: a format difference or a clang-tidy finding (above)")
  return 1
}

run_preset() {
  local preset=$1 rc
  if [[ ${preset} == lint ]]; then
    run_lint
    return
  fi
  local log="build/${preset}/ctest.log"
  section "${preset}: configure"
  local extra=()
  # In CI (2 cores, no GPU) the CUDA backend's host side is compiled, but not its nvcc kernels:
  # they take five of CI's 25 minutes and cannot run there. scripts/device-check.sh builds and
  # runs them on the GPU machine. STREAMPOOL_CI_CUDA_KERNELS=1 compiles them anyway.
  if [[ ${CI:-} == true && ${STREAMPOOL_CI_CUDA_KERNELS:-0} != 1 ]]; then
    extra+=(-DSTREAMPOOL_BUILD_CUDA_KERNELS=OFF)
  fi
  # PoCL is installed above, so an OpenCL test that finds no device is a failure, not a skip.
  extra+=(-DSTREAMPOOL_REQUIRE_OPENCL=ON)
  cmake --preset "${preset}" "${extra[@]}" || return 1
  section "${preset}: build (-j${SP_JOBS})"
  cmake --build --preset "${preset}" -j "${SP_JOBS}" || return 1
  section "${preset}: test"
  local runner=()
  if [[ ${preset} == asan || ${preset} == tsan || ${preset} == fuzz ]]; then
    runner=(without_aslr)
  fi
  set +e
  "${runner[@]}" ctest --preset "${preset}" -j "${SP_JOBS}" 2>&1 | tee "${log}"
  rc=${PIPESTATUS[0]}
  set -e
  # CTest's summary: from "N% tests passed" to the end (failed tests, total time).
  summaries+=("---- ${preset}" "$(sed -n '/tests passed,/,$p' "${log}")")
  return "${rc}"
}

for preset in "${presets[@]}"; do
  if ! run_preset "${preset}"; then
    failed+=("${preset}")
    section "${preset}: FAILED"
  fi
done

section "summary"
if ((${#summaries[@]})); then
  printf '%s\n' "${summaries[@]}"
fi
if ((${#failed[@]})); then
  echo "FAILED presets: ${failed[*]}"
  exit 1
fi
echo "all presets passed: ${presets[*]}"
