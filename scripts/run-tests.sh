#!/usr/bin/env bash
# Builds and tests streampool: the release preset, then lint (scripts/lint.sh: clang-format and
# clang-tidy over the tree, either finding fails the run), then debug (STREAMPOOL_DEBUG_LEVEL=3:
# every assertion, and pool_state::validate() after every trim and, paced, large frees), then
# fault (device-side waits skipped on purpose: every backend's ordering tests must fail), then
# ASan+UBSan, then TSan, then the python stage (the package as pip installs it: `pip install .` into
# a fresh venv and tests/python run against it from outside the tree, then `pip wheel .` installed
# into a second venv), then the torch preset (the native PyTorch allocator, work in progress of
# issue 44, built against torch's wheel and CUDA's runtime headers from PyPI with no CUDA toolkit,
# clang-tidy over its sources, and its tests on the host backend), then (in CI, or when clang is installed) the fuzz preset: the
# model fuzzer briefly, the C ABI fuzzer for 60 s, the trace and snapshot readers' fuzzers for 30 s
# each.
#
#   bash scripts/run-tests.sh
#
# Environment:
#   STREAMPOOL_QUICK=1        release preset only (skip the sanitizer builds), for local use.
#   STREAMPOOL_PRESETS="a b"  run exactly these presets instead (release lint debug fault asan tsan
#                             python torch fuzz).
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
  presets=(release lint debug fault asan tsan python torch)
  # clang + libFuzzer: a short run of the model fuzzer, 60 s of the C ABI fuzzer and 30 s each of
  # the trace and snapshot readers' (fuzz/, docs/testing.md). Always in CI (clang is installed below); locally when clang++ is there.
  if [[ ${CI:-} == true ]] || command -v clang++ >/dev/null 2>&1; then presets+=(fuzz); fi
fi

section "packages"
packages=("${SP_BASE_PACKAGES[@]}" "${SP_BACKEND_PACKAGES[@]}")
sanitizers=0
for p in "${presets[@]}"; do
  if [[ ${p} == fuzz ]]; then
    packages+=(clang)
  fi
  if [[ ${p} == python || ${p} == torch ]]; then
    packages+=(python3-venv)
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
  section "lint: clang-format, clang-tidy and complexity (-j${SP_JOBS})"
  if bash scripts/lint.sh all build/release; then
    summaries+=("---- lint" "format, clang-tidy and complexity clean")
    return 0
  fi
  summaries+=("---- lint" "FAILED: a format difference, a clang-tidy finding or a function over the complexity bound (above)")
  return 1
}

# The python stage: the package as a user installs it (docs/python.md, "Install"), in scratch
# folders outside the source tree. `pip install .` into a fresh venv (build isolation: pip fetches
# scikit-build-core from PyPI, and CMake builds the library), pytest and numpy from PyPI, then
# tests/python run by pytest from outside the tree against the installed package: no
# STREAMPOOL_LIBRARY, no PYTHONPATH, and STREAMPOOL_EXPECT_INSTALLED=1, so that
# tests/python/test_install.py checks where the package and its library came from. Then
# `pip wheel .` and that wheel installed into a second fresh venv, which allocates on the host
# device. Each pip command builds the library once, in its own temporary build tree (about 20 s
# each on 2 cores without the CUDA kernels).
run_python() {
  local started=${SECONDS} log=build/python/pytest.log work rc result wheel
  mkdir -p build/python
  work=$(mktemp -d "${TMPDIR:-/tmp}/streampool-python.XXXXXX")
  # A failed step: the summary says which, and the scratch folder is kept for a look.
  python_failed() {
    summaries+=("---- python" "FAILED: $* (above; scratch folder ${work})")
    return 1
  }
  # What the user's environment must not provide: the installed package needs none of it.
  local clean=(env -u STREAMPOOL_LIBRARY -u PYTHONPATH -u PYTHONHOME
    "CMAKE_BUILD_PARALLEL_LEVEL=${SP_JOBS}" PIP_DISABLE_PIP_VERSION_CHECK=1)
  local settings=()
  # As for the presets: no nvcc kernels in CI unless asked (run_preset says why).
  if [[ ${CI:-} == true && ${STREAMPOOL_CI_CUDA_KERNELS:-0} != 1 ]]; then
    settings+=(--config-settings=cmake.define.STREAMPOOL_BUILD_CUDA_KERNELS=OFF)
  fi

  section "python: pip install . into a fresh venv (${work}/venv, -j${SP_JOBS})"
  "${SP_PYTHON}" -m venv "${work}/venv" || { python_failed "python3 -m venv"; return; }
  "${clean[@]}" "${work}/venv/bin/pip" install "${settings[@]}" . ||
    { python_failed "pip install ."; return; }
  "${clean[@]}" "${work}/venv/bin/pip" install pytest numpy mypy jsonschema hypothesis ||
    { python_failed "pip install pytest numpy mypy jsonschema hypothesis"; return; }
  # The type hints the wheel ships (py.typed) must hold together.
  (cd "${work}" && "${clean[@]}" "${work}/venv/bin/python" -m mypy -p streampool) ||
    { python_failed "mypy -p streampool (the installed package's type hints)"; return; }

  section "python: pytest against the installed package, from ${work}"
  set +e
  (cd "${work}" && "${clean[@]}" STREAMPOOL_EXPECT_INSTALLED=1 STREAMPOOL_REQUIRE_OPENCL=1 \
    "${work}/venv/bin/python" -m pytest -p no:cacheprovider --import-mode=importlib -rs \
    "${SP_ROOT}/tests/python") 2>&1 | tee "${log}"
  rc=${PIPESTATUS[0]}
  set -e
  # pytest's last line, "==== 48 passed in 11.0s ====", without the rules.
  result=$(grep -E '^=+ .* in [0-9.]+s' "${log}" | tail -n1 | sed -E 's/^=+ (.*) =+$/\1/' || true)
  if ((rc != 0)); then
    python_failed "pytest against the installed package: ${result:-no summary}"
    return
  fi

  section "python: pip wheel ., installed into a second fresh venv"
  "${clean[@]}" "${work}/venv/bin/pip" wheel "${settings[@]}" --no-deps -w "${work}/wheels" . ||
    { python_failed "pip wheel ."; return; }
  wheel=$(find "${work}/wheels" -name 'streampool-*.whl' | head -n1)
  [[ -n ${wheel} ]] || { python_failed "pip wheel . made no streampool wheel"; return; }
  "${SP_PYTHON}" -m venv "${work}/venv2" || { python_failed "python3 -m venv"; return; }
  "${clean[@]}" "${work}/venv2/bin/pip" install "${wheel}" ||
    { python_failed "pip install $(basename "${wheel}")"; return; }
  # The wheel holds each library once (the allocator and the memory picture's), as plain files,
  # and py.typed; installed, it allocates and draws a pool's picture.
  (cd "${work}" && "${clean[@]}" "${work}/venv2/bin/python" -c '
import os, sys, zipfile
import streampool as sp
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = [n for n in names if "libstreampool" in n]
assert libs == ["streampool/libstreampool.so", "streampool/libstreampool_report.so"], libs
assert "streampool/py.typed" in names, names
assert os.path.dirname(sp._capi.lib._name) == os.path.dirname(sp.__file__), sp._capi.lib._name
d = sp.Device.host()
a = sp.Array(4, "f", device=d)
a.fill(1.0)
assert a.tolist() == [1.0] * 4, a.tolist()
import streampool.report
page = streampool.report.html(d.default_pool().snapshot())
assert page.startswith("<!DOCTYPE html>"), page[:40]
print(os.path.basename(sys.argv[1]), "installed:", sp.__file__, "Array(4).fill(1.0):", a.tolist(),
      "picture:", len(page), "bytes")
' "${wheel}") || { python_failed "the wheel in a second venv"; return; }

  rm -rf "${work}"
  summaries+=("---- python"
    "pytest against the installed package: ${result}"
    "$(basename "${wheel}"): installed in a second venv, allocates on the host device"
    "python stage: $((SECONDS - started)) s")
}

# The torch preset's wheels (common.sh, SP_TORCH_WHEELS: torch with its headers, libc10 and
# libc10_cuda; CUDA's runtime headers and libcudart), with --no-deps and no pip cache into a fresh
# venv in a scratch folder, torch_work (removed when the stage passes); sets torch_site to its
# site-packages. No CUDA toolkit is needed (src/torch/CMakeLists.txt, STREAMPOOL_TORCH_CUDA_DIR).
# `import torch` would need the rest of CUDA's libraries (cuBLAS, cuDNN, NCCL...: about 2 GB more
# from PyPI), so the tests call PyTorch's allocator interface from C++ (tests/torch_native/).
torch_work=""
torch_site=""
install_torch_wheels() {
  torch_work=$(mktemp -d "${TMPDIR:-/tmp}/streampool-torch.XXXXXX")
  section "torch: ${SP_TORCH_WHEELS[*]} (--no-deps, no cache) into ${torch_work}/venv"
  "${SP_PYTHON}" -m venv "${torch_work}/venv" || return 1
  PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "${torch_work}/venv/bin/pip" install --no-deps --progress-bar off "${SP_TORCH_WHEELS[@]}" ||
    return 1
  torch_site=$("${torch_work}/venv/bin/python" -c \
    'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
}

run_preset() {
  local preset=$1 rc started=${SECONDS} wheels_s=0
  if [[ ${preset} == lint ]]; then
    run_lint
    return
  fi
  if [[ ${preset} == python ]]; then
    run_python
    return
  fi
  local log="build/${preset}/ctest.log"
  local extra=()
  if [[ ${preset} == torch ]]; then
    install_torch_wheels || { summaries+=("---- torch" "FAILED: pip install (above)"); return 1; }
    wheels_s=$((SECONDS - started))
    extra+=("-DSTREAMPOOL_TORCH_NATIVE_DIR=${torch_site}/torch"
      "-DSTREAMPOOL_TORCH_CUDA_DIR=${torch_site}/${SP_TORCH_CUDA_SUBDIR}")
  fi
  section "${preset}: configure"
  # In CI (2 cores, no GPU) the CUDA backend's host side is compiled, but not its nvcc kernels:
  # they take five of CI's 25 minutes and cannot run there. scripts/device-check.sh builds and
  # runs them on the GPU machine. STREAMPOOL_CI_CUDA_KERNELS=1 compiles them anyway.
  if [[ ${CI:-} == true && ${STREAMPOOL_CI_CUDA_KERNELS:-0} != 1 ]]; then
    extra+=(-DSTREAMPOOL_BUILD_CUDA_KERNELS=OFF)
  fi
  # PoCL is installed above, so an OpenCL test that finds no device is a failure, not a skip.
  extra+=(-DSTREAMPOOL_REQUIRE_OPENCL=ON)
  # So are Chromium and PIL: the memory picture's render test must run, not skip.
  extra+=(-DSTREAMPOOL_REQUIRE_CHROMIUM=ON)
  # Debian's interpreter, for which python3-pytest is installed (PATH may put another first).
  extra+=("-DPython3_EXECUTABLE=${SP_PYTHON}")
  cmake --preset "${preset}" "${extra[@]}" || return 1
  section "${preset}: build (-j${SP_JOBS})"
  cmake --build --preset "${preset}" -j "${SP_JOBS}" || return 1
  if [[ ${preset} == torch ]]; then
    # The lint preset cannot read src/torch/ (no torch headers there): linted here.
    section "torch: clang-tidy src/torch/"
    bash scripts/lint.sh --tidy build/torch 'src/torch/*.cpp' ||
      { summaries+=("---- torch" "FAILED: clang-tidy src/torch/ (above)"); return 1; }
  fi
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
  if [[ ${preset} == torch ]]; then
    summaries+=("torch stage: $((SECONDS - started)) s (wheels downloaded and installed: ${wheels_s} s)")
    # The venv is kept for a look when a test failed; libstreampool_torch's RUNPATH points there.
    if ((rc == 0)); then rm -rf "${torch_work}"; fi
  fi
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
