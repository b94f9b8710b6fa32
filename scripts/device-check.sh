#!/usr/bin/env bash
# Runs on the GPU machine, in the repository root, after scripts/device-pack.sh (which builds here
# what the GPU machine cannot: it has CUDA, CMake and PyTorch but no GoogleTest). Stages, chosen
# with DEVICE_CHECK_STAGES (default: all of them, in this order):
#   tests   the GPU tests (backend contract, conformance, origin scenarios, virtual memory),
#           compute-sanitizer over the scenarios, the fault-injection library against the same
#           tests (they must fail)
#   torch   bench/torch/record_stream_check.py: the plug-in's record_stream, size 0, OOM, empty_cache
#   python  the binding's tests (tests/python) on the GPU, with PyTorch and CuPy there: DLPack and
#           the CUDA array interface both ways, streampool.cupy over 10,000 CuPy streams. From the
#           source tree, and again from the wheel in .gpurun/wheel/ when there is one (pip wheel .
#           here; installed with --no-index into a venv that sees the machine's torch and cupy),
#           with neither PYTHONPATH nor STREAMPOOL_LIBRARY
#   replay  the GPT-2 trace through streampool on CUDA
#   picture the memory picture from real runs (docs/memory-picture.md): a snapshot of the PyTorch
#           plug-in's pool taken mid-training (GPT-2, step 2, after the forward pass) and its page
#           (python -m streampool.report); `replay --html` of the GPT-2 trace on CUDA. Into $OUT:
#           gpt2-snapshot.json, gpt2-snapshot.html, replay-cuda.html
#   bench   gpu_pool_bench, compiled here against the carried library and PyTorch's c10 (its
#           anchors: cudaMalloc, cudaMallocAsync, PyTorch's caching allocator)
#   e2e     bench/torch/run.py: GPT-2 and ResNet-50 training and the multi-stream server under
#           every allocator (E2E_ROUNDS, E2E_STEPS, E2E_WORKLOADS)
#   traces  what the PyTorch plug-in serves in one streampool run of each of E2E_WORKLOADS
#           (STREAMPOOL_TORCH_TRACE, 10 timed steps), gzipped into one $OUT/traces.tar for
#           tools/replay here (the device tool brings back at most 8 files)
# Logs go to $OUT; each stage prints one status line per program.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "${out}"
root=$(pwd)
stages=${DEVICE_CHECK_STAGES:-tests torch python replay bench e2e}  # traces: only when asked
lib=${root}/.gpurun/lib
run() { # name, command...: logs to $out/name.txt and prints one status line
  local name=$1
  shift
  local t0=${SECONDS}
  "$@" >"${out}/${name}.txt" 2>&1
  local rc=$?
  echo "${name}: rc=${rc} ($((SECONDS - t0)) s) $(grep -E 'PASSED|FAILED|SKIPPED|ERROR SUMMARY' "${out}/${name}.txt" | tr '\n' ' ' | cut -c1-300)"
}
has() { [[ " ${stages} " == *" $1 "* ]]; }
nvidia-smi -L
# The library as device-pack.sh packed it, under its SONAME (libstreampool.so.0.2 while the major
# version is 0).
streampool_lib=$(compgen -G "${lib}/libstreampool.so.[0-9]*" | head -n1)
export STREAMPOOL_LIBRARY=${streampool_lib}

if has tests; then
  export LD_LIBRARY_PATH=${lib}
  for t in cuda_backend_test cuda_conformance_test cuda_scenarios_test cuda_virtual_memory_test; do
    run "${t}" ".gpurun/bin/${t}"
  done
  # The scenario conformance suite (origin scenarios, ordering test) is in cuda_conformance_test.
  scenarios='Cuda/ScenarioConformance/*'
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 \
    .gpurun/bin/cuda_conformance_test \
    --gtest_filter="${scenarios}.OriginArraysDroppedAfter*:${scenarios}.CrossStreamReuseWaits*"
  run memcheck_vm compute-sanitizer --tool memcheck --error-exitcode 9 \
    .gpurun/bin/cuda_virtual_memory_test
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 \
    .gpurun/bin/cuda_conformance_test --gtest_filter="${scenarios}.OriginArraysDroppedConcurrently*"
  run fault_scenarios env LD_LIBRARY_PATH="${root}/.gpurun/faultlib" \
    .gpurun/bin/cuda_conformance_test --gtest_filter="${scenarios}.CrossStreamReuseWaits*"
  run fault_conformance env LD_LIBRARY_PATH="${root}/.gpurun/faultlib" \
    .gpurun/bin/cuda_conformance_test --gtest_filter="-${scenarios}"
  unset LD_LIBRARY_PATH
fi

if has torch; then
  run record_stream env PYTHONUNBUFFERED=1 python3 bench/torch/record_stream_check.py \
    "${RECORD_STREAM_TRIALS:-1000}"
  cat "${out}/record_stream.txt"
fi

if has python; then
  # pytest where the machine has it, else unittest (the tests are unittest classes).
  pyrun() { # directory to run in, then the test files
    local where=$1
    shift
    if python3 -c 'import pytest' 2>/dev/null; then
      (cd "${where}" && python3 -m pytest -v -s -p no:cacheprovider "$@")
    else
      (cd "${where}" && python3 -m unittest -v "$@")
    fi
  }
  run python_tree env PYTHONPATH="${root}/python" PYTHONUNBUFFERED=1 \
    bash -c "$(declare -f pyrun); pyrun '${root}/tests/python' test_gpu_interop.py test_interop.py"
  grep -E 'streampool.cupy:|Ran |passed|failed|OK|FAILED' "${out}/python_tree.txt" | head -20
  wheel=$(ls .gpurun/wheel/*.whl 2>/dev/null | head -n1)
  if [[ -n ${wheel} ]]; then
    venv=/tmp/streampool-venv
    rm -rf "${venv}"
    # The machine's python3 may itself be a venv (torch and cupy live there): a .pth file lets
    # the new venv see its packages, as --system-site-packages would for a system Python.
    site_dirs=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))')
    python3 -m venv "${venv}" &&
      echo "${site_dirs}" >"$("${venv}/bin/python3" -c 'import site; print(site.getsitepackages()[0])')/machine.pth" &&
      "${venv}/bin/pip" install -q --no-deps --no-index "${wheel}"
    # No PYTHONPATH, no STREAMPOOL_LIBRARY: `import streampool` finds the installed package.
    run python_wheel env -u STREAMPOOL_LIBRARY -u PYTHONPATH STREAMPOOL_EXPECT_INSTALLED=1 \
      PATH="${venv}/bin:${PATH}" PYTHONUNBUFFERED=1 \
      bash -c "$(declare -f pyrun); pyrun '${root}/tests/python'"
    grep -E 'streampool.cupy:|Ran |passed|failed|OK|FAILED' "${out}/python_wheel.txt" | head -20
  fi
fi

if has replay; then
  run replay env LD_LIBRARY_PATH="${lib}" .gpurun/bin/replay --backend cuda --backend host \
    --backend exact bench/traces/gpt2-train.txt.gz
  sed -n '/^| allocator/,$p' "${out}/replay.txt"
fi

if has picture; then
  run picture_train env PYTHONPATH="${root}/python" PYTHONUNBUFFERED=1 python3 \
    bench/torch/workload.py --allocator streampool --workload gpt2 --warmup 1 --steps 2 \
    --snapshot "2:${out}/gpt2-snapshot.json" --json /tmp/picture-train.json
  run picture_report env PYTHONPATH="${root}/python" python3 -m streampool.report \
    "${out}/gpt2-snapshot.json" -o "${out}/gpt2-snapshot.html" \
    --title "streampool under PyTorch: GPT-2 training, step 2, after the forward pass"
  run picture_replay env LD_LIBRARY_PATH="${lib}" .gpurun/bin/replay --backend cuda \
    --backend exact --backend exact-granular --html "${out}/replay-cuda.html" \
    bench/traces/gpt2-train.txt.gz
  cat "${out}/picture_report.txt"
  sed -n '/^| allocator/,$p' "${out}/picture_replay.txt"
  rm -f "${out}/picture_train.txt" "${out}/picture_report.txt" "${out}/picture_replay.txt"
fi

if has bench; then
  torch=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
  t0=${SECONDS}
  mkdir -p /tmp/bench
  { nvcc -O2 -arch=sm_90 -c bench/spin_kernel.cu -o /tmp/bench/spin.o &&
    g++ -O2 -std=c++20 -DSTREAMPOOL_BENCH_TORCH=1 -Iinclude -isystem "${torch}/include" \
      -isystem /usr/local/cuda/include bench/gpu_pool_bench.cpp /tmp/bench/spin.o \
      "${streampool_lib}" -L"${torch}/lib" -lc10 -lc10_cuda -L/usr/local/cuda/lib64 \
      -lcudart -lpthread -Wl,-rpath,"${torch}/lib:${lib}" -o /tmp/bench/gpu_pool_bench; } \
    >"${out}/bench_build.txt" 2>&1
  echo "bench build: rc=$? ($((SECONDS - t0)) s)"
  run gpu_pool_bench /tmp/bench/gpu_pool_bench
  tail -n 60 "${out}/gpu_pool_bench.txt"
fi

if has e2e; then
  t0=${SECONDS}
  PYTHONUNBUFFERED=1 python3 bench/torch/run.py --rounds "${E2E_ROUNDS:-3}" \
    --steps "${E2E_STEPS:-40}" --workloads "${E2E_WORKLOADS:-gpt2,resnet50,server}" \
    --out "${out}/e2e.json" 2>&1 | tee "${out}/e2e.txt"
  echo "e2e: $((SECONDS - t0)) s"
fi

if has traces; then
  # Logs go into the tar too: $OUT keeps to one file for this stage.
  mkdir -p /tmp/traces
  for w in $(echo "${E2E_WORKLOADS:-gpt2,resnet50,server}" | tr , ' '); do
    PYTHONUNBUFFERED=1 STREAMPOOL_TORCH_TRACE="/tmp/traces/${w}-plugin.txt" python3 \
      bench/torch/workload.py --allocator streampool --workload "${w}" --steps 10 \
      --json "/tmp/traces/${w}.json" >"/tmp/traces/${w}.log" 2>&1
    echo "trace ${w}: rc=$?"
    gzip -f "/tmp/traces/${w}-plugin.txt"
  done
  tar -C /tmp/traces -cf "${out}/traces.tar" .
  ls -la /tmp/traces
fi
