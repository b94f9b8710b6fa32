#!/usr/bin/env bash
# Runs on the GPU machine: gpu_pool_bench of this tree's library against other libraries, in
# alternating order in one call (A B C A B C ...), so that a change can be judged against its base
# on the same machine at the same time (compare ratios to the anchors, not absolute numbers between
# calls). Prepare here:
#   bash scripts/device-pack.sh                      # this tree -> .gpurun/lib (variant "new")
#   BASE=<rev> bash scripts/device-bench-compare.sh --pack
#                                                    # <rev>'s headers and library -> .gpurun/base
#   BASE=<rev> NAME=<v> bash scripts/device-bench-compare.sh --pack    # -> .gpurun/<v>
# then on the GPU machine: [VARIANTS="new base"] bash scripts/device-bench-compare.sh [ROUNDS] [ARGS]
# (ARGS go to gpu_pool_bench: --quick, --latency). Output: $OUT/bench_<variant>_<round>.txt, and
# every table row of every run in $OUT/bench_all.txt (scripts/bench-ab-summary.py reads it: medians
# and ratios to the last variant). PIN="taskset -c 3" runs them under that command (the one-thread
# rows of one binary swing 2x between runs on the H200 machine when unpinned; do not pin the
# multi-thread tables).
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
  dir=.gpurun/${NAME:-base}
  rm -rf "${dir}" && mkdir -p "${dir}/lib"
  cp -r "${wt}/include" "${dir}/include"
  # Under its SONAME, the name gpu_pool_bench loads (it differs between minor versions while the
  # major is 0: CMakeLists.txt, SOVERSION).
  soname=$(objdump -p "${wt}/build/libstreampool.so" | awk '$1 == "SONAME" { print $2 }')
  strip --strip-debug -o "${dir}/lib/${soname}" "${wt}/build/libstreampool.so"
  git -C "${wt}" rev-parse --short HEAD >"${dir}/REVISION"
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
    "$(compgen -G "$3/libstreampool.so.[0-9]*" | head -n1)" -L"${torch}/lib" -lc10 -lc10_cuda \
    -L/usr/local/cuda/lib64 -lcudart -lpthread -Wl,-rpath,"${torch}/lib:$3" -o "/tmp/cmp/$1"
}
read -r -a variants <<<"${VARIANTS:-new base}"
for v in "${variants[@]}"; do
  if [[ ${v} == new ]]; then
    build new include "$(pwd)/.gpurun/lib" &
  else
    build "${v}" ".gpurun/${v}/include" "$(pwd)/.gpurun/${v}/lib" &
  fi
done
wait
for v in "${variants[@]}"; do
  echo "${v}: $(cat ".gpurun/${v}/REVISION" 2>/dev/null || echo 'this tree')"
done
for ((r = 1; r <= rounds; ++r)); do
  for v in "${variants[@]}"; do
    t0=${SECONDS}
    # shellcheck disable=SC2086 # PIN is a command and its arguments
    ${PIN:-} "/tmp/cmp/${v}" "$@" >"${out}/bench_${v}_${r}.txt" 2>&1 || echo "${v} round ${r}: rc=$?"
    { echo "== bench_${v}_${r}.txt"; grep '^|' "${out}/bench_${v}_${r}.txt" | grep -v -- '---'; } \
      >>"${out}/bench_all.txt"
    echo "${v} round ${r}: $((SECONDS - t0)) s"
  done
done
