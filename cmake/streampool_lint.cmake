# Lint targets for this repository (only when streampool is the top-level project):
#   format        rewrites the sources in place with clang-format
#   format-check  clang-format --dry-run -Werror (what CI's lint step runs)
#   tidy          clang-tidy over src/ using this build's compile_commands.json
# scripts/lint.sh does the same without a configured build tree.
include_guard(GLOBAL)

find_program(STREAMPOOL_CLANG_FORMAT NAMES clang-format clang-format-14)
find_program(STREAMPOOL_CLANG_TIDY NAMES clang-tidy clang-tidy-14)

if(STREAMPOOL_CLANG_FORMAT)
  add_custom_target(
    format
    COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/lint.sh" --fix-format
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    COMMENT "clang-format -i over the sources"
    VERBATIM)
  add_custom_target(
    format-check
    COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/lint.sh" --format
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    COMMENT "clang-format --dry-run -Werror over the sources"
    VERBATIM)
endif()

if(STREAMPOOL_CLANG_TIDY)
  add_custom_target(
    tidy
    COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/lint.sh" --tidy "${PROJECT_BINARY_DIR}"
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    COMMENT "clang-tidy over src/"
    VERBATIM)
endif()
