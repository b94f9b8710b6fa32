#!/usr/bin/env bash
# Packs what scripts/device-check.sh needs into .gpurun/ (git-ignored): the GPU machine has CUDA,
# CMake and PyTorch but no GoogleTest, so the test programs are built here and carried.
#   bash scripts/device-pack.sh       (after: cmake --build --preset release)
# Also builds build/fault: the library with STREAMPOOL_FAULT_SKIP_DEVICE_WAIT=ON, which the same
# test programs load instead, to show that the tests catch a missing device-side wait.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build/fault -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMPOOL_BUILD_TESTS=OFF \
  -DSTREAMPOOL_BUILD_BENCHMARKS=OFF -DSTREAMPOOL_BUILD_EXAMPLES=OFF \
  -DSTREAMPOOL_FAULT_SKIP_DEVICE_WAIT=ON >/dev/null
cmake --build build/fault --target streampool -j "$(nproc)"
# Its own folders only: the packed comparison libraries (.gpurun/<variant>) stay.
rm -rf .gpurun/bin .gpurun/lib .gpurun/faultlib .gpurun/wheel && mkdir -p .gpurun/bin .gpurun/lib .gpurun/faultlib
grep -qx '/.gpurun/' .git/info/exclude 2>/dev/null || echo '/.gpurun/' >>.git/info/exclude
for t in build/release/tests/*_test build/release/tests/c_api_*; do
  [[ -x ${t} && -f ${t} ]] && strip --strip-debug -o ".gpurun/bin/$(basename "${t}")" "${t}"
done
strip --strip-debug -o .gpurun/bin/replay build/release/tools/replay/replay
# Each library under its SONAME, the name the programs linked against it load
# (libstreampool.so.0.2 while the major version is 0: CMakeLists.txt, SOVERSION).
soname() { objdump -p "$1" | awk '$1 == "SONAME" { print $2 }'; }
strip --strip-debug -o ".gpurun/lib/$(soname build/release/libstreampool.so)" \
  build/release/libstreampool.so
strip --strip-debug -o ".gpurun/lib/$(soname build/release/libstreampool_report.so)" \
  build/release/libstreampool_report.so
strip --strip-debug -o ".gpurun/faultlib/$(soname build/fault/libstreampool.so)" \
  build/fault/libstreampool.so
strip --strip-debug -o .gpurun/lib/libstreampool_torch_floor.so build/release/bench/libstreampool_torch_floor.so
# DEVICE_PACK_WHEEL_PYTHON=<python with pip>: also `pip wheel .` (PyPI reachable here, not there)
# into .gpurun/wheel/, for device-check.sh's python stage to install from.
if [[ -n ${DEVICE_PACK_WHEEL_PYTHON:-} ]]; then
  "${DEVICE_PACK_WHEEL_PYTHON}" -m pip wheel -q --no-deps -w .gpurun/wheel .
fi
du -sh .gpurun
