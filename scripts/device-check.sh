#!/usr/bin/env bash
# Runs on the GPU machine, in the repository root, after scripts/device-pack.sh: the GPU tests
# (conformance, origin scenarios, backend contract), compute-sanitizer over the origin scenarios,
# the fault-injection library against the same tests, then gpu_pool_bench and replay built there
# (with PyTorch's allocator as an anchor when libtorch is found). Everything goes to $OUT.
# DEVICE_CHECK_SKIP_BENCH=1 stops after the tests.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "${out}"
root=$(pwd)
run() { # name, command...: logs to $out/name.txt and prints one status line
  local name=$1
  shift
  local t0=${SECONDS}
  "$@" >"${out}/${name}.txt" 2>&1
  local rc=$?
  echo "${name}: rc=${rc} ($((SECONDS - t0)) s) $(grep -E 'PASSED|FAILED|SKIPPED|ERROR SUMMARY' "${out}/${name}.txt" | tr '\n' ' ' | cut -c1-300)"
}
nvidia-smi -L
export LD_LIBRARY_PATH=${root}/.gpurun/lib
for t in cuda_backend_test cuda_conformance_test cuda_scenarios_test; do
  run "${t}" ".gpurun/bin/${t}"
done
export STREAMPOOL_MODEL_SEEDS=200
for t in origin_reproducer_test invariants_test model_test; do
  run "host_${t}" ".gpurun/bin/${t}"
done
run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 \
  .gpurun/bin/cuda_scenarios_test --gtest_filter='CudaOrigin.ArraysDroppedAfter*:CudaOrdering.*'
run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 \
  .gpurun/bin/cuda_scenarios_test --gtest_filter='CudaOrigin.ArraysDroppedConcurrently*'
run fault_scenarios env LD_LIBRARY_PATH="${root}/.gpurun/faultlib" \
  .gpurun/bin/cuda_scenarios_test --gtest_filter='CudaOrdering.*'
run fault_conformance env LD_LIBRARY_PATH="${root}/.gpurun/faultlib" \
  .gpurun/bin/cuda_conformance_test
unset LD_LIBRARY_PATH
if [[ ${DEVICE_CHECK_SKIP_BENCH:-0} == 1 ]]; then exit 0; fi
torch=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null || true)
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMPOOL_BUILD_TESTS=OFF
  -DSTREAMPOOL_BUILD_EXAMPLES=OFF -DSTREAMPOOL_BUILD_BENCHMARKS=ON
  -DSTREAMPOOL_WARNINGS_AS_ERRORS=OFF)
t0=${SECONDS}
{ cmake -S . -B build/gpu "${cfg[@]}" -DSTREAMPOOL_BENCH_TORCH=ON -DSTREAMPOOL_TORCH_DIR="${torch}" &&
  cmake --build build/gpu -j16 --target gpu_pool_bench replay; } >"${out}/bench_build.txt" 2>&1 ||
  { cmake -S . -B build/gpu -DSTREAMPOOL_BENCH_TORCH=OFF &&
    cmake --build build/gpu -j16 --target gpu_pool_bench replay; } >>"${out}/bench_build.txt" 2>&1
echo "bench build: $((SECONDS - t0)) s"
run gpu_pool_bench build/gpu/bench/gpu_pool_bench
run replay build/gpu/tools/replay/replay bench/traces/gpt2-train.txt.gz
tail -n 60 "${out}/gpu_pool_bench.txt"
cat "${out}/replay.txt"
