#!/usr/bin/env bash
# Runs on the GPU machine: gpu_pool_bench of this tree's library against a base library, in
# alternating order in one call (A B A B ...), so that a change can be judged against its base on
# the same machine at the same time (compare ratios to the anchors, not absolute numbers between
# calls). Prepare here:
#   bash scripts/device-pack.sh                      # this tree -> .gpurun/lib
#   BASE=<rev> bash scripts/device-bench-compare.sh --pack
#                                                    # <rev>'s headers and library -> .gpurun/base
# then on the GPU machine: bash scripts/device-bench-compare.sh [ROUNDS] [--quick]
# Output: $OUT/bench_{new,base}_<round>.txt. PIN="taskset -c 3" runs both under that command (the
# one-thread rows of one binary swing 2x between runs on the H200 machine when unpinned).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ${1:-} == --pack ]]; then
  : "${BASE:?BASE=<git revision> to compare against}"
  wt=$(mktemp -d)
  git worktree add -q --detach "${wt}" "${BASE}"
  cmake -S "${wt}" -B "${wt}/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTREAMPOOL_BUILD_TESTS=OFF -DSTREAMPOOL_BUILD_BENCHMARKS=OFF -DSTREAMPOOL_BUILD_EXAMPLES=OFF \
    >/dev/null
  cmake --build "${wt}/build" --target streampool -j "$(nproc)"
  rm -rf .gpurun/base && mkdir -p .gpurun/base/lib
  cp -r "${wt}/include" .gpurun/base/include
  strip --strip-debug -o .gpurun/base/lib/libstreampool.so.0 "${wt}"/build/libstreampool.so.0.*
  git -C "${wt}" rev-parse --short HEAD >.gpurun/base/REVISION
  git worktree remove --force "${wt}"
  exit 0
fi
rounds=${1:-2}
shift || true
out=${OUT:-/tmp/out}
mkdir -p "${out}" /tmp/cmp
torch=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
nvcc -O2 -arch=sm_90 -c bench/spin_kernel.cu -o /tmp/cmp/spin.o
build() { # name, include dir, library dir
  g++ -O2 -std=c++20 -DSTREAMPOOL_BENCH_TORCH=1 -I"$2" -isystem "${torch}/include" \
    -isystem /usr/local/cuda/include bench/gpu_pool_bench.cpp /tmp/cmp/spin.o \
    "$3/libstreampool.so.0" -L"${torch}/lib" -lc10 -lc10_cuda -L/usr/local/cuda/lib64 -lcudart \
    -lpthread -Wl,-rpath,"${torch}/lib:$3" -o "/tmp/cmp/$1"
}
build new include "$(pwd)/.gpurun/lib" &
build base .gpurun/base/include "$(pwd)/.gpurun/base/lib" &
wait
echo "base: $(cat .gpurun/base/REVISION 2>/dev/null || echo '?'), new: this tree"
for ((r = 1; r <= rounds; ++r)); do
  for v in new base; do
    t0=${SECONDS}
    # shellcheck disable=SC2086 # PIN is a command and its arguments
    ${PIN:-} "/tmp/cmp/${v}" "$@" >"${out}/bench_${v}_${r}.txt" 2>&1 || echo "${v} round ${r}: rc=$?"
    echo "${v} round ${r}: $((SECONDS - t0)) s"
  done
done
