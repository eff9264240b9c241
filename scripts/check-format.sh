#!/usr/bin/env bash
# Fails when any C++ source of the project is not formatted with the repo's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cpp' '*.h' 2>/dev/null || find src tests bench fuzz examples -name '*.cpp' -o -name '*.h')
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -w) files clean"
