#!/usr/bin/env bash
# Lint: clang-format (check or fix) and clang-tidy over the sources.
#
#   bash scripts/lint.sh                 format check + clang-tidy + complexity
#   bash scripts/lint.sh --complexity    no function in src/core over 120 lines or 30 branches
#   bash scripts/lint.sh --layers        src/core's include rule (src/core/README.md)
#   bash scripts/lint.sh --format        clang-format --dry-run -Werror only
#   bash scripts/lint.sh --fix-format    clang-format -i (rewrites files)
#   bash scripts/lint.sh --tidy [BUILD [PATHSPEC]]
#                                        clang-tidy on src/ (or the git PATHSPEC's .cpp files)
#                                        with BUILD/compile_commands.json (default build/release,
#                                        configured if missing); only the files BUILD compiles
#
# Installs clang-format and clang-tidy (Debian 12: version 14) when they are missing. Exits non-zero
# on any format difference or any clang-tidy finding (.clang-tidy makes every check an error);
# scripts/run-tests.sh runs it in CI.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "${SP_ROOT}"

mode=${1:-all}
build_dir=${2:-build/release}
tidy_pathspec=${3:-src/*.cpp}

find_tool() {
  local t
  for t in "$@"; do
    if command -v "${t}" >/dev/null; then
      echo "${t}"
      return 0
    fi
  done
  echo "error: none of $* found (apt-get install clang-format clang-tidy)" >&2
  return 1
}

format_files() {
  git ls-files -- 'src/*' 'include/*' 'tests/*' 'bench/*' 'examples/*' 'fuzz/*' 'tools/*' |
    grep -E '\.(c|h|cpp|hpp|cu|cuh)$' || true
}

do_format() {
  local fmt
  fmt=$(find_tool clang-format clang-format-14)
  mapfile -t files < <(format_files)
  ((${#files[@]})) || { echo "format: no files"; return 0; }
  if [[ $1 == fix ]]; then
    "${fmt}" -i "${files[@]}"
  else
    "${fmt}" --dry-run -Werror "${files[@]}"
    echo "format: ${#files[@]} files clean"
  fi
}

do_tidy() {
  local tidy
  tidy=$(find_tool clang-tidy clang-tidy-14)
  if [[ ! -f ${build_dir}/compile_commands.json ]]; then
    cmake --preset release
    build_dir=build/release
  fi
  # Only what this build compiles: clang-tidy would guess the flags of any other file and fail on
  # its includes. src/torch/ needs torch's headers: the torch preset builds and lints it
  # (run-tests.sh).
  mapfile -t files < <(git ls-files -- "${tidy_pathspec}" | "${SP_PYTHON}" -c '
import json, os, sys
built = {os.path.realpath(os.path.join(e["directory"], e["file"]))
         for e in json.load(open(sys.argv[1]))}
for f in sys.stdin.read().split():
    if os.path.realpath(f) in built:
        print(f)
' "${build_dir}/compile_commands.json")
  ((${#files[@]})) || { echo "tidy: no files"; return 0; }
  # The release library is built with link-time optimisation; clang does not know GCC's
  # -fno-fat-lto-objects, which changes nothing that clang-tidy reads.
  printf '%s\n' "${files[@]}" | xargs -P "${SP_JOBS}" -n 1 "${tidy}" -p "${build_dir}" --quiet \
    --extra-arg=-Wno-ignored-optimization-argument
  echo "tidy: ${#files[@]} files clean"
}

# Complexity (docs/design.md, "Size"): lizard, from PyPI into a venv of its own under build/.
do_complexity() {
  local venv=build/lizard-venv
  if [[ ! -x ${venv}/bin/lizard ]]; then
    "${SP_PYTHON}" -m venv "${venv}"
    "${venv}/bin/pip" install --quiet lizard==1.24.3
  fi
  "${venv}/bin/lizard" --length 120 --CCN 30 --warnings_only src/core
  echo "complexity: every function in src/core within 120 lines and 30 branches"
}

# Layers (src/core/README.md): support/ includes nothing of stream/ or pool/; stream/ includes
# pool/ only in the two files the README names.
do_layers() {
  local bad
  bad=$(grep -n '#include "core/\(stream\|pool\)/' src/core/support/* || true)
  bad+=$(grep -n '#include "core/pool/' src/core/stream/* |
    grep -v '^src/core/stream/\(timeline\|device\)\.cpp:' || true)
  if [[ -n ${bad} ]]; then
    echo "layers: an include against src/core/README.md's rule:" >&2
    echo "${bad}" >&2
    return 1
  fi
  echo "layers: src/core's includes follow src/core/README.md"
}

case ${mode} in
  all | --complexity) ensure_packages python3-venv ;;&
  all | --format | --fix-format) ensure_packages clang-format ;;&
  all | --tidy) ensure_packages clang-tidy ;;&
  *) ;;
esac

case ${mode} in
  all) do_format check; do_tidy; do_complexity; do_layers ;;
  --complexity) do_complexity ;;
  --layers) do_layers ;;
  --format) do_format check ;;
  --fix-format) do_format fix ;;
  --tidy) do_tidy ;;
  *) echo "usage: $0 [--format|--fix-format|--complexity|--layers|--tidy [build-dir]]" >&2; exit 2 ;;
esac
