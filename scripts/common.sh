# shellcheck shell=bash disable=SC2034
# Shared by the scripts in this folder; sourced, not run.
#
# ensure_packages PKG...   installs, with apt-get, those of PKG that dpkg says are not installed
#                          (nothing is touched when all are present). Needs root or sudo.
# section TITLE            prints a visible header line with the elapsed time.

SP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SP_START_SECONDS=${SECONDS}
SP_JOBS="$(nproc)"

section() {
  printf '\n==== [%4ss] %s\n' "$((SECONDS - SP_START_SECONDS))" "$*"
}

ensure_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    if ! dpkg -s "${pkg}" 2>/dev/null | grep -q '^Status: install ok installed'; then
      missing+=("${pkg}")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "packages: all present ($*)"
    return 0
  fi
  echo "packages: installing ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      echo "error: missing packages ${missing[*]} and not root (no sudo)" >&2
      return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The packages every build needs: compiler, build tools, GoogleTest, Google Benchmark; pytest for
# the Python tests, jsonschema for the snapshot schema's test, pkg-config for the pkg-config
# consumer test, and headless Chromium, PIL and a font for the memory picture's render test
# (tests/report/check_page_renders.py).
SP_BASE_PACKAGES=(g++ cmake ninja-build libgtest-dev libbenchmark-dev python3 python3-pytest
                  python3-numpy python3-jsonschema python3-hypothesis pkg-config chromium python3-pil
                  fonts-dejavu-core)
# Debian's Python, for which python3-pytest and python3-venv are installed (PATH may put another
# python3 first). The tests' CMake configure and the python stage of run-tests.sh use it.
SP_PYTHON=/usr/bin/python3
# The OpenCL and Level Zero backends: API headers to build them (the runtimes are loaded with
# dlopen), PoCL to run OpenCL on the CPU, the Level Zero loader with its validation layer, and
# clang-15 + llvm-spirv-15 to compile the kernels to SPIR-V for Level Zero.
SP_BACKEND_PACKAGES=(opencl-headers ocl-icd-opencl-dev pocl-opencl-icd clinfo libze-dev libze1
                     clang-15 llvm-spirv-15 spirv-tools)
# The torch stage (run-tests.sh): what libstreampool_torch builds against without a CUDA toolkit,
# from PyPI with --no-deps. torch's wheel brings the headers, libc10 and libc10_cuda; c10's CUDA
# headers include CUDA's runtime headers, and libc10_cuda needs libcudart: nvidia-cuda-runtime
# and nvidia-cuda-crt at the versions torch 2.11 (+cu130) pins through cuda-toolkit==13.0.2.
# They install into <site-packages>/nvidia/cu13, where libc10_cuda's RPATH looks.
SP_TORCH_WHEELS=("torch==2.11.0" "nvidia-cuda-runtime==13.0.96.*" "nvidia-cuda-crt==13.0.88.*")
SP_TORCH_CUDA_SUBDIR=nvidia/cu13
# Sanitizer runtimes for g++ (normally pulled in by g++ already; listed so a trimmed image works).
SP_SANITIZER_PACKAGES=(libasan8 libubsan1 libtsan2)

# Runs "$@" with address-space randomisation off when the kernel allows it. ThreadSanitizer and
# AddressSanitizer runtimes of this toolchain can fail to map their shadow memory on kernels with
# high mmap randomisation (vm.mmap_rnd_bits > 28); without ASLR they always can.
without_aslr() {
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    setarch "$(uname -m)" -R "$@"
  else
    "$@"
  fi
}
